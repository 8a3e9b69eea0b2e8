/* What every cusnap command shares: reporting, the process tree, the native
 * freeze and thaw. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cusnap.h"

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
		printf("{\"ok\":false,\"exit\":%d,\"error\":\"", code);
		for (const char *p = msg; *p; p++) {
			if (*p == '"' || *p == '\\')
				putchar('\\');
			if ((unsigned char)*p >= 0x20)
				putchar(*p);
		}
		printf("\"}\n");
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

int check_freezable(const struct tree *t)
{
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

/* Undo a freeze that failed part way: restore what was checkpointed, unlock
 * what was locked, rebuild what was prepared. */
static void undo_freeze(struct tree *t, size_t locked, size_t checkpointed, bool prepared, const char *dir)
{
	for (size_t i = 0; i < checkpointed; i++)
		t->nat.restore(t->targets[i].obs, NULL);
	for (size_t i = 0; i < locked; i++)
		t->nat.unlock(t->targets[i].obs, NULL);
	if (prepared)
		vmm_abort(t, dir);
}

int native_freeze(struct tree *t, bool prepared, const char *dir)
{
	double t0 = now_ms();
	for (size_t i = 0; i < t->ncuda; i++) {
		CUcheckpointLockArgs la;
		memset(&la, 0, sizeof(la));
		la.timeoutMs = (unsigned)opt_timeout_ms;
		CUresult cr = t->nat.lock(t->targets[i].obs, &la);
		if (cr != CUDA_SUCCESS) {
			undo_freeze(t, i, 0, prepared, dir);
			return fail(EX_LEFT_RUNNING, "lock of process %d failed: %s (everything undone)", t->targets[i].obs,
				    native_error(&t->nat, cr));
		}
	}
	progress("lock", now_ms() - t0, "%zu processes", t->ncuda);
	t0 = now_ms();
	for (size_t i = 0; i < t->ncuda; i++) {
		CUresult cr = t->nat.checkpoint(t->targets[i].obs, NULL);
		if (cr != CUDA_SUCCESS) {
			undo_freeze(t, t->ncuda, i, prepared, dir);
			return fail(EX_LEFT_RUNNING, "native checkpoint of process %d failed: %s (everything undone)",
				    t->targets[i].obs, native_error(&t->nat, cr));
		}
	}
	progress("native checkpoint", now_ms() - t0, "GPU memory released");
	return 0;
}

int native_thaw(struct tree *t, const CUcheckpointGpuPair *pairs, unsigned npairs, char *err, size_t errlen)
{
	for (size_t i = 0; i < t->ncuda; i++) {
		CUprocessState st;
		if (t->nat.get_state(t->targets[i].obs, &st) != CUDA_SUCCESS || st != CU_PROCESS_STATE_CHECKPOINTED)
			continue;
		CUcheckpointRestoreArgs ra;
		memset(&ra, 0, sizeof(ra));
		ra.gpuPairs = (CUcheckpointGpuPair *)pairs;
		ra.gpuPairsCount = npairs;
		CUresult cr = t->nat.restore(t->targets[i].obs, npairs ? &ra : NULL);
		if (cr != CUDA_SUCCESS) {
			snprintf(err, errlen, "native restore of process %d failed: %s", t->targets[i].obs,
				 native_error(&t->nat, cr));
			return -1;
		}
	}
	for (size_t i = 0; i < t->ncuda; i++) {
		CUprocessState st;
		if (t->nat.get_state(t->targets[i].obs, &st) != CUDA_SUCCESS || st != CU_PROCESS_STATE_LOCKED)
			continue;
		CUresult cr = t->nat.unlock(t->targets[i].obs, NULL);
		if (cr != CUDA_SUCCESS) {
			snprintf(err, errlen, "unlock of process %d failed: %s", t->targets[i].obs, native_error(&t->nat, cr));
			return -1;
		}
	}
	return 0;
}
