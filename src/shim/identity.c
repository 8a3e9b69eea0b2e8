/* SPDX-License-Identifier: MIT */
/* Who this process is: participant id, namespace PID, control directory and
 * endpoint path (DESIGN.md §3, §4.3), made lazily on the first tracked call so
 * that a child forked before CUDA init gets its own. Fork safety lives here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/control.h"
#include "cusnap/log.h"
#include "cusnap/topo.h"
#include "shim.h"

bool shim_forked_child;

static pthread_mutex_t identity_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shim_identity self;
static bool have_identity;
static bool published; /* set once self is complete; read without the lock */
static pid_t env_pid;  /* the process that read the environment */
static char env_participant[64];

static int deadline_ms = 10000;
bool shim_export_many = true;

/* The file ring's default: see DESIGN.md §11.1 for the measurement. */
static unsigned ring_slots = 4, ring_mib = 16;
static bool ring_asked; /* the geometry set by SNAPSHOT_CUDA_VMM_RING: kept whatever the lane */

void shim_ring(size_t lane_bytes, size_t *slots, size_t *bytes)
{
	*slots = ring_slots;
	*bytes = (size_t)ring_mib << 20;
	if (ring_asked)
		return;
	/* A ring of at most an eighth of what the lane moves, in slots of 2 MiB
	 * multiples: fresh pinned memory costs its pages (up to 100 ms for 64
	 * MiB of huge pages made the first time, on this project's VMs), which
	 * a small lane would pay in full for no faster copy. */
	size_t unit = (size_t)2 << 20, per = (lane_bytes / 8 / *slots + unit - 1) / unit * unit;
	per = per < unit ? unit : per;
	*bytes = per < *bytes ? per : *bytes;
}

int shim_deadline_ms(void)
{
	return deadline_ms;
}

void shim_lock_for_fork(pthread_mutex_t *m, bool take)
{
	if (take)
		pthread_mutex_lock(m);
	else
		pthread_mutex_unlock(m);
}

static void before_fork(void);
static void after_fork_parent(void);
static void after_fork_child(void);
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void register_atfork(void)
{
	/* Registered at the first tracked call, after the driver's own handlers
	 * (cuInit): prepare handlers run last-registered first, so ours takes the
	 * table lock before the driver takes its locks, the order every wrapper
	 * uses (table lock, then the driver call). */
	pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

const struct shim_identity *shim_identity(const char **why)
{
	pthread_once(&atfork_once, register_atfork);
	if (shim_forked_child) {
		*why = "this process was forked from a process that tracks CUDA VMM state; its tracked "
		       "allocations cannot be shared with or checkpointed from the child (exec or spawn "
		       "the child instead)";
		return NULL;
	}
	pthread_mutex_lock(&identity_lock);
	if (!have_identity) {
		memset(&self, 0, sizeof(self));
		self.pid = getpid();
		self.nspid = getpid(); /* getpid() answers in our own PID namespace */
		if (env_participant[0] && env_pid == self.pid) {
			if (id_parse(env_participant, &self.id) < 0) {
				LOG_AT(LOG_WARN, "SNAPSHOT_PARTICIPANT_ID is not 32 hex digits; using a random id");
				id_random(&self.id);
			}
		} else {
			id_random(&self.id);
		}
		snprintf(self.control_dir, sizeof(self.control_dir), "%s", control_dir_from_env());
		snprintf(self.endpoint, sizeof(self.endpoint), "%s/" CONTROL_ENDPOINT_FMT, self.control_dir,
			 (int)self.nspid);
		have_identity = true;
		__atomic_store_n(&published, true, __ATOMIC_RELEASE);
		self.serving = endpoint_start(&self) == 0;
		if (!self.serving)
			LOG_AT(LOG_ERROR,
			       "endpoint %s could not be started: no other process could redeem this one's "
			       "exports, so they are the driver's own file descriptors (sharing works, untracked), "
			       "and its tree cannot be checkpointed until it runs with a working endpoint",
			       self.endpoint);
	}
	pthread_mutex_unlock(&identity_lock);
	return &self;
}

const struct shim_identity *shim_self(void)
{
	return __atomic_load_n(&published, __ATOMIC_ACQUIRE) && !shim_forked_child ? &self : NULL;
}

static void before_fork(void)
{
	legacy_lock_for_fork(true);
	pthread_mutex_lock(&identity_lock);
	pthread_mutex_lock(&tbl.lock);
	exports_lock_for_fork(true);
	unrestorable_lock_for_fork(true);
}

static void after_fork_parent(void)
{
	unrestorable_lock_for_fork(false);
	exports_lock_for_fork(false);
	pthread_mutex_unlock(&tbl.lock);
	pthread_mutex_unlock(&identity_lock);
	legacy_lock_for_fork(false);
}

static void after_fork_child(void)
{
	/* The endpoint thread did not survive the fork. A child of a process that
	 * tracked nothing starts afresh; one that inherited tracked state must not
	 * use it (it would share or lose it silently). */
	if (tbl.allocs.len)
		shim_forked_child = true;
	have_identity = false;
	published = false;
	unrestorable_lock_for_fork(false);
	exports_lock_for_fork(false);
	endpoint_after_fork_child();
	cap_forget_all(); /* its kept capabilities are the parent's */
	pthread_mutex_unlock(&tbl.lock);
	pthread_mutex_unlock(&identity_lock);
	legacy_lock_for_fork(false);
}

__attribute__((constructor)) static void shim_init(void)
{
	/* Only the environment is read here. */
	const char *lvl = getenv("SNAPSHOT_CUDA_VMM_LOG");
	log_init("snapshot-cuda-vmm", lvl ? atoi(lvl) : LOG_WARN, STDERR_FILENO);
	const char *ipc = getenv("SNAPSHOT_CUDA_VMM_IPC");
	shim_ipc_adapter = !ipc || strcmp(ipc, "0") != 0;
	const char *many = getenv("SNAPSHOT_CUDA_VMM_EXPORT_MANY");
	shim_export_many = !many || strcmp(many, "0") != 0;
	const char *dl = getenv("SNAPSHOT_CUDA_VMM_DEADLINE_MS");
	if (dl && atoi(dl) > 0)
		deadline_ms = atoi(dl);
	const char *ring = getenv("SNAPSHOT_CUDA_VMM_RING");
	unsigned slots = 0, mib = 0;
	if (ring && sscanf(ring, "%ux%u", &slots, &mib) == 2 && slots >= 2 && slots <= SHIM_RING_MAX_SLOTS &&
	    mib >= 2 && mib <= 1024 && mib % 2 == 0)
		ring_slots = slots, ring_mib = mib, ring_asked = true;
	const char *pid = getenv("SNAPSHOT_PARTICIPANT_ID");
	if (pid && *pid) {
		snprintf(env_participant, sizeof(env_participant), "%s", pid);
		env_pid = getpid();
	}
}
