/* cusnap: the node tool (SYSTEM.md §9). This version: suspend, resume, inspect
 * and run; checkpoint, restore and demo (with CRIU) come next. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/coord.h"

static bool json;
static int timeout_ms = 30000;
static const char *control_dir;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: cusnap run [--control-dir DIR] -- PROGRAM [ARG...]\n"
		"       cusnap suspend --pid PID [--dir DIR] [--content host|native] [--json]\n"
		"       cusnap resume  --pid PID [--dir DIR] [--json]\n"
		"       cusnap inspect (--pid PID | --dir DIR) [--json]\n"
		"\n"
		"  run       start PROGRAM under the CUDA VMM interposer (snapshot-cuda-vmm-launch)\n"
		"  suspend   release all GPU memory of the process tree rooted at PID, in place: prepare shared\n"
		"            VMM memory (when the tree runs under the interposer), then lock and checkpoint\n"
		"            every CUDA process natively; the state goes to DIR (default a private directory,\n"
		"            printed on stderr)\n"
		"  resume    bring a suspended tree back: native restore and unlock, then rebuild the sharing\n"
		"  inspect   show the tree's CUDA processes and what they share, or a state directory\n"
		"\n"
		"options: --control-dir DIR (endpoints; default $SNAPSHOT_CONTROL_DIR or /snapshot-control),\n"
		"         --timeout MS (per participant and step, default 30000), --json (summary on stdout)\n"
		"\n"
		"exit status: 0 success; 1 failed, the workload was left or put back running as before;\n"
		"2 failed, the workload was terminated or its state is unknown; 64 usage error;\n"
		"69 a required component is missing (the CUDA driver), with the fix named\n");
}

static void progress(const char *step, double ms, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void progress(const char *step, double ms, const char *fmt, ...)
{
	char extra[512] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(extra, sizeof(extra), fmt, ap);
	va_end(ap);
	fprintf(stderr, "cusnap: %-22s %9.1f ms%s%s\n", step, ms, extra[0] ? "  " : "", extra);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...)
{
	char msg[2600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "cusnap: %s\n", msg);
	if (json) {
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

static int mkdirs(const char *path)
{
	char buf[PATH_MAX];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	return mkdir(buf, 0700) < 0 && errno != EEXIST ? -errno : 0;
}

/* The default state directory of a suspended tree: private and derived from the PID. */
static void default_dir(pid_t pid, char *out, size_t len)
{
	const char *base = getenv("XDG_RUNTIME_DIR");
	if (base && *base)
		snprintf(out, len, "%s/cusnap/suspend-%d", base, (int)pid);
	else
		snprintf(out, len, "/tmp/cusnap-%u/suspend-%d", (unsigned)getuid(), (int)pid);
}

struct tree {
	struct native nat;
	struct proc *procs;
	size_t nprocs;
	struct coord_target *targets; /* the CUDA processes */
	size_t ncuda, nshim;
	size_t *cuda_index;           /* targets[i] is procs[cuda_index[i]] */
};

static void tree_free(struct tree *t)
{
	free(t->procs);
	free(t->targets);
	free(t->cuda_index);
}

/* Find the tree, its CUDA processes and which of them run under the interposer. */
static int tree_load(pid_t pid, struct tree *t)
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
		coord_endpoint_path("/proc", control_dir, p->pid, p->nspid, c->endpoint, sizeof(c->endpoint));
		struct stat st;
		/* Detection rule (SYSTEM.md §3): by endpoint, never by environ. */
		p->shim = stat(c->endpoint, &st) == 0 && S_ISSOCK(st.st_mode);
		t->nshim += p->shim;
		t->cuda_index[t->ncuda++] = i;
	}
	return 0;
}

static const char *state_name(int s)
{
	switch (s) {
	case CU_PROCESS_STATE_RUNNING: return "running";
	case CU_PROCESS_STATE_LOCKED: return "locked";
	case CU_PROCESS_STATE_CHECKPOINTED: return "checkpointed";
	case CU_PROCESS_STATE_FAILED: return "failed";
	default: return "-";
	}
}

/* Partial interposition is refused before anything changes. */
static int check_interposition(const struct tree *t)
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

/* Undo a suspend that failed before it completed: restore what was checkpointed,
 * unlock what was locked, rebuild what was prepared. */
static void undo_suspend(struct tree *t, size_t locked, size_t checkpointed, bool prepared, const char *dir)
{
	for (size_t i = 0; i < checkpointed; i++)
		t->nat.restore(t->targets[i].obs, NULL);
	for (size_t i = 0; i < locked; i++)
		t->nat.unlock(t->targets[i].obs, NULL);
	if (prepared) {
		struct coord_options o = {.timeout_ms = timeout_ms, .dir = dir, .progress = stderr};
		struct coord_report r;
		if (coord_abort(t->targets, t->ncuda, &o, &r) < 0)
			fprintf(stderr, "cusnap: rebuilding the shared memory failed too: %s\n", r.error);
	}
}

static int cmd_suspend(pid_t pid, const char *dir_arg, int content)
{
	struct tree t;
	int rc = tree_load(pid, &t);
	if (rc)
		return rc;
	char dir[PATH_MAX];
	double start = now_ms(), t0;
	if (!t.ncuda) {
		rc = fail(EX_LEFT_RUNNING, "no CUDA process in the tree of %d (%zu processes)", (int)pid, t.nprocs);
		goto out;
	}
	for (size_t i = 0; i < t.ncuda; i++) {
		const struct proc *p = &t.procs[t.cuda_index[i]];
		if (p->state != CU_PROCESS_STATE_RUNNING) {
			rc = fail(EX_LEFT_RUNNING, "process %d is %s, not running: nothing done", (int)p->pid, state_name(p->state));
			goto out;
		}
	}
	if ((rc = check_interposition(&t)))
		goto out;
	if (dir_arg)
		snprintf(dir, sizeof(dir), "%s", dir_arg);
	else
		default_dir(pid, dir, sizeof(dir));
	if (mkdirs(dir) < 0) {
		rc = fail(EX_LEFT_RUNNING, "cannot create %s: %s", dir, strerror(errno));
		goto out;
	}
	if (!dir_arg)
		fprintf(stderr, "cusnap: state directory %s\n", dir);
	bool vmm = t.nshim > 0;
	progress("find", now_ms() - start, "%zu processes, %zu CUDA, %s", t.nprocs, t.ncuda,
		 vmm ? "interposed: VMM steps" : "not interposed: native steps only");
	struct coord_report r = {0};
	if (vmm) {
		struct coord_options o = {.timeout_ms = timeout_ms, .content = content, .dir = dir, .progress = stderr};
		if (coord_prepare(t.targets, t.ncuda, &o, &r) < 0) {
			rc = fail(r.aborted || r.unchanged ? EX_LEFT_RUNNING : EX_TERMINATED, "prepare failed: %s", r.error);
			goto out;
		}
	}
	t0 = now_ms();
	for (size_t i = 0; i < t.ncuda; i++) {
		CUcheckpointLockArgs la = {.timeoutMs = (unsigned)timeout_ms};
		CUresult cr = t.nat.lock(t.targets[i].obs, &la);
		if (cr != CUDA_SUCCESS) {
			undo_suspend(&t, i, 0, vmm, dir);
			rc = fail(EX_LEFT_RUNNING, "lock of process %d failed: %s (everything undone)", t.targets[i].obs,
				  native_error(&t.nat, cr));
			goto out;
		}
	}
	progress("lock", now_ms() - t0, "%zu processes", t.ncuda);
	t0 = now_ms();
	for (size_t i = 0; i < t.ncuda; i++) {
		CUresult cr = t.nat.checkpoint(t.targets[i].obs, NULL);
		if (cr != CUDA_SUCCESS) {
			undo_suspend(&t, t.ncuda, i, vmm, dir);
			rc = fail(EX_LEFT_RUNNING, "native checkpoint of process %d failed: %s (everything undone)",
				  t.targets[i].obs, native_error(&t.nat, cr));
			goto out;
		}
	}
	progress("checkpoint", now_ms() - t0, "GPU memory released");
	if (json)
		printf("{\"ok\":true,\"operation\":\"suspend\",\"pid\":%d,\"dir\":\"%s\",\"processes\":%zu,\"cuda_processes\":%zu,"
		       "\"vmm\":%s,\"shared_allocations\":%zu,\"bytes_copied\":%llu,\"total_ms\":%.1f}\n",
		       (int)pid, dir, t.nprocs, t.ncuda, vmm ? "true" : "false", r.shared, (unsigned long long)r.bytes,
		       now_ms() - start);
	rc = EX_OK;
out:
	tree_free(&t);
	return rc;
}

static int cmd_resume(pid_t pid, const char *dir_arg)
{
	struct tree t;
	int rc = tree_load(pid, &t);
	if (rc)
		return rc;
	char dir[PATH_MAX], state[PATH_MAX + 32];
	double start = now_ms(), t0;
	if (dir_arg)
		snprintf(dir, sizeof(dir), "%s", dir_arg);
	else
		default_dir(pid, dir, sizeof(dir));
	snprintf(state, sizeof(state), "%s/" STATE_FILE, dir);
	size_t suspended = 0;
	for (size_t i = 0; i < t.ncuda; i++)
		suspended += t.procs[t.cuda_index[i]].state == CU_PROCESS_STATE_CHECKPOINTED;
	if (!suspended) {
		rc = fail(EX_LEFT_RUNNING, "no suspended CUDA process in the tree of %d: nothing to resume", (int)pid);
		goto out;
	}
	if ((rc = check_interposition(&t)))
		goto out;
	t0 = now_ms();
	for (size_t i = 0; i < t.ncuda; i++) {
		if (t.procs[t.cuda_index[i]].state != CU_PROCESS_STATE_CHECKPOINTED)
			continue;
		CUresult cr = t.nat.restore(t.targets[i].obs, NULL);
		if (cr != CUDA_SUCCESS) {
			rc = fail(EX_TERMINATED, "native restore of process %d failed: %s", t.targets[i].obs,
				  native_error(&t.nat, cr));
			goto out;
		}
	}
	for (size_t i = 0; i < t.ncuda; i++) {
		CUprocessState st;
		if (t.nat.get_state(t.targets[i].obs, &st) == CUDA_SUCCESS && st == CU_PROCESS_STATE_LOCKED) {
			CUresult cr = t.nat.unlock(t.targets[i].obs, NULL);
			if (cr != CUDA_SUCCESS) {
				rc = fail(EX_TERMINATED, "unlock of process %d failed: %s", t.targets[i].obs, native_error(&t.nat, cr));
				goto out;
			}
		}
	}
	progress("restore+unlock", now_ms() - t0, "%zu processes", suspended);
	struct coord_report r = {0};
	bool vmm = t.nshim > 0;
	if (vmm) {
		struct coord_options o = {.timeout_ms = timeout_ms, .dir = dir, .progress = stderr,
					  .require_state = access(state, F_OK) == 0};
		if (coord_restore(t.targets, t.ncuda, &o, &r) < 0) {
			rc = fail(EX_TERMINATED, "rebuilding shared memory failed: %s", r.error);
			goto out;
		}
	}
	if (json)
		printf("{\"ok\":true,\"operation\":\"resume\",\"pid\":%d,\"dir\":\"%s\",\"cuda_processes\":%zu,\"vmm\":%s,"
		       "\"bytes_copied\":%llu,\"total_ms\":%.1f}\n",
		       (int)pid, dir, t.ncuda, vmm ? "true" : "false", (unsigned long long)r.bytes, now_ms() - start);
	rc = EX_OK;
out:
	tree_free(&t);
	return rc;
}

static int cmd_inspect(pid_t pid, const char *dir)
{
	if (dir) {
		char path[PATH_MAX + 32], err[1200];
		snprintf(path, sizeof(path), "%s/" STATE_FILE, dir);
		struct state st;
		if (state_read(path, &st, err, sizeof(err)) < 0)
			return fail(EX_LEFT_RUNNING, "%s", err);
		struct coord_target *t = calloc(st.n ? st.n : 1, sizeof(*t));
		struct topo_participant *p = calloc(st.n ? st.n : 1, sizeof(*p));
		for (size_t i = 0; t && p && i < st.n; i++) {
			t[i].obs = (int)st.p[i].obs;
			t[i].ns = (int)st.p[i].nspid;
			p[i] = st.p[i].topo;
		}
		if (t && p) {
			if (json)
				coord_print_json(stdout, t, p, st.n);
			else {
				printf("state %s: content %s, %zu participant(s)\n", path,
				       st.content == COORD_CONTENT_NATIVE ? "native" : "host", st.n);
				coord_print_text(stdout, t, p, st.n);
			}
		}
		free(t);
		free(p);
		state_free(&st);
		return EX_OK;
	}
	struct tree t;
	int rc = tree_load(pid, &t);
	if (rc)
		return rc;
	if (json)
		printf("{\"pid\":%d,\"processes\":[", (int)pid);
	else
		printf("%-8s %-8s %-5s %-13s %s\n", "PID", "NSPID", "CUDA", "STATE", "INTERPOSED");
	for (size_t i = 0; i < t.nprocs; i++) {
		const struct proc *p = &t.procs[i];
		if (json)
			printf("%s{\"pid\":%d,\"nspid\":%d,\"cuda\":%s,\"state\":\"%s\",\"interposed\":%s}", i ? "," : "",
			       (int)p->pid, (int)p->nspid, p->cuda ? "true" : "false", state_name(p->state),
			       p->shim ? "true" : "false");
		else
			printf("%-8d %-8d %-5s %-13s %s\n", (int)p->pid, (int)p->nspid, p->cuda ? "yes" : "no",
			       state_name(p->state), p->cuda ? (p->shim ? "yes" : "no") : "-");
	}
	if (json)
		printf("]");
	if (t.nshim) {
		struct topo_participant *parts = calloc(t.ncuda, sizeof(*parts));
		size_t ok = 0;
		for (size_t i = 0; parts && i < t.ncuda; i++) {
			char err[1200];
			if (!t.procs[t.cuda_index[i]].shim)
				continue;
			if (coord_inspect(&t.targets[i], timeout_ms, &parts[ok], err, sizeof(err)) == 0)
				t.targets[ok++] = t.targets[i];
			else
				fprintf(stderr, "cusnap: %s\n", err);
		}
		if (json)
			printf(",\"topology\":");
		if (json)
			coord_print_json(stdout, t.targets, parts, ok);
		else
			coord_print_text(stdout, t.targets, parts, ok);
		for (size_t i = 0; i < ok; i++)
			topo_free(&parts[i]);
		free(parts);
	}
	if (json)
		printf("}\n");
	tree_free(&t);
	return EX_OK;
}

static int cmd_run(int argc, char **argv)
{
	if (argc < 1)
		return fail(EX_USAGE, "run: PROGRAM missing (cusnap run [--control-dir DIR] -- PROGRAM [ARG...])");
	char self[PATH_MAX], launcher[PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return fail(EX_UNAVAILABLE, "cannot find cusnap's own directory");
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(launcher, sizeof(launcher), "%s/snapshot-cuda-vmm-launch", self);
	if (access(launcher, X_OK) != 0)
		snprintf(launcher, sizeof(launcher), "/usr/local/bin/snapshot-cuda-vmm-launch");
	if (getenv("CUSNAP_CONTROL_DIR_SET"))
		setenv("SNAPSHOT_CONTROL_DIR", control_dir, 1);
	char **args = calloc((size_t)argc + 2, sizeof(*args));
	if (!args)
		return fail(EX_LEFT_RUNNING, "out of memory");
	args[0] = launcher;
	for (int i = 0; i < argc; i++)
		args[i + 1] = argv[i];
	execv(launcher, args);
	return fail(EX_UNAVAILABLE, "cannot run %s: %s (run 'make' or 'make install')", launcher, strerror(errno));
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EX_USAGE;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
		usage(stdout);
		return EX_OK;
	}
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"dir", required_argument, NULL, 'd'},
		{"content", required_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'},
		{"timeout", required_argument, NULL, 't'},
		{"control-dir", required_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{0, 0, 0, 0},
	};
	control_dir = coord_default_control_dir();
	pid_t pid = 0;
	const char *dir = NULL;
	int content = COORD_CONTENT_HOST, c;
	optind = 2;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case 'p': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || v <= 0 || v > 1 << 30)
				return fail(EX_USAGE, "--pid %s: not a PID", optarg);
			pid = (pid_t)v;
			break;
		}
		case 'd': dir = optarg; break;
		case 'c':
			if (!strcmp(optarg, "host"))
				content = COORD_CONTENT_HOST;
			else if (!strcmp(optarg, "native"))
				content = COORD_CONTENT_NATIVE;
			else
				return fail(EX_USAGE, "--content %s: use host or native", optarg);
			break;
		case 'j': json = true; break;
		case 't':
			timeout_ms = atoi(optarg);
			if (timeout_ms <= 0)
				return fail(EX_USAGE, "--timeout %s: not a positive number of milliseconds", optarg);
			break;
		case 'C':
			control_dir = optarg;
			setenv("CUSNAP_CONTROL_DIR_SET", "1", 1);
			break;
		case 'h': usage(stdout); return EX_OK;
		default: usage(stderr); return EX_USAGE;
		}
	}
	if (!strcmp(cmd, "run"))
		return cmd_run(argc - optind, argv + optind);
	if (optind < argc)
		return fail(EX_USAGE, "%s: unexpected argument '%s'", cmd, argv[optind]);
	if (!strcmp(cmd, "suspend") || !strcmp(cmd, "resume")) {
		if (!pid)
			return fail(EX_USAGE, "%s needs --pid PID", cmd);
		return !strcmp(cmd, "suspend") ? cmd_suspend(pid, dir, content) : cmd_resume(pid, dir);
	}
	if (!strcmp(cmd, "inspect")) {
		if (!pid == !dir)
			return fail(EX_USAGE, "inspect needs --pid PID or --dir DIR");
		return cmd_inspect(pid, dir);
	}
	if (!strcmp(cmd, "checkpoint") || !strcmp(cmd, "restore") || !strcmp(cmd, "demo"))
		return fail(EX_USAGE, "'%s' (with CRIU) is not in this version yet: use suspend/resume", cmd);
	return fail(EX_USAGE, "unknown command '%s' (cusnap --help)", cmd);
}
