/* SPDX-License-Identifier: MIT */
/* A process tree on this node: its processes, which hold CUDA and which run
 * under the interposer, its lock, and the checks made before anything changes. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "cusnap/control.h"
#include "cusnap/json.h"

void tree_free(struct tree *t)
{
	tree_lock_release(&t->lock);
	free(t->procs);
	free(t->targets);
	free(t->cuda_index);
	memset(&t->procs, 0, sizeof(*t) - offsetof(struct tree, procs));
}

static int tree_fill(pid_t pid, const struct settings *s, struct tree *t, bool view)
{
	memset(t, 0, sizeof(*t));
	t->s = s;
	t->lock.dirfd = -1;
	char err[1024];
	pid_t tgid = proc_tgid(pid);
	if (tgid > 0 && tgid != pid) {
		/* A thread id: the process it belongs to is what can be checkpointed. */
		voice(VOICE_INFO, "%d is a thread of process %d: using the process", (int)pid, (int)tgid);
		pid = tgid;
	}
	ssize_t n = proc_tree(pid, &t->procs);
	if (n < 0)
		return fail(EX_USAGE, "no process %d: %s", (int)pid, strerror((int)-n));
	t->nprocs = (size_t)n;
	/* Another user's tree: its processes do not answer our native calls, so
	 * say why instead of "no CUDA process" or "nothing to resume". */
	for (size_t i = 0; i < t->nprocs; i++)
		if (kill(t->procs[i].pid, 0) < 0 && errno == EPERM)
			return fail(EX_USAGE,
				    "permission denied: process %d of the tree of %d belongs to uid %ld, not to uid %u "
				    "(cusnap acts on a user's own processes, or as root); nothing done",
				    (int)t->procs[i].pid, (int)pid, proc_status_field("/proc", t->procs[i].pid, "Uid"),
				    (unsigned)geteuid());
	/* A checkpoint job is joined before the driver is loaded. */
	if (job_find(&t->job, t->procs, t->nprocs, t->s->job_file[0] ? t->s->job_file : NULL, err, sizeof(err)) < 0) {
		if (!view)
			return fail(EX_USAGE, "%s: nothing done", err);
		snprintf(t->job_error, sizeof(t->job_error), "%s", err);
	}
	if (native_load(&t->nat, t->s->libcuda, err, sizeof(err)) < 0)
		return fail(EX_UNAVAILABLE, "%s", err);
	size_t stuck = 0;
	int q = native_classify(&t->nat, t->procs, t->nprocs, s, &stuck);
	if (q == -ETIMEDOUT)
		return fail(EX_LEFT_RUNNING,
			    "process %d did not answer %s within %d ms (stopped, or starved of CPU on a busy machine? "
			    "a stopped one: `kill -CONT %d`): nothing done",
			    (int)t->procs[stuck].pid, native_step_name(NATIVE_QUERY),
			    native_watchdog_ms(t->s, NATIVE_QUERY), (int)t->procs[stuck].pid);
	if (q < 0)
		return fail(EX_LEFT_RUNNING, "out of memory");
	t->targets = calloc(t->nprocs, sizeof(*t->targets));
	t->cuda_index = calloc(t->nprocs, sizeof(*t->cuda_index));
	if (!t->targets || !t->cuda_index)
		return fail(EX_LEFT_RUNNING, "out of memory");
	for (size_t i = 0; i < t->nprocs; i++) {
		struct proc *p = &t->procs[i];
		if (!p->cuda)
			continue;
		struct coord_target *c = &t->targets[t->ncuda];
		c->obs = p->pid;
		c->ns = p->nspid;
		coord_endpoint_path("/proc", t->s->control_dir, p->pid, p->nspid, c->endpoint, sizeof(c->endpoint));
		struct stat st;
		/* Detection rule (DESIGN.md §3): by endpoint, never by environ. */
		p->shim = stat(c->endpoint, &st) == 0 && S_ISSOCK(st.st_mode);
		char mark[8];
		p->marked = !p->shim && proc_environ_get(p->pid, INTERPOSE_MARKER, mark, sizeof(mark)) &&
			    !strcmp(mark, "1");
		t->nshim += p->shim;
		t->cuda_index[t->ncuda++] = i;
	}
	return 0;
}

/* A tree that could not be loaded holds nothing: the caller frees nothing. */
static int tree_load_as(pid_t pid, const struct settings *s, struct tree *t, bool view)
{
	int rc = tree_fill(pid, s, t, view);
	if (rc)
		tree_free(t);
	return rc;
}

int tree_load(pid_t pid, const struct settings *s, struct tree *t)
{
	return tree_load_as(pid, s, t, false);
}

int tree_view(pid_t pid, const struct settings *s, struct tree *t)
{
	return tree_load_as(pid, s, t, true);
}

int tree_take(pid_t pid, const struct settings *s, const char *what, struct tree *t)
{
	if (!pid)
		return fail(EX_USAGE, "%s needs --pid PID", what);
	int rc = check_pid_guard(pid);
	if (rc || (rc = tree_load(pid, s, t)))
		return rc;
	if ((rc = tree_hold(t, what)))
		tree_free(t);
	return rc;
}

int tree_hold(struct tree *t, const char *what)
{
	pid_t *pids = calloc(t->nprocs ? t->nprocs : 1, sizeof(*pids));
	if (!pids)
		return fail(EX_LEFT_RUNNING, "out of memory");
	for (size_t i = 0; i < t->nprocs; i++)
		pids[i] = t->procs[i].pid;
	char holder[96], err[PATH_MAX + 256];
	snprintf(holder, sizeof(holder), "cusnap %s --pid %d", what, t->nprocs ? (int)t->procs[0].pid : 0);
	int rc = tree_lock_take(&t->lock, "/proc", pids, t->nprocs, holder, err, sizeof(err));
	free(pids);
	if (rc == -EBUSY)
		return fail(EX_BUSY, "%s; nothing done", err);
	if (rc < 0)
		return fail(EX_LEFT_RUNNING, "cannot lock the tree: %s; nothing done", err);
	/* The states as they are now that no other command can change them. */
	if (tree_states(t, err, sizeof(err)) < 0)
		return fail(EX_LEFT_RUNNING, "%s: nothing done", err);
	return 0;
}

bool tree_held(const struct tree *t, char *out, size_t len)
{
	for (size_t i = 0; i < t->nprocs; i++)
		if (tree_lock_holder("/proc", t->procs[i].pid, out, len))
			return true;
	return false;
}

int check_interposition(const struct tree *t)
{
	size_t marked = 0;
	for (size_t i = 0; i < t->ncuda; i++)
		marked += t->procs[t->cuda_index[i]].marked;
	if (!marked && (t->nshim == 0 || t->nshim == t->ncuda))
		return 0;
	char list[1024] = "";
	size_t len = 0;
	for (size_t i = 0; i < t->ncuda; i++) {
		const struct proc *p = &t->procs[t->cuda_index[i]];
		if (!p->shim && len < sizeof(list) - 48)
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%d%s", len ? ", " : "", (int)p->pid,
						p->marked ? " (launched under the interposer)" : "");
	}
	return fail(EX_LEFT_RUNNING,
		    "partial interposition: %zu of %zu CUDA processes run under the interposer%s; without an "
		    "endpoint: %s (refusing: their shared memory could not be rebuilt)",
		    t->nshim, t->ncuda, marked ? " or carry " INTERPOSE_MARKER : "", list);
}

static int guard_procs(const struct proc *procs, size_t n)
{
	/* Freezing (and, for a checkpoint, CRIU killing) a tree that holds cusnap
	 * itself, its ancestors or this namespace's init would take down the tool
	 * or the whole system: refused before anything changes. */
	for (size_t i = 0; i < n; i++) {
		pid_t p = procs[i].pid;
		if (p == 1)
			return fail(EX_USAGE,
				    "the tree holds PID 1 of this PID namespace (%d): refusing to freeze or "
				    "checkpoint the namespace's init; nothing done",
				    (int)p);
		if (proc_is_self_or_ancestor(p))
			return fail(EX_USAGE, "the tree holds %s (%d): refusing; nothing done",
				    p == getpid() ? "cusnap itself" : "an ancestor of cusnap", (int)p);
	}
	return 0;
}

int check_guard_rails(const struct tree *t)
{
	return guard_procs(t->procs, t->nprocs);
}

int check_pid_guard(pid_t pid)
{
	pid_t tgid = proc_tgid(pid);
	struct proc *procs = NULL;
	ssize_t n = proc_tree(tgid > 0 ? tgid : pid, &procs);
	int rc = n < 0 ? fail(EX_USAGE, "no process %d: %s; nothing done", (int)pid, strerror((int)-n))
		       : guard_procs(procs, (size_t)n);
	free(procs);
	return rc;
}

int check_interposer(const struct tree *t)
{
	if (!t->ncuda || t->nshim)
		return 0;
	if (t->s->require_interposer)
		return fail(EX_LEFT_RUNNING,
			    "the tree of %d does not run under the interposer (--require-interposer): refusing; "
			    "nothing done",
			    (int)t->procs[0].pid);
	if (t->ncuda > 1)
		voice(VOICE_WARN,
		      "%zu CUDA processes without the interposer: if they share memory "
		      "(cuMemExportToShareableHandle, cuIpcOpenMemHandle), the driver checkpoints them and then "
		      "refuses to restore the importer (r580: CUDA_ERROR_NOT_SUPPORTED), and the tree is lost; "
		      "run them under `cusnap run`, or refuse such trees with --require-interposer",
		      t->ncuda);
	return 0;
}

int check_freezable(const struct tree *t)
{
	int rc = check_guard_rails(t);
	if (rc)
		return rc;
	for (size_t i = 0; i < t->ncuda; i++) {
		const struct proc *p = &t->procs[t->cuda_index[i]];
		if (p->state != CU_PROCESS_STATE_RUNNING)
			return fail(EX_LEFT_RUNNING, "process %d is %s, not running: nothing done", (int)p->pid,
				    state_name(p->state));
	}
	return check_interposition(t);
}
