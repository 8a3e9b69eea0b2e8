/* SPDX-License-Identifier: MIT */
/* The e2e tests' helpers (tests/e2e/e2e_util.h), compiled once. */
#include <dirent.h>

#include "../e2e/e2e_util.h"
#include "cusnap/layout.h"

char e2e_root[PATH_MAX]; /* scratch for this test run */
char bin_dir[PATH_MAX], emu_dir[PATH_MAX], examples_dir[PATH_MAX], tests_dir[PATH_MAX];

void e2e_init(const char *tag)
{
	snprintf(bin_dir, sizeof(bin_dir), "%s/../../bin", test_exe_dir());
	snprintf(emu_dir, sizeof(emu_dir), "%s/../../emu", test_exe_dir());
	snprintf(examples_dir, sizeof(examples_dir), "%s/../../examples", test_exe_dir());
	snprintf(tests_dir, sizeof(tests_dir), "%s/..", test_exe_dir());
	char tmpl[PATH_MAX];
	snprintf(tmpl, sizeof(tmpl), "%s/tmp-%s-XXXXXX", test_exe_dir(), tag);
	if (!mkdtemp(tmpl))
		SKIP("cannot make a scratch directory");
	snprintf(e2e_root, sizeof(e2e_root), "%s", tmpl);
	/* The tools find cuemu as libcuda.so.1. */
	setenv("LD_LIBRARY_PATH", emu_dir, 1);
	/* Every tool run checks that it closed what it opened (exit 70 otherwise). */
	setenv("CUSNAP_FD_CHECK", "1", 0);
	/* The shim's own threads must make a context current for every driver call. */
	setenv("CUEMU_REQUIRE_CONTEXT", "1", 0);
	if (getenv("CUSNAP_SANITIZER")) {
		setenv("ASAN_OPTIONS", "verify_asan_link_order=0", 0); /* the shim comes before the runtime */
		setenv("VMM_GROUP_SIZE", "262144", 0);
		setenv("CUEMU_GRANULARITY", "65536", 0);
	}
	unsetenv("LD_PRELOAD");
	unsetenv("SNAPSHOT_CONTROL_DIR");
}

long long e2e_content_files(const char *dir, int *files)
{
	long long total = 0;
	*files = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		struct stat st;
		if (layout_content_name(e->d_name) && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISREG(st.st_mode)) {
			total += st.st_size;
			(*files)++;
		}
	}
	if (d)
		closedir(d);
	return total;
}

size_t e2e_alloc_bytes(void)
{
	const char *env = getenv("VMM_GROUP_SIZE");
	return env && *env ? (size_t)strtoull(env, NULL, 0) : 4UL << 20; /* examples/vmm_group.c's default */
}

char e2e_pub[PATH_MAX];

const char *e2e_public_tree(void)
{
	if (e2e_pub[0])
		return e2e_pub;
	char tmpl[] = "/tmp/cusnap-e2e-pub-XXXXXX";
	if (!mkdtemp(tmpl) || chmod(tmpl, 0755) != 0) {
		test_fail(__FILE__, __LINE__, "cannot make a public copy of the build under /tmp: %s", strerror(errno));
		return NULL;
	}
	snprintf(e2e_pub, sizeof(e2e_pub), "%s", tmpl);
	static const char *const parts[][2] = {{"bin", "cusnap"},
					       {"bin", "snapshot-cuda-vmm-launch"},
					       {"lib", "libsnapshot_cuda_vmm.so"},
					       {"emu", "libcuda.so.1"},
					       {"examples", "vmm_group"}};
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		char from[PATH_MAX + 64], to[PATH_MAX + 64], sub[PATH_MAX + 16];
		snprintf(sub, sizeof(sub), "%s/%s", e2e_pub, parts[i][0]);
		mkdir(sub, 0755);
		snprintf(from, sizeof(from), "%s/../../%s/%s", test_exe_dir(), parts[i][0], parts[i][1]);
		snprintf(to, sizeof(to), "%s/%s", sub, parts[i][1]);
		char *argv[] = {"cp", "-L", from, to, NULL};
		if (test_run_cmd(argv, NULL, 30000) != 0) {
			test_fail(__FILE__, __LINE__, "cannot copy %s into %s", from, sub);
			return NULL;
		}
	}
	return e2e_pub;
}

int e2e_done(void)
{
	if (e2e_pub[0]) {
		char *argv[] = {"rm", "-rf", e2e_pub, NULL};
		test_run_cmd(argv, NULL, 30000);
	}
	if (!test_failures) {
		char *argv[] = {"rm", "-rf", e2e_root, NULL};
		test_run_cmd(argv, NULL, 30000);
	} else {
		printf("scratch kept in %s\n", e2e_root);
	}
	return test_done();
}

/* The last tool run, shown with the first failure that follows it: what ran,
 * how it ended and what it printed. */
static struct {
	char argv[1024], how[192];
	char *out;
	bool shown;
} tool_last;

void tool_last_show(void)
{
	if (tool_last.shown || !tool_last.argv[0])
		return;
	tool_last.shown = true;
	const char *out = tool_last.out ? tool_last.out : "";
	size_t len = strlen(out);
	printf("    the last command run, %s, %s; it printed%s:\n%s\n", tool_last.argv, tool_last.how,
	       len > 6000 ? " (the last 6000 bytes)" : "", len > 6000 ? out + len - 6000 : out);
}

void tool_last_set(char *const argv[], int status, int timeout_ms, const char *out)
{
	size_t n = 0;
	tool_last.argv[0] = '\0';
	for (int i = 0; argv[i] && n < sizeof(tool_last.argv) - 1; i++)
		n += (size_t)snprintf(tool_last.argv + n, sizeof(tool_last.argv) - n, "%s%s", i ? " " : "", argv[i]);
	test_describe_status(status, timeout_ms, tool_last.how, sizeof(tool_last.how));
	free(tool_last.out);
	tool_last.out = strdup(out ? out : "");
	tool_last.shown = false;
	test_fail_hook = tool_last_show;
}

int tool(char **out, char *const env[], const char *first, ...)
{
	enum { TIMEOUT_MS = 120000 };
	char *argv[64];
	int n = 0;
	va_list ap;
	va_start(ap, first);
	for (const char *a = first; a && n < 63; a = va_arg(ap, const char *))
		argv[n++] = (char *)a;
	va_end(ap);
	argv[n] = NULL;
	char log[PATH_MAX];
	snprintf(log, sizeof(log), "%s/tool.out", e2e_root);
	unlink(log);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 1);
		dup2(fd, 2);
		for (int i = 0; env && env[i]; i++)
			putenv(env[i]);
		execv(argv[0], argv);
		dprintf(2, "cannot execute %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	int status = pid < 0 ? -1 : test_wait_child(pid, TIMEOUT_MS);
	char *text = test_read_file(log);
	if (pid < 0) {
		char why[128];
		snprintf(why, sizeof(why), "cannot fork: %s\n", strerror(errno));
		free(text);
		text = strdup(why);
	}
	tool_last_set(argv, status, TIMEOUT_MS, text);
	if (out)
		*out = text ? text : strdup("");
	else
		free(text);
	return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void cusnap_path(char *out, size_t len)
{
	snprintf(out, len, "%s/cusnap", bin_dir);
}

int group_wait_ready(struct group *g, const char *name)
{
	char ready[PATH_MAX + 32];
	snprintf(ready, sizeof(ready), "%s/ready-for-snapshot", g->ctl);
	if (test_wait_file(ready, 30000))
		return 0;
	char *text = test_read_file(g->log);
	test_fail(__FILE__, __LINE__, "workload %s did not get ready; its log:\n%s", name, text ? text : "");
	free(text);
	return -1;
}

void group_spawn_argv(struct group *g, const char *name, const char *const *argv, char *const *env_extra,
		      const char *ctl_override)
{
	static int runs;
	memset(g, 0, sizeof(*g));
	runs++;
	/* A fresh control directory each run: ready-for-snapshot and restore-complete are per run. */
	if (ctl_override)
		snprintf(g->ctl, sizeof(g->ctl), "%s", ctl_override);
	else
		snprintf(g->ctl, sizeof(g->ctl), "%s/%s-%d-ctl", e2e_root, name, runs);
	snprintf(g->log, sizeof(g->log), "%s/%s-%d.log", e2e_root, name, runs);
	snprintf(g->env_ctl, sizeof(g->env_ctl), "SNAPSHOT_CONTROL_DIR=%s", g->ctl);
	char *env[16];
	int e = 0;
	env[e++] = g->env_ctl;
	for (int i = 0; env_extra && env_extra[i] && e < 15; i++)
		env[e++] = env_extra[i];
	env[e] = NULL;
	g->child = test_spawn((char *const *)argv, env, g->log);
	g->root = g->child;
}

int group_start_argv(struct group *g, const char *name, const char *const *argv, bool wrapped, char *const *env_extra,
		     const char *ctl_override)
{
	group_spawn_argv(g, name, argv, env_extra, ctl_override);
	if (group_wait_ready(g, name) < 0)
		return -1;
	if (wrapped) {
		/* unshare --fork: the workload is the wrapper's child. */
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/task/%d/children", g->child, g->child);
		char *text = test_read_file(path);
		g->root = text ? (pid_t)atoi(text) : 0;
		free(text);
	}
	return 0;
}

int group_start_r610(struct group *g, const char *name, bool job, char *log, size_t loglen)
{
	static char cusnap_bin[PATH_MAX], group_bin[PATH_MAX + 32], log_env[PATH_MAX + 32];
	cusnap_path(cusnap_bin, sizeof(cusnap_bin));
	snprintf(group_bin, sizeof(group_bin), "%s/vmm_group", examples_dir);
	snprintf(log, loglen, "%s/%s-ckpt.log", e2e_root, name);
	snprintf(log_env, sizeof(log_env), "CUEMU_CKPT_LOG=%s", log);
	unlink(log);
	char *env[] = {"VMM_GROUP_IPC=1", "SNAPSHOT_CUDA_VMM_IPC=0", "CUEMU_PROFILE=r610", log_env, NULL};
	const char *argv[16] = {cusnap_bin, "run"};
	int n = 2;
	if (job)
		argv[n++] = "--launch-job";
	const char *rest[] = {"--", group_bin, "--workers", "1", "--allocs", "2", "--timeout", "60", NULL};
	for (int i = 0; rest[i]; i++)
		argv[n++] = rest[i];
	argv[n] = NULL;
	return group_start_argv(g, name, argv, false, env, NULL);
}

int group_launch(struct group *g, const char *name, int workers, int allocs, bool plain, const char *const *wrapper,
		 char *const *env_extra, const char *ctl_override, bool wait)
{
	static char cusnap[PATH_MAX], group[PATH_MAX + 32], w[16], a[16];
	cusnap_path(cusnap, sizeof(cusnap));
	snprintf(group, sizeof(group), "%s/vmm_group", examples_dir);
	snprintf(w, sizeof(w), "%d", workers);
	snprintf(a, sizeof(a), "%d", allocs);
	const char *argv[32];
	int n = 0;
	for (int i = 0; wrapper && wrapper[i]; i++)
		argv[n++] = wrapper[i];
	if (!plain) {
		argv[n++] = cusnap;
		argv[n++] = "run";
		argv[n++] = "--";
	}
	argv[n++] = group;
	argv[n++] = "--workers";
	argv[n++] = w;
	argv[n++] = "--allocs";
	argv[n++] = a;
	argv[n++] = "--timeout";
	argv[n++] = "60";
	argv[n] = NULL;
	if (!wait) {
		group_spawn_argv(g, name, argv, env_extra, ctl_override);
		return 0;
	}
	return group_start_argv(g, name, argv, wrapper != NULL, env_extra, ctl_override);
}

int group_start(struct group *g, const char *name, int workers, int allocs, bool plain, const char *const *wrapper,
		char *const *env_extra, const char *ctl_override)
{
	return group_launch(g, name, workers, allocs, plain, wrapper, env_extra, ctl_override, true);
}

int tree_pids(pid_t pid, pid_t *pids, int max)
{
	int n = 0;
	pids[n++] = pid;
	for (int i = 0; i < n; i++) {
		char path[96];
		snprintf(path, sizeof(path), "/proc/%d/task/%d/children", pids[i], pids[i]);
		char *text = test_read_file(path);
		for (char *p = text; p && *p && n < max;) {
			char *end;
			long c = strtol(p, &end, 10);
			if (end == p)
				break;
			pids[n++] = (pid_t)c;
			p = end;
		}
		free(text);
	}
	return n;
}

void tree_kill(pid_t root)
{
	pid_t pids[64];
	int n = root > 0 ? tree_pids(root, pids, 64) : 0;
	for (int i = n - 1; i >= 0; i--)
		kill(pids[i], SIGKILL);
}

pid_t helpers_start(const char *dir, const char *ctl, const char *script)
{
	char envctl[PATH_MAX + 32], log[PATH_MAX + 16];
	snprintf(envctl, sizeof(envctl), "SNAPSHOT_CONTROL_DIR=%s", ctl);
	snprintf(log, sizeof(log), "%s/sh.log", dir);
	char *argv[] = {"/bin/sh", "-c", (char *)script, NULL}, *env[] = {envctl, NULL};
	pid_t sh = test_spawn(argv, env, log);
	int ns;
	unsigned long long va;
	CHECK_EQ(test_wait_ready(dir, "a", 20000, &ns, &va), 0);
	CHECK_EQ(test_wait_ready(dir, "b", 20000, &ns, &va), 0);
	return sh;
}

void e2e_scratch(const char *name, char dir[PATH_MAX], char ctl[PATH_MAX + 16])
{
	snprintf(dir, PATH_MAX, "%s/%s", e2e_root, name);
	snprintf(ctl, PATH_MAX + 16, "%s/ctl", dir);
	mkdir(dir, 0700);
}

pid_t gpu_pair_start(const char *dir, const char *ctl)
{
	char script[4 * PATH_MAX];
	snprintf(script, sizeof(script),
		 "L=%s/snapshot-cuda-vmm-launch H=%s/emu/target_helper; $L $H %s a --serve --dev 0 & sleep 0.3; "
		 "$L $H %s b --import a --dev 1 & wait",
		 bin_dir, tests_dir, dir, dir);
	return helpers_start(dir, ctl, script);
}

pid_t partial_tree_start(const char *dir, const char *ctl)
{
	char script[4 * PATH_MAX];
	snprintf(script, sizeof(script),
		 "%s/snapshot-cuda-vmm-launch %s/emu/target_helper %s a & %s/emu/target_helper %s b & wait", bin_dir,
		 tests_dir, dir, tests_dir, dir);
	return helpers_start(dir, ctl, script);
}

bool wait_stopped(pid_t pid, int timeout_ms)
{
	for (int waited = 0; waited <= timeout_ms; waited += 10) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		char *st = test_read_file(path), *paren = st ? strrchr(st, ')') : NULL;
		bool stopped = paren && paren[1] == ' ' && paren[2] == 'T';
		free(st);
		if (stopped)
			return true;
		usleep(10000);
	}
	return false;
}

int group_finish_counting(struct group *g, const char *marker)
{
	char done[PATH_MAX + 32];
	snprintf(done, sizeof(done), "%s/restore-complete", g->ctl);
	test_write_file(done, "");
	int status = test_wait_child(g->child, 60000);
	g->child = 0;
	char *text = test_read_file(g->log);
	int pass = 0;
	for (const char *p = text; p && (p = strstr(p, marker)); p++)
		pass++;
	bool ok = status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
	if (!ok)
		printf("  workload exited with status %#x; its log:\n%s\n", status, text ? text : "");
	free(text);
	return ok ? pass : -1;
}

int group_finish(struct group *g)
{
	return group_finish_counting(g, "PASS vmm_group");
}

void group_kill(struct group *g)
{
	if (g->child <= 0)
		return;
	tree_kill(g->root);
	kill(g->child, SIGKILL);
	test_wait_child(g->child, 10000);
	g->child = 0;
}

int group_suspend(struct group *g, const char *content, char **out, char *const *env)
{
	char tool_path[PATH_MAX], pid[16], dir[PATH_MAX + 32];
	cusnap_path(tool_path, sizeof(tool_path));
	snprintf(pid, sizeof(pid), "%d", g->root);
	snprintf(dir, sizeof(dir), "%s/state", g->ctl);
	return tool(out, env, tool_path, "suspend", "--pid", pid, "--dir", dir, "--content", content, "--control-dir",
		    g->ctl, "--timeout", "20000", NULL);
}

int group_resume(struct group *g, char **out, char *const *env)
{
	char tool_path[PATH_MAX], pid[16], dir[PATH_MAX + 32];
	cusnap_path(tool_path, sizeof(tool_path));
	snprintf(pid, sizeof(pid), "%d", g->root);
	snprintf(dir, sizeof(dir), "%s/state", g->ctl);
	return tool(out, env, tool_path, "resume", "--pid", pid, "--dir", dir, "--control-dir", g->ctl, NULL);
}

char *group_inspect(struct group *g)
{
	char tool_path[PATH_MAX], pid[16], *out = NULL;
	cusnap_path(tool_path, sizeof(tool_path));
	snprintf(pid, sizeof(pid), "%d", g->root);
	tool(&out, NULL, tool_path, "inspect", "--pid", pid, "--control-dir", g->ctl, "--json", NULL);
	return out;
}

int group_device_mappings(struct group *g, const char *what)
{
	pid_t pids[64];
	int n = tree_pids(g->root, pids, 64), total = 0;
	for (int i = 0; i < n; i++)
		total += test_count_maps(pids[i], what);
	return total;
}

bool contains(const char *text, const char *needle)
{
	return text && strstr(text, needle);
}

int count_of(const char *text, const char *needle)
{
	int n = 0;
	for (const char *p = text; p && (p = strstr(p, needle)); p++)
		n++;
	return n;
}

const char *control_said(const char *ctl, char out[64])
{
	static const char *const said[] = {"snapshot-complete", "restore-complete"};
	size_t at = 0;
	out[0] = '\0';
	for (size_t i = 0; i < 2; i++) {
		char path[PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/%s", ctl, said[i]);
		if (faccessat(AT_FDCWD, path, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
			at += (size_t)snprintf(out + at, 64 - at, "%s%s", at ? ", " : "", said[i]);
	}
	return out;
}

void reap_all(void)
{
	for (int i = 0; i < 200; i++) {
		pid_t r = waitpid(-1, NULL, WNOHANG);
		if (r < 0)
			return;
		if (r == 0)
			usleep(10000);
	}
}

void group_dumped(struct group *g)
{
	test_wait_child(g->child, 10000);
	g->child = 0;
	reap_all();
}

bool group_dump_ok(struct group *g, int rc, char *out)
{
	free(out);
	if (rc != 0) {
		test_fail(__FILE__, __LINE__, "the checkpoint of %s exited %d", g->log, rc);
		tool_last_show();
		group_kill(g);
		return false;
	}
	group_dumped(g);
	return true;
}

pid_t restored_root(const char *dir)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/restore.pid", dir);
	char *text = test_read_file(path);
	pid_t pid = text ? (pid_t)atoi(text) : 0;
	free(text);
	return pid;
}

/* The order set-aside logs are read in: by their names (the time in each). */
static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

char *e2e_log_all(const char *path)
{
	char dir[PATH_MAX], prefix[PATH_MAX + 32];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return test_read_file(path);
	*slash = '\0';
	snprintf(prefix, sizeof(prefix), "%s.before-restore-", slash + 1);
	struct dirent **names = NULL;
	int n = scandir(dir, &names, NULL, by_name);
	size_t len = 0;
	char *all = calloc(1, 1);
	for (int i = 0; i <= n && all; i++) {
		char p[PATH_MAX + 300];
		if (i < n && strncmp(names[i]->d_name, prefix, strlen(prefix)))
			continue;
		if (i < n)
			snprintf(p, sizeof(p), "%s/%s", dir, names[i]->d_name);
		char *text = test_read_file(i < n ? p : path);
		size_t add = text ? strlen(text) : 0;
		char *g = realloc(all, len + add + 1);
		if (g) {
			memcpy(g + len, text ? text : "", add + 1);
			len += add;
		}
		all = g;
		free(text);
	}
	for (int i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return all;
}

int restored_passes(struct group *g, pid_t root)
{
	int status = test_wait_child(root, 60000);
	char *log = e2e_log_all(g->log);
	int pass = count_of(log, "PASS vmm_group");
	if (!(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0))
		printf("  restored workload exited with %#x; log:\n%s\n", status, log ? log : "");
	free(log);
	return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? pass : -1;
}

void gpu_pair_swapped(const char *dir, const char *ck)
{
	TARGET_EXPECT_DIR(dir, "a", "device", "1");
	TARGET_EXPECT_DIR(dir, "b", "check 1", "PASS");
	TARGET_EXPECT_DIR(dir, "b", "fill 5", "OK");
	TARGET_EXPECT_DIR(dir, "a", "check 5", "PASS");
	tree_kill(restored_root(ck));
	reap_all();
}

int group_pids(struct group *g, pid_t pids[8], int want)
{
	int n = tree_pids(g->root, pids, 8);
	if (n != want)
		test_fail(__FILE__, __LINE__, "the tree of %d has %d processes, not %d", (int)g->root, n, want);
	return n;
}

int group_start_pair(struct group *g, const char *name)
{
	return group_start(g, name, 1, 2, false, NULL, NULL, NULL);
}
