/* SPDX-License-Identifier: MIT */
/* The target side of the checkpoint API: a thread that owns a listening socket
 * and performs lock, checkpoint, restore and unlock on its own process.
 *
 * The socket lives at <CUEMU_RUN_DIR or /tmp/cuemu-UID>/cuemu-ckpt-<pidns>-<nspid>.sock
 * in the process's own mount namespace; callers find it through
 * /proc/PID/fd and /proc/PID/net/unix and reach it through /proc/PID/root, so
 * neither PID nor mount namespaces get in the way, and a CRIU restore (which
 * rebinds the listening socket at its path) keeps it working. */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ckpt_wire.h"
#include "cusnap/atomicfile.h"
#include "cusnap/hostmem.h"
#include "cusnap/usock.h"
#include "cusnap/log.h"
#include "emu.h"

static int listen_fd = -1;
static pid_t server_tid;
static bool server_started;
static pid_t server_pid;
static char server_path[4200];
static uint32_t checkpointed_devices; /* bitmask of devices in the last checkpoint */

static bool is_mem(const struct emu_alloc *a)
{
	return a->kind == EMU_OBJ_MEMORY;
}

/* Release every device backing into private host memory. Caller holds emu.lock;
 * the process is LOCKED. On failure nothing has changed. */
static CUresult do_checkpoint(void)
{
	if (emu.multicast_objects) {
		/* Real driver: the checkpoint never completes. */
		LOG_AT(LOG_ERROR,
		       "native checkpoint of a process holding %zu multicast object(s) does not complete "
		       "(the driver hangs); failing with CUDA_ERROR_NOT_SUPPORTED",
		       emu.multicast_objects);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	/* Legacy IPC outside a job: r580 checkpoints it and refuses the restore
	 * (restorable). */
	bool job = emu_job_rules(); /* legacy IPC carried by the driver (job.c) */
	for (size_t i = 0; i < emu.allocs.cap; i++) {
		struct emu_alloc *a = emu.allocs.vals[i];
		if (!emu.allocs.keys[i] || !is_mem(a) || a->fd < 0 || (job && a->ipc_peer))
			continue; /* (a peer's memory: its exporter saves it) */
		a->saved = hostmem_alloc(a->size, COUNT_EMU_MMAP);
		size_t done = 0;
		while (a->saved && done < a->size) {
			ssize_t n = pread(a->fd, (uint8_t *)a->saved + done, a->size - done, (off_t)done);
			if (n <= 0)
				break;
			done += (size_t)n;
		}
		if (!a->saved || done < a->size) {
			for (size_t j = 0; j <= i; j++) {
				struct emu_alloc *b = emu.allocs.vals[j];
				if (emu.allocs.keys[j] && b->fd >= 0) {
					hostmem_free(b->saved, b->size, COUNT_EMU_MMAP);
					b->saved = NULL;
				}
			}
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	for (struct itree_node *n = itree_first_from(&emu.mappings, 0); n; n = itree_next(&emu.mappings, n)) {
		struct emu_mapping *m = (struct emu_mapping *)n;
		if (emu_mapping_holds_range(m))
			emu_revoke(n->start, n->end - n->start);
		m->placed = false;
	}
	emu_revoke_flush(); /* (with whatever cuMemUnmap left queued) */
	checkpointed_devices = 0;
	struct emu_alloc *a;
	hmap_for_each(&emu.allocs, a) {
		if (!is_mem(a))
			continue;
		if (a->fd < 0) {
			/* Never backed: no bytes, but its device memory is released too. */
			if (a->counted) {
				emu.dev[a->prop.location.id].used -= a->size;
				a->counted = false;
				a->ckpt_unbacked = true;
				checkpointed_devices |= 1u << a->prop.location.id;
			}
			continue;
		}
		if (job && a->ipc_peer)
			continue; /* kept: the exporter's memory, mapped again after the restore */
		if (job && a->ipc_exported) {
			/* The memory goes, the object stays: peers' handles and mappings still name it. */
			if (ftruncate(a->fd, 0) < 0)
				LOG_AT(LOG_WARN, "checkpoint: cannot release an IPC-exported memfd: %s",
				       strerror(errno));
		} else {
			close(a->fd);
			a->fd = -1;
		}
		if (a->counted)
			emu.dev[a->prop.location.id].used -= a->size;
		a->counted = false;
		if (!emu_on_host(&a->prop))
			checkpointed_devices |= 1u << a->prop.location.id;
	}
	for (int d = 0; d < emu.ndev; d++)
		if (emu.dev[d].primary && emu.dev[d].primary->active)
			checkpointed_devices |= 1u << d;
	return CUDA_SUCCESS;
}

static int device_by_uuid(const uint8_t *uuid)
{
	for (int d = 0; d < emu.ndev; d++)
		if (memcmp(emu.dev[d].uuid.bytes, uuid, 16) == 0)
			return d;
	return -1;
}

/* Resolve gpuPairs into map[old] = new. Every checkpointed device must be listed
 * and every target must exist. Nothing changes on failure. */
static CUresult resolve_pairs(const uint8_t *pairs, unsigned npairs, int *map)
{
	for (int d = 0; d < EMU_MAX_DEVICES; d++)
		map[d] = d;
	if (!npairs)
		return CUDA_SUCCESS;
	for (int d = 0; d < emu.ndev; d++) {
		if (!(checkpointed_devices & (1u << d)))
			continue;
		int found = -1;
		for (unsigned i = 0; i < npairs; i++) {
			const uint8_t *p = pairs + (size_t)i * CKPT_PAIR_LEN;
			if (memcmp(p, emu.dev[d].uuid.bytes, 16) == 0)
				found = device_by_uuid(p + 16);
			if (memcmp(p, emu.dev[d].uuid.bytes, 16) == 0 && found < 0) {
				LOG_AT(LOG_WARN, "restore: the new GPU for device %d is not present", d);
				return CUDA_ERROR_INVALID_VALUE;
			}
		}
		if (found < 0) {
			LOG_AT(LOG_WARN, "restore: gpuPairs does not list checkpointed device %d", d);
			return CUDA_ERROR_INVALID_VALUE;
		}
		map[d] = found;
	}
	return CUDA_SUCCESS;
}

/* What r580 checkpoints but will not restore (GPU script E3, G7, E7): an
 * imported allocation (CUDA_ERROR_NOT_SUPPORTED) and memory opened through
 * legacy IPC (CUDA_ERROR_INVALID_VALUE). The process stays CHECKPOINTED.
 * Caller holds emu.lock. */
static CUresult restorable(void)
{
	if (emu.ipc_opened && !emu_job_rules()) {
		LOG_AT(LOG_ERROR,
		       "native restore of a process holding %zu opened legacy IPC mapping(s): "
		       "CUDA_ERROR_INVALID_VALUE (r580)",
		       emu.ipc_opened);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct emu_alloc *a;
	hmap_for_each(&emu.allocs, a) {
		if (is_mem(a) && a->imported && !a->ipc_peer) {
			LOG_AT(LOG_ERROR,
			       "native restore of a process holding an imported allocation (%zu bytes): "
			       "CUDA_ERROR_NOT_SUPPORTED (r580)",
			       a->size);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	return CUDA_SUCCESS;
}

/* Recreate device backing from the saved bytes at the same addresses, on the
 * devices given by map. Caller holds emu.lock. A failure here is final: the
 * process goes to FAILED (as the driver leaves it unrestorable). */
static CUresult do_restore(const int *map)
{
	size_t need[EMU_MAX_DEVICES] = {0};
	struct emu_alloc *a;
	hmap_for_each(&emu.allocs, a)
		if (is_mem(a) && (a->saved || a->ckpt_unbacked) && !emu_on_host(&a->prop))
			need[map[a->prop.location.id]] += a->size;
	for (int d = 0; d < emu.ndev; d++) {
		if (need[d] > emu.dev[d].capacity - emu.dev[d].used) {
			LOG_AT(LOG_WARN, "restore: device %d lacks memory (%zu bytes needed)", d, need[d]);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	hmap_for_each(&emu.allocs, a) {
		if (is_mem(a) && a->ckpt_unbacked) {
			int dev = map[a->prop.location.id];
			a->prop.location.id = dev;
			a->ckpt_unbacked = false;
			a->native_restored = true;
			a->counted = true;
			emu.dev[dev].used += a->size;
			continue;
		}
		if (!is_mem(a) || !a->saved)
			continue;
		bool host = emu_on_host(&a->prop); /* host memory stays where it is: no GPU to remap */
		int dev = host ? a->prop.location.id : map[a->prop.location.id];
		/* Kept through a job's checkpoint (IPC-exported): the same object grows back. */
		int fd = a->fd >= 0 ? (ftruncate(a->fd, (off_t)a->size) == 0 ? a->fd : -errno)
				    : emu_memfd(emu_mem_kind(&a->prop), dev, (unsigned)a->prop.requestedHandleTypes,
						a->size);
		size_t done = 0;
		while (fd >= 0 && done < a->size) {
			ssize_t n = pwrite(fd, (uint8_t *)a->saved + done, a->size - done, (off_t)done);
			if (n <= 0)
				break;
			done += (size_t)n;
		}
		if (fd < 0 || done < a->size) {
			if (fd >= 0)
				close(fd);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		hostmem_free(a->saved, a->size, COUNT_EMU_MMAP);
		a->saved = NULL;
		a->fd = fd;
		a->prop.location.id = dev;
		a->native_restored = true;
		if (!host) {
			a->counted = true;
			emu.dev[dev].used += a->size;
		}
	}
	for (struct itree_node *n = itree_first_from(&emu.mappings, 0); n; n = itree_next(&emu.mappings, n)) {
		struct emu_mapping *m = (struct emu_mapping *)n;
		unsigned char access[EMU_MAX_DEVICES] = {0};
		for (int d = 0; d < emu.ndev; d++)
			if (m->access[d] > access[map[d]])
				access[map[d]] = m->access[d];
		memcpy(m->access, access, sizeof(access));
		int prot = emu_mapping_prot(m);
		if (prot == PROT_NONE) /* (placed by its first grant) */
			continue;
		if (emu_mmap((void *)(uintptr_t)n->start, n->end - n->start, prot, MAP_SHARED | MAP_FIXED, m->alloc->fd,
			     (off_t)m->offset) == MAP_FAILED)
			return CUDA_ERROR_OUT_OF_MEMORY;
		m->placed = true;
	}
	struct emu_ctx *primaries[EMU_MAX_DEVICES] = {0};
	unsigned refs[EMU_MAX_DEVICES] = {0};
	for (int d = 0; d < emu.ndev; d++) {
		if (emu.dev[d].primary && !primaries[map[d]]) {
			primaries[map[d]] = emu.dev[d].primary;
			refs[map[d]] = emu.dev[d].primary_refs;
			emu.dev[d].primary->device = map[d];
		}
	}
	for (int d = 0; d < emu.ndev; d++) {
		emu.dev[d].primary = primaries[d];
		emu.dev[d].primary_refs = refs[d];
	}
	return CUDA_SUCCESS;
}

static CUresult serve_op(enum ckpt_op op, unsigned timeout_ms, uint64_t job, const uint8_t *pairs, unsigned npairs,
			 int *value)
{
	CUresult rc = CUDA_SUCCESS;
	*value = 0;
	switch (op) {
	case CKPT_OP_LOCK: return emu_gate_lock(timeout_ms);
	case CKPT_OP_UNLOCK: return emu_gate_unlock();
	case CKPT_OP_STATE: *value = (int)emu_gate_state(); return CUDA_SUCCESS;
	case CKPT_OP_TID: *value = (int)server_tid; return CUDA_SUCCESS;
	case CKPT_OP_CHECKPOINT:
		if (emu_gate_state() != CU_PROCESS_STATE_LOCKED)
			return CUDA_ERROR_ILLEGAL_STATE;
		if (emu.ckpt_stall_ms) {
			/* A driver stuck in the checkpoint (the real one hangs on a multicast
			 * object it cannot save): for the orchestrator's watchdog tests. */
			LOG_AT(LOG_WARN, "CUEMU_CKPT_STALL_MS: the checkpoint stalls");
			usleep((useconds_t)emu.ckpt_stall_ms * 1000u);
		}
		rc = emu_job_may_checkpoint(job, emu.ipc_opened || emu.ipc_exported);
		if (rc == CUDA_SUCCESS)
			rc = emu_job_begin();
		if (rc != CUDA_SUCCESS)
			return rc;
		pthread_mutex_lock(&emu.lock);
		rc = do_checkpoint();
		pthread_mutex_unlock(&emu.lock);
		emu_job_end();
		if (rc == CUDA_SUCCESS)
			emu_gate_set(CU_PROCESS_STATE_CHECKPOINTED);
		return rc;
	case CKPT_OP_RESTORE: {
		if (emu_gate_state() != CU_PROCESS_STATE_CHECKPOINTED)
			return CUDA_ERROR_ILLEGAL_STATE;
		rc = emu_job_may_restore();
		if (rc == CUDA_SUCCESS)
			rc = emu_job_begin();
		if (rc != CUDA_SUCCESS)
			return rc;
		int map[EMU_MAX_DEVICES];
		pthread_mutex_lock(&emu.lock);
		rc = restorable();
		if (rc != CUDA_SUCCESS) { /* refused before anything changed: still CHECKPOINTED */
			pthread_mutex_unlock(&emu.lock);
			emu_job_end();
			return rc;
		}
		rc = resolve_pairs(pairs, npairs, map);
		if (rc == CUDA_SUCCESS) {
			rc = do_restore(map);
			if (rc != CUDA_SUCCESS)
				LOG_AT(LOG_ERROR, "native restore failed (%d): the process cannot be restored any more",
				       (int)rc);
		}
		pthread_mutex_unlock(&emu.lock);
		emu_job_end();
		if (rc == CUDA_SUCCESS)
			emu_gate_set(CU_PROCESS_STATE_LOCKED);
		else if (rc != CUDA_ERROR_INVALID_VALUE)
			emu_gate_set(CU_PROCESS_STATE_FAILED);
		return rc;
	}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* CUEMU_CKPT_LOG: each transition served appends "PID OP RESULT", so that
 * tests can see the order a controller used. */
static void log_transition(enum ckpt_op op, CUresult rc)
{
	static const char *const names[] = {[CKPT_OP_LOCK] = "lock",
					    [CKPT_OP_CHECKPOINT] = "checkpoint",
					    [CKPT_OP_RESTORE] = "restore",
					    [CKPT_OP_UNLOCK] = "unlock"};
	if (op >= CKPT_OP_LOCK && op <= CKPT_OP_UNLOCK)
		emu_record("CUEMU_CKPT_LOG", "%d %s %d\n", (int)getpid(), names[op], (int)rc);
	if (op >= CKPT_OP_LOCK && op <= CKPT_OP_UNLOCK && rc == CUDA_SUCCESS)
		emu_job_note(names[op]); /* the job's own record (job.c) */
}

static void serve(int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || (cred.uid != 0 && cred.uid != getuid()))
		return; /* only the same user or root; others get no answer */
	struct timeval tv = {.tv_sec = 5};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	uint8_t head[CKPT_REQ_LEN], reply[CKPT_REPLY_LEN];
	struct ckpt_request r;
	if (io_read_all(fd, head, sizeof(head)) < 0)
		return;
	struct ckpt_reply out = {0};
	if (ckpt_request_decode(head, &r) < 0) {
		out.result = CUDA_ERROR_INVALID_VALUE;
	} else if (r.npairs && io_read_all(fd, r.pairs, (size_t)r.npairs * CKPT_PAIR_LEN) < 0) {
		return;
	} else {
		int value = 0;
		CUresult rc = serve_op(r.op, r.timeout_ms, r.job, &r.pairs[0][0], r.npairs, &value);
		log_transition(r.op, rc);
		out.result = (int32_t)rc;
		out.value = value;
	}
	ckpt_reply_encode(&out, reply);
	io_write_all(fd, reply, sizeof(reply));
}

static void *server_main(void *arg)
{
	(void)arg;
	server_tid = (pid_t)syscall(SYS_gettid);
	for (;;) {
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			LOG_AT(LOG_WARN, "checkpoint endpoint: accept failed: %s", strerror(errno));
			usleep(100000);
			continue;
		}
		serve(fd);
		close(fd);
	}
	return NULL;
}

static int socket_path(char *buf, size_t len)
{
	char dir[4096];
	emu_config(); /* (a caller of the native API may not have called cuInit) */
	if (emu.run_dir[0])
		snprintf(dir, sizeof(dir), "%s", emu.run_dir);
	else
		snprintf(dir, sizeof(dir), "/tmp/cuemu-%u", (unsigned)getuid());
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	struct stat st;
	if (stat("/proc/self/ns/pid", &st) < 0)
		st.st_ino = 0;
	/* getpid() is the PID in this process's own namespace. */
	int n = snprintf(buf, len, "%s/" CKPT_SOCKET_TAG "%lu-%d.sock", dir, (unsigned long)st.st_ino, getpid());
	return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/* The sockets of processes of this PID namespace that no longer exist (killed,
 * so their destructor never ran): removed, so that nothing piles up in the run
 * directory. Others' namespaces are left alone (their PIDs cannot be told
 * from here). */
static void sweep_stale(const char *path)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return;
	*slash = '\0';
	struct stat st;
	if (stat("/proc/self/ns/pid", &st) < 0)
		return;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		unsigned long ino;
		int pid;
		char tail[8];
		if (sscanf(e->d_name, CKPT_SOCKET_TAG "%lu-%d%7s", &ino, &pid, tail) != 3 || strcmp(tail, ".sock") ||
		    ino != (unsigned long)st.st_ino || pid <= 0 || pid == getpid())
			continue;
		if (kill(pid, 0) < 0 && errno == ESRCH)
			unlinkat(dfd, e->d_name, 0);
	}
	closedir(d);
}

int emu_server_start(void)
{
	if (server_started)
		return 0;
	char path[4200];
	int rc = socket_path(path, sizeof(path));
	if (rc == 0)
		rc = usock_listen(path, 16);
	if (rc < 0) {
		LOG_AT(LOG_ERROR, "cannot create the checkpoint endpoint %s: %s", path, strerror(-rc));
		return rc;
	}
	listen_fd = rc;
	sweep_stale(path);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread inherits: no signals there */
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, server_main, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		close(listen_fd);
		listen_fd = -1;
		unlink(path);
		return -rc;
	}
	server_started = true;
	server_pid = getpid();
	snprintf(server_path, sizeof(server_path), "%s", path);
	return 0;
}

/* Remove the socket file when the process exits normally. */
__attribute__((destructor)) static void server_cleanup(void)
{
	if (server_started && server_pid == getpid())
		unlink(server_path);
}
