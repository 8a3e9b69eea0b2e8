/* What every cusnap command shares: reporting, the process tree, the native
 * freeze and thaw. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/json.h"

bool opt_json;
int opt_timeout_ms = 30000;
const char *opt_control_dir;

void progress(const char *step, double ms, const char *fmt, ...)
{
	char extra[512] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(extra, sizeof(extra), fmt, ap);
	va_end(ap);
	fprintf(stderr, "cusnap: %-22s %9.1f ms%s%s\n", step, ms, extra[0] ? "  " : "", extra);
}

double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int fail(int code, const char *fmt, ...)
{
	char msg[2600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "cusnap: %s\n", msg);
	if (opt_json) {
		printf("{\"ok\":false,\"exit\":%d,\"error\":", code);
		json_write_string(stdout, msg);
		printf("}\n");
	}
	return code;
}

int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	size_t len = strlen(text);
	int rc = write(fd, text, len) == (ssize_t)len ? 0 : -EIO;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	return rc;
}

const char *state_name(int s)
{
	switch (s) {
	case CU_PROCESS_STATE_RUNNING: return "running";
	case CU_PROCESS_STATE_LOCKED: return "locked";
	case CU_PROCESS_STATE_CHECKPOINTED: return "checkpointed";
	case CU_PROCESS_STATE_FAILED: return "failed";
	default: return "-";
	}
}

void tree_free(struct tree *t)
{
	free(t->procs);
	free(t->targets);
	free(t->cuda_index);
	memset(&t->procs, 0, sizeof(*t) - offsetof(struct tree, procs));
}

int tree_load(pid_t pid, struct tree *t)
{
	memset(t, 0, sizeof(*t));
	char err[1024];
	if (native_load(&t->nat, err, sizeof(err)) < 0)
		return fail(EX_UNAVAILABLE, "%s", err);
	pid_t tgid = proc_tgid(pid);
	if (tgid > 0 && tgid != pid) {
		/* A thread id: the process it belongs to is what can be checkpointed. */
		fprintf(stderr, "cusnap: %d is a thread of process %d: using the process\n", (int)pid, (int)tgid);
		pid = tgid;
	}
	ssize_t n = proc_tree(pid, &t->procs);
	if (n < 0)
		return fail(EX_USAGE, "no process %d: %s", (int)pid, strerror((int)-n));
	t->nprocs = (size_t)n;
	native_classify(&t->nat, t->procs, t->nprocs);
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
		coord_endpoint_path("/proc", opt_control_dir, p->pid, p->nspid, c->endpoint, sizeof(c->endpoint));
		struct stat st;
		/* Detection rule (SYSTEM.md §3): by endpoint, never by environ. */
		p->shim = stat(c->endpoint, &st) == 0 && S_ISSOCK(st.st_mode);
		t->nshim += p->shim;
		t->cuda_index[t->ncuda++] = i;
	}
	return 0;
}

int check_interposition(const struct tree *t)
{
	if (t->nshim == 0 || t->nshim == t->ncuda)
		return 0;
	char list[1024] = "";
	size_t len = 0;
	for (size_t i = 0; i < t->ncuda; i++) {
		const struct proc *p = &t->procs[t->cuda_index[i]];
		if (!p->shim && len < sizeof(list) - 32)
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%d", len ? ", " : "", (int)p->pid);
	}
	return fail(EX_LEFT_RUNNING,
		    "partial interposition: %zu of %zu CUDA processes run under the interposer; without an endpoint: %s "
		    "(refusing: their shared memory could not be rebuilt)",
		    t->nshim, t->ncuda, list);
}

static int guard_procs(const struct proc *procs, size_t n)
{
	/* Freezing (and, for a checkpoint, CRIU killing) a tree that holds cusnap
	 * itself, its ancestors or this namespace's init would take down the tool
	 * or the whole system: refused before anything changes. */
	for (size_t i = 0; i < n; i++) {
		pid_t p = procs[i].pid;
		if (p == 1)
			return fail(EX_USAGE, "the tree holds PID 1 of this PID namespace (%d): refusing to freeze or "
					      "checkpoint the namespace's init; nothing done", (int)p);
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
	int rc = n < 0 ? 0 : guard_procs(procs, (size_t)n); /* no such process: reported later */
	free(procs);
	return rc;
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

void vmm_abort(struct tree *t, const char *dir)
{
	struct coord_options o = {.timeout_ms = opt_timeout_ms, .dir = dir, .progress = stderr};
	struct coord_report r;
	if (coord_abort(t->targets, t->ncuda, &o, &r) < 0)
		fprintf(stderr, "cusnap: rebuilding the shared memory failed too: %s\n", r.error);
}

/* A call that did not return: the process and step named, exit 2 (its state
 * is unknown until the call returns; `cusnap resume --pid` repairs it then). */
static int stuck_call(const struct tree *t, enum native_step step, size_t i)
{
	return fail(EX_TERMINATED,
		    "process %d: %s did not return within %d ms (it cannot be cancelled): the state of the tree is "
		    "unknown; once the call returns, `cusnap resume --pid ROOT` brings it back",
		    t->targets[i].obs, native_step_name(step), native_watchdog_ms(step));
}

/* Undo a freeze that failed part way: restore what was checkpointed, unlock
 * what was locked, rebuild what was prepared. Returns 0 when every undo call
 * succeeded. */
static int undo_freeze(struct tree *t, const bool *locked, const bool *checkpointed, bool prepared, const char *dir)
{
	CUresult *rc = calloc(t->ncuda + 1, sizeof(*rc));
	size_t stuck = 0;
	int bad = !rc;
	if (rc && native_run(t, NATIVE_RESTORE, checkpointed, NULL, 0, rc, &stuck) != 0)
		bad = 1;
	for (size_t i = 0; rc && i < t->ncuda; i++)
		bad |= rc[i] != CUDA_SUCCESS;
	if (rc && native_run(t, NATIVE_UNLOCK, locked, NULL, 0, rc, &stuck) != 0)
		bad = 1;
	for (size_t i = 0; rc && i < t->ncuda; i++)
		if (rc[i] != CUDA_SUCCESS) {
			fprintf(stderr, "cusnap: undo: unlock of process %d failed: %s\n", t->targets[i].obs,
				native_error(&t->nat, rc[i]));
			bad = 1;
		}
	free(rc);
	if (prepared)
		vmm_abort(t, dir);
	return bad ? -1 : 0;
}

/* One step of a freeze over every CUDA process: ok[i] tells which succeeded.
 * On a failure, everything done so far (locked, checkpointed) is undone; a call
 * that did not return is reported as stuck. Returns 0 or the exit code. */
static int freeze_step(struct tree *t, enum native_step step, CUresult *rc, bool *ok, const bool *locked,
		       const bool *checkpointed, bool prepared, const char *dir)
{
	size_t n = t->ncuda, stuck = 0, failed = n;
	int run = native_run(t, step, NULL, NULL, 0, rc, &stuck);
	for (size_t i = 0; i < n; i++) {
		ok[i] = rc[i] == CUDA_SUCCESS;
		if (!ok[i] && failed == n && rc[i] != CUDA_ERROR_TIMEOUT)
			failed = i;
	}
	if (run == -ETIMEDOUT)
		return stuck_call(t, step, stuck);
	if (run == 0 && failed == n)
		return 0;
	int u = undo_freeze(t, locked, checkpointed, prepared, dir);
	return fail(u ? EX_TERMINATED : EX_LEFT_RUNNING, "%s of process %d failed: %s (%s)",
		    step == NATIVE_LOCK ? "lock" : "native checkpoint", failed < n ? t->targets[failed].obs : 0,
		    failed < n ? native_error(&t->nat, rc[failed]) : "no memory",
		    u ? "undoing it failed: the state is unknown" : "everything undone");
}

int native_freeze(struct tree *t, bool prepared, const char *dir)
{
	size_t n = t->ncuda;
	CUresult *rc = calloc(n + 1, sizeof(*rc));
	bool *locked = calloc(n + 1, sizeof(*locked)), *done = calloc(n + 1, sizeof(*done));
	int ret = 0;
	if (!rc || !locked || !done) {
		ret = fail(EX_LEFT_RUNNING, "out of memory before the native steps: nothing done");
		goto out;
	}
	double t0 = now_ms();
	if ((ret = freeze_step(t, NATIVE_LOCK, rc, locked, locked, done, prepared, dir)))
		goto out;
	progress("lock", now_ms() - t0, "%zu processes, concurrently", n);
	coord_fault_point("kill-after-lock");
	t0 = now_ms();
	if ((ret = freeze_step(t, NATIVE_CHECKPOINT, rc, done, locked, done, prepared, dir)))
		goto out;
	progress("native checkpoint", now_ms() - t0, "GPU memory released");
	coord_fault_point("kill-after-checkpoint");
out:
	free(rc);
	free(locked);
	free(done);
	return ret;
}

/* One thaw step over the processes in state from; 0, or -1 with err. */
static int thaw_step(struct tree *t, enum native_step step, CUprocessState from, const CUcheckpointGpuPair *pairs,
		     unsigned npairs, char *err, size_t errlen)
{
	size_t n = t->ncuda, stuck = 0, any = 0;
	bool *want = calloc(n + 1, sizeof(*want));
	CUresult *rc = calloc(n + 1, sizeof(*rc));
	int ret = 0;
	if (!want || !rc) {
		snprintf(err, errlen, "out of memory");
		ret = -1;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		CUprocessState st;
		want[i] = t->nat.get_state(t->targets[i].obs, &st) == CUDA_SUCCESS && st == from;
		any += want[i];
	}
	if (!any)
		goto out;
	if (native_run(t, step, want, pairs, npairs, rc, &stuck) == -ETIMEDOUT) {
		snprintf(err, errlen, "process %d: %s did not return within %d ms (it cannot be cancelled)",
			 t->targets[stuck].obs, native_step_name(step), native_watchdog_ms(step));
		ret = -1;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (rc[i] == CUDA_SUCCESS)
			continue;
		snprintf(err, errlen, "%s of process %d failed: %s",
			 step == NATIVE_RESTORE ? "native restore" : "unlock", t->targets[i].obs, native_error(&t->nat, rc[i]));
		ret = -1;
		break;
	}
out:
	free(want);
	free(rc);
	return ret;
}

int native_thaw(struct tree *t, const CUcheckpointGpuPair *pairs, unsigned npairs, char *err, size_t errlen)
{
	if (thaw_step(t, NATIVE_RESTORE, CU_PROCESS_STATE_CHECKPOINTED, pairs, npairs, err, errlen) < 0)
		return -1;
	return thaw_step(t, NATIVE_UNLOCK, CU_PROCESS_STATE_LOCKED, NULL, 0, err, errlen);
}

/* ---- signals: SIGINT, SIGTERM and SIGHUP run the undo, then exit ---- */

static volatile sig_atomic_t caught;

static void on_signal(int sig)
{
	caught = sig;
}

void signals_arm(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART; /* calls in flight finish; the command stops at its next phase boundary */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

int interrupted_undo(struct tree *t, const char *dir, const char *after)
{
	int sig = caught;
	if (!sig)
		return 0;
	fprintf(stderr, "cusnap: %s after %s: undoing\n", strsignal(sig), after);
	struct coord_report r;
	bool nothing;
	char err[1200];
	if (tree_recover(t, dir, &r, &nothing, err, sizeof(err)) < 0)
		return fail(EX_TERMINATED, "interrupted by %s after %s, and undoing failed: %s", strsignal(sig), after,
			    err);
	return fail(EX_LEFT_RUNNING, "interrupted by %s after %s: everything undone, the workload runs as before",
		    strsignal(sig), after);
}
