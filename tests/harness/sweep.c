/* SPDX-License-Identifier: MIT */
/* The countdown fault sweeps (tests/e2e/sweep.h), compiled once. */
#include "../e2e/sweep.h"

#include <stdint.h>
#include <sys/random.h>

const char *const sweep_op_names[] = {"suspend", "resume", "checkpoint", "restore"};

/* Hundreds of groups, each with allocations of 256 KiB on a 64 KiB
 * granularity rather than 4 MiB on 2 MiB: the bytes each case copies and
 * checks were most of the sweeps' time, and no fault depends on the size. */
#define SWEEP_SMALL "CUEMU_GRANULARITY=65536", "VMM_GROUP_SIZE=262144"

const char *const sweep_calls[] = {
#define X(sym, name, ver, flags) #sym,
#include "../../emu/api.def"
#undef X
};

bool sweep_selected(int index)
{
	return test_share((size_t)index);
}

/* One fault case in this many (CUSNAP_SWEEP_STRIDE, else 4 in the plain
 * pass and 8 under a sanitizer), from an offset drawn once per program. */
static size_t sweep_stride(void)
{
	const char *env = getenv("CUSNAP_SWEEP_STRIDE");
	int stride = env ? atoi(env) : 0;
	if (stride >= 1)
		return (size_t)stride;
	return getenv("CUSNAP_SANITIZER") ? 8 : 4;
}

static size_t sweep_offset(void)
{
	static size_t offset = SIZE_MAX;
	if (offset != SIZE_MAX)
		return offset;
	size_t stride = sweep_stride();
	const char *fixed = getenv("CUSNAP_SWEEP_OFFSET");
	unsigned seed;
	if (fixed && *fixed)
		offset = (size_t)atoi(fixed) % stride;
	else if (getrandom(&seed, sizeof(seed), 0) == (ssize_t)sizeof(seed))
		offset = seed % stride;
	else
		offset = (size_t)getpid() % stride;
	printf("     sweep sample: one fault case in %zu of each census, from the %zu-th "
	       "(CUSNAP_SWEEP_OFFSET=%zu replays it; make sweep runs them all)\n",
	       stride, offset, offset);
	fflush(stdout);
	return offset;
}

/* `make sweep`: every combination, every case. */
static bool sweep_all(void)
{
	return getenv("CUSNAP_SWEEP_ALL") != NULL;
}

bool sweep_case_selected(size_t ordinal)
{
	if (sweep_all())
		return true;
	return ordinal % sweep_stride() == sweep_offset();
}

/* How many times the census shows sym called (its lines "sym"). */
static size_t census_count(const char *calls, const char *sym)
{
	size_t n = 0, len = strlen(sym);
	for (const char *p = calls; p && (p = strstr(p, sym)); p += len)
		n += (p == calls || p[-1] == '\n') && p[len] == '\n';
	return n;
}

int sweep_tool(struct group *g, const char *cmd, const char *content, const char *criu, char **out)
{
	char tool_path[PATH_MAX], pid[16], dir[PATH_MAX + 32];
	cusnap_path(tool_path, sizeof(tool_path));
	snprintf(pid, sizeof(pid), "%d", g->root);
	snprintf(dir, sizeof(dir), "%s/state", g->ctl);
	if (!strcmp(cmd, "suspend"))
		return group_suspend(g, content, out, NULL);
	if (!strcmp(cmd, "resume"))
		return group_resume(g, out, NULL);
	if (!strcmp(cmd, "checkpoint"))
		return tool(out, NULL, tool_path, "checkpoint", "--pid", pid, "--dir", dir, "--content", content,
			    "--control-dir", g->ctl, "--criu", criu, "--timeout", "20000", NULL);
	return tool(out, NULL, tool_path, "restore", "--dir", dir, "--criu", criu, NULL);
}

void sweep_reap(struct group *g)
{
	if (g->child > 0)
		test_wait_child(g->child, 10000);
	g->child = 0;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

pid_t sweep_restored_root(struct group *g)
{
	char path[PATH_MAX + 48];
	snprintf(path, sizeof(path), "%s/state/restore.pid", g->ctl);
	char *text = test_read_file(path);
	pid_t pid = text ? (pid_t)atoi(text) : 0;
	free(text);
	return pid;
}

/* Every one of procs processes active and running (else a failure, said). */
static bool all_running(struct group *g, int procs, const char *what)
{
	char *json = group_inspect(g);
	bool ok = count_of(json, "\"phase\":\"active\"") == procs && count_of(json, "\"state\":\"running\"") == procs;
	if (!ok)
		test_fail(__FILE__, __LINE__, "%s: not every process is active and running:\n%s", what, json);
	free(json);
	return ok;
}

bool sweep_group_whole(struct group *g, int procs, const char *what)
{
	bool ok = all_running(g, procs, what);
	if (ok && group_finish(g) != procs) {
		test_fail(__FILE__, __LINE__, "%s: the workload did not pass afterwards", what);
		ok = false;
	}
	return ok;
}

/* A creator that let go, its suspend undone: every process active and running
 * again, and the parent's cached exports refused with the driver's answer: the
 * worker carrying the memory holds only an import, which r580 does not export
 * again (GPU script: reexport_import). Only a completed resume rebuilds it as
 * a creator would; the workload cannot pass its own check here. */
static bool let_go_undone(struct group *g, int procs, const char *what)
{
	bool ok = all_running(g, procs, what);
	if (ok && group_finish(g) >= 0) {
		test_fail(__FILE__, __LINE__, "%s: the cached exports resolved with no rebuild", what);
		ok = false;
	}
	char *log = ok ? test_read_file(g->log) : NULL;
	if (ok &&
	    !contains(log, "the export cached before the checkpoint does not resolve: CUDA_ERROR_INVALID_VALUE")) {
		test_fail(__FILE__, __LINE__, "%s: the workload failed otherwise:\n%s", what, log ? log : "");
		ok = false;
	}
	free(log);
	return ok;
}

bool sweep_parked(struct group *g, int procs, const char *out, const char *what)
{
	char *json = group_inspect(g);
	bool parked = count_of(json, "\"phase\":\"active\"") < procs;
	bool named = contains(out, "half-done");
	if (!parked || !named)
		test_fail(__FILE__, __LINE__, "%s: exit 2, %s, %s:\n%s\n%s", what, parked ? "parked" : "not parked",
			  named ? "the state named" : "the state not named", out, json);
	free(json);
	return parked && named;
}

bool sweep_restored_passes(struct group *g, int procs, const char *what)
{
	pid_t root = sweep_restored_root(g);
	int status = root > 0 ? test_wait_child(root, 60000) : -1;
	char *log = test_read_file(g->log);
	bool ok = status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
		  count_of(log, "PASS vmm_group") >= procs;
	if (!ok)
		test_fail(__FILE__, __LINE__, "%s: the restored workload did not pass (status %#x):\n%s", what, status,
			  log ? log : "");
	free(log);
	return ok;
}

bool sweep_check(const struct sweep *s, struct group *g, int procs, int rc, const char *out, const char *call,
		 const char *what)
{
	char *o2 = NULL;
	bool ok = true;
	switch (s->op) {
	case SWEEP_SUSPEND:
	case SWEEP_CHECKPOINT:
		if (rc == 0) {
			bool ckpt = s->op == SWEEP_CHECKPOINT;
			if (ckpt)
				sweep_reap(g);
			int r2 = sweep_tool(g, ckpt ? "restore" : "resume", s->content, s->criu, &o2);
			if (r2 != 0) {
				test_fail(__FILE__, __LINE__, "%s: %s succeeded, then %s exited %d:\n%s", what,
					  sweep_op_names[s->op], ckpt ? "restore" : "resume", r2, o2);
				ok = false;
			} else {
				ok = ckpt ? sweep_restored_passes(g, procs, what) : group_finish(g) == procs;
				if (!ok && !ckpt)
					test_fail(__FILE__, __LINE__, "%s: the workload did not pass after resume",
						  what);
			}
		} else if (rc == 1) {
			if (!contains(out, "everything undone")) {
				test_fail(__FILE__, __LINE__, "%s: exit 1 without everything undone:\n%s", what, out);
				ok = false;
			}
			ok = ok && (s->release ? let_go_undone(g, procs, what) : sweep_group_whole(g, procs, what));
		} else if (rc == 2) {
			/* Parked: a resume (the recovery it names) brings the group back. */
			ok = sweep_parked(g, procs, out, what);
			int r2 = ok && s->op == SWEEP_SUSPEND ? sweep_tool(g, "resume", s->content, s->criu, &o2) : 0;
			if (ok && s->op == SWEEP_SUSPEND && (r2 != 0 || group_finish(g) != procs)) {
				test_fail(__FILE__, __LINE__, "%s: parked, then resume exited %d:\n%s", what, r2,
					  o2 ? o2 : "");
				ok = false;
			}
		} else {
			test_fail(__FILE__, __LINE__, "%s: exited %d:\n%s", what, rc, out);
			ok = false;
		}
		break;
	case SWEEP_RESUME:
		if (rc == 2) {
			/* Parked by a fault: the rebuild starts again from its start
			 * (DESIGN.md §6.1), and unfaulted it comes back whole. */
			ok = sweep_parked(g, procs, out, what);
			rc = ok ? sweep_tool(g, "resume", s->content, s->criu, &o2) : rc;
			if (ok && rc != 0) {
				test_fail(__FILE__, __LINE__, "%s: parked, then resume again exited %d:\n%s", what, rc,
					  o2);
				ok = false;
			}
		}
		if (rc == 0) {
			ok = group_finish(g) == procs;
			if (!ok)
				test_fail(__FILE__, __LINE__, "%s: the workload did not pass after resume", what);
		} else if (rc == 2) {
			/* (reported above) */
		} else {
			test_fail(__FILE__, __LINE__, "%s: exited %d:\n%s", what, rc, out);
			ok = false;
		}
		break;
	case SWEEP_RESTORE:
		if (rc == 0) {
			ok = sweep_restored_passes(g, procs, what);
		} else if (rc == 2) {
			pid_t root = sweep_restored_root(g);
			if (root > 0)
				test_wait_child(root, 10000);
			if (!contains(out, "restored tree killed") || (root > 0 && kill(root, 0) == 0)) {
				test_fail(__FILE__, __LINE__, "%s: exit 2 with the restored tree not killed:\n%s", what,
					  out);
				ok = false;
			}
		} else {
			test_fail(__FILE__, __LINE__, "%s: exited %d:\n%s", what, rc, out);
			ok = false;
		}
		sweep_reap(g);
		break;
	}
	/* The name messages use: cuMemcpyDtoH for cuMemcpyDtoH_v2. */
	char base[96];
	snprintf(base, sizeof(base), "%s", call ? call : "");
	char *v = strstr(base, "_v");
	if (v)
		*v = '\0';
	if (call && rc != 0 && !contains(out, base)) {
		test_fail(__FILE__, __LINE__, "%s: the failing call is not named:\n%s", what, out);
		ok = false;
	}
	free(o2);
	return ok;
}

int sweep_case(const struct sweep *s, struct group *g, int workers, char *const *env, const char *arm, char **out)
{
	*out = NULL;
	unlink(arm);
	if (group_start(g, "sweep", workers, s->multicast ? 1 : 2, false, NULL, env, NULL) < 0)
		return -1;
	const char *before = s->op == SWEEP_RESUME ? "suspend" : s->op == SWEEP_RESTORE ? "checkpoint" : NULL;
	if (before) {
		int r = sweep_tool(g, before, s->content, s->criu, out);
		if (r != 0) {
			test_fail(__FILE__, __LINE__, "unfaulted %s exited %d:\n%s", before, r, *out);
			free(*out);
			*out = NULL;
			group_kill(g);
			return -1;
		}
		free(*out);
		*out = NULL;
		if (s->op == SWEEP_RESTORE)
			sweep_reap(g);
	}
	test_write_file(arm, "");
	int rc = sweep_tool(g, sweep_op_names[s->op], s->content, s->criu, out);
	unlink(arm); /* what follows (the check) runs unfaulted */
	return rc;
}

int sweep_run(const struct sweep *s)
{
	int workers = 1, procs = workers + 1;
	char arm[PATH_MAX], census[PATH_MAX], report[PATH_MAX];
	snprintf(arm, sizeof(arm), "%s/arm", e2e_root);
	snprintf(census, sizeof(census), "%s/census", e2e_root);
	snprintf(report, sizeof(report), "%s/fired", e2e_root);
	char env_arm[PATH_MAX + 32], env_trace[PATH_MAX + 32], env_report[PATH_MAX + 32], env_role[64];
	snprintf(env_arm, sizeof(env_arm), "CUEMU_FAULT_ARM=%s", arm);
	snprintf(env_trace, sizeof(env_trace), "CUEMU_TRACE=%s", census);
	snprintf(env_report, sizeof(env_report), "CUEMU_FAULT_REPORT=%s", report);
	snprintf(env_role, sizeof(env_role), "VMM_GROUP_FAULT_ROLE=%s", s->role);
	char *mc = s->multicast ? "VMM_GROUP_MULTICAST=1" : s->ipc ? "VMM_GROUP_IPC=1" : NULL;
	char *opts[3] = {NULL, NULL, NULL}; /* the workload's options, packed */
	int nopts = 0;
	if (mc)
		opts[nopts++] = mc;
	if (s->release)
		opts[nopts++] = "VMM_GROUP_RELEASE=1";
	if (s->contiguous)
		opts[nopts++] = "VMM_GROUP_CONTIGUOUS=1";
	const char *kind = s->multicast    ? ", multicast"
			   : s->ipc        ? ", legacy IPC"
			   : s->release    ? ", creator let go"
			   : s->contiguous ? ", contiguous mappings"
					   : "";
	unlink(census);
	struct group g;
	char *out;
	char *census_env[] = {env_arm, env_trace, env_role, SWEEP_SMALL, opts[0], opts[1], opts[2], NULL};
	char what[256];
	snprintf(what, sizeof(what), "census of %s (%s content, in %s%s)", sweep_op_names[s->op], s->content, s->role,
		 kind);
	int rc = sweep_case(s, &g, workers, census_env, arm, &out);
	if (rc > 0)
		test_fail(__FILE__, __LINE__, "%s exited %d:\n%s", what, rc, out);
	bool ok = rc == 0 && sweep_check(s, &g, procs, rc, out, NULL, what);
	free(out);
	group_kill(&g);
	if (!ok)
		return 0;
	char *calls = test_read_file(census);
	int cases = 0;
	bool all = sweep_all();
	size_t first = 0; /* the number of this call's first case among the census's */
	for (size_t c = 0; calls && c < sizeof(sweep_calls) / sizeof(sweep_calls[0]); c++) {
		size_t made = census_count(calls, sweep_calls[c]);
		/* Case N fails the Nth call: past the census's count nothing fires
		 * (the whole sweep runs on until nothing does). */
		for (int n = 1; made && n < 64 && (all || (size_t)n <= made); n++) {
			if (!sweep_case_selected(first + (size_t)n - 1))
				continue;
			char fault[128];
			snprintf(fault, sizeof(fault), "CUEMU_FAULT=%s:%d", sweep_calls[c], n);
			snprintf(what, sizeof(what), "%s: %s (%s content, in %s%s)", sweep_op_names[s->op], fault,
				 s->content, s->role, kind);
			char *env[] = {fault,   env_arm, env_report, env_role, SWEEP_SMALL,
				       opts[0], opts[1], opts[2],    NULL};
			unlink(report);
			rc = sweep_case(s, &g, workers, env, arm, &out);
			if (rc < 0) {
				free(out);
				break;
			}
			cases++;
			char *fired = test_read_file(report);
			bool hit = fired && strstr(fired, sweep_calls[c]);
			free(fired);
			ok = sweep_check(s, &g, procs, rc, out, hit ? sweep_calls[c] : NULL, what);
			free(out);
			group_kill(&g);
			if (!hit || !ok)
				break; /* ran to the end with no fault fired (or already failed) */
		}
		first += made;
	}
	free(calls);
	return cases;
}

void sweep_pair(const struct sweep *base, enum sweep_op second, bool one_role_first, const char *label)
{
	static const char *const contents[] = {"host", "native"}, *const roles[] = {"parent", "worker0"};
	int cases[2] = {0, 0}, k = 0;
	bool all = sweep_all();
	for (int op = 0; op < 2; op++)
		for (int c = 0; c < 2; c++)
			for (int r = 0; r < 2; r++, k++) {
				if (!all && one_role_first && op == 0 && r == 1)
					continue;
				struct sweep s = *base;
				s.op = op ? second : base->op;
				s.content = contents[c];
				s.role = roles[(r + c) % 2];
				if (sweep_selected(k))
					cases[op] += sweep_run(&s);
			}
	printf("     countdown sweeps%s: %s %d fault cases, %s %d\n", label, sweep_op_names[base->op], cases[0],
	       sweep_op_names[second], cases[1]);
	CHECK(cases[0] > 0);
	CHECK(cases[1] > 0);
}

static const struct sweep *main_base;
static const char *main_label;

static void main_pair(void)
{
	sweep_pair(main_base, SWEEP_RESUME, false, main_label);
}

int sweep_suspend_resume_main(const char *name, const struct sweep *base, const char *label, const char *title)
{
	e2e_init(name);
	main_base = base;
	main_label = label;
	test_run(title, main_pair);
	return e2e_done();
}
