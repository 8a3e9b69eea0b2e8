/* SPDX-License-Identifier: MIT */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "test.h"

int test_failures;
const char *test_current = "main";
void (*test_fail_hook)(void);
static int sub_failures;

void test_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	test_failures++;
	sub_failures++;
	if (sub_failures > 20) {
		if (sub_failures == 21)
			printf("  [%s] more failures not shown\n", test_current);
		return;
	}
	fprintf(stdout, "  %s:%d: [%s] ", file, line, test_current);
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fprintf(stdout, "\n");
	if (test_fail_hook)
		test_fail_hook();
	fflush(stdout);
}

const char *test_cu_name(int result)
{
	/* Resolved at run time so that unit tests need no driver. */
	static int (*name_fn)(int, const char **);
	static bool looked;
	if (!looked) {
		looked = true;
		*(void **)&name_fn = dlsym(RTLD_DEFAULT, "cuGetErrorName");
	}
	const char *s = NULL;
	if (name_fn && name_fn(result, &s) == 0 && s)
		return s;
	return "?";
}

void test_run(const char *name, void (*fn)(void))
{
	/* TEST_ONLY=TEXT: run only the tests whose name holds TEXT. */
	const char *only = getenv("TEST_ONLY");
	if (only && *only && !strstr(name, only))
		return;
	test_current = name;
	sub_failures = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	fn();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("%s %s (%.1f s)\n", sub_failures ? "FAIL" : "ok  ", name, secs);
	fflush(stdout);
	test_current = "main";
}

int test_done(void)
{
	return test_failures ? 1 : 0;
}

const char *test_exe_dir(void)
{
	static char dir[PATH_MAX];
	if (!dir[0]) {
		ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
		if (n < 0)
			return ".";
		dir[n] = '\0';
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
	}
	return dir;
}

char *test_tempdir(const char *tag)
{
	const char *base = getenv("TMPDIR");
	char tmpl[PATH_MAX];
	snprintf(tmpl, sizeof(tmpl), "%s/cusnap-%s-XXXXXX", base && *base ? base : "/tmp", tag);
	char *d = mkdtemp(tmpl);
	return d ? strdup(d) : NULL;
}

char *test_read_file(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (len + 1 >= cap) {
			cap *= 2;
			buf = realloc(buf, cap);
		}
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	return buf;
}

int test_write_file(const char *path, const char *text)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	size_t len = strlen(text);
	int rc = write(fd, text, len) == (ssize_t)len ? 0 : -1;
	close(fd);
	if (rc == 0)
		rc = rename(tmp, path);
	return rc;
}

bool test_wait_file(const char *path, int timeout_ms)
{
	for (int waited = 0; waited <= timeout_ms; waited += 5) {
		if (access(path, F_OK) == 0)
			return true;
		usleep(5000);
	}
	return false;
}

int test_count_maps(pid_t pid, const char *needle)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	char line[1024];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

int test_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

int test_send_fd(int sock, int fd)
{
	char byte = 'F';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

int test_recv_fd(int sock)
{
	char byte;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (!c || c->cmsg_type != SCM_RIGHTS)
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

int test_wait_child(pid_t pid, int timeout_ms)
{
	for (int waited = 0; waited <= timeout_ms; waited += 5) {
		int status;
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return status;
		if (r < 0)
			return -1;
		usleep(5000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -2;
}

void test_describe_status(int status, int timeout_ms, char *out, size_t len)
{
	if (status == -2)
		snprintf(out, len, "did not finish within %d ms and was killed", timeout_ms);
	else if (status < 0)
		snprintf(out, len, "could not be waited for: %s", strerror(errno));
	else if (WIFEXITED(status))
		snprintf(out, len, "exited %d%s", WEXITSTATUS(status),
			 WEXITSTATUS(status) == 127 ? " (127: could not be executed)" : "");
	else if (WIFSIGNALED(status))
		snprintf(out, len, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(out, len, "ended with status %#x", status);
}

/* In a child that failed to exec: say why on its stderr, exit 127. */
__attribute__((noreturn)) static void exec_failed(const char *path)
{
	dprintf(2, "cannot execute %s: %s\n", path, strerror(errno));
	_exit(127);
}

int test_run_cmd(char *const argv[], const char *log_path, int timeout_ms)
{
	pid_t pid = fork();
	if (pid < 0) {
		printf("  cannot fork for %s: %s\n", argv[0], strerror(errno));
		return -1;
	}
	if (pid == 0) {
		if (log_path) {
			int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
			if (fd >= 0) {
				dup2(fd, 1);
				dup2(fd, 2);
			}
		}
		execvp(argv[0], argv);
		exec_failed(argv[0]);
	}
	int status = test_wait_child(pid, timeout_ms);
	if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		char why[160];
		test_describe_status(status, timeout_ms, why, sizeof(why));
		printf("  %s %s%s%s\n", argv[0], why, log_path ? "; its output is in " : "", log_path ? log_path : "");
	}
	return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static pid_t spawn(char *const argv[], char *const env[], const char *log, bool tied)
{
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	/* (a parent gone before the tie was made is seen as a new parent) */
	if (tied && (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent))
		_exit(126);
	setsid();
	int in = open("/dev/null", O_RDONLY);
	int out = open(log ? log : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0600);
	if (in < 0 || out < 0)
		_exit(126);
	dup2(in, 0);
	dup2(out, 1);
	dup2(out, 2);
	if (in > 2)
		close(in);
	if (out > 2)
		close(out);
	for (int i = 0; env && env[i]; i++)
		putenv(env[i]);
	execv(argv[0], argv);
	exec_failed(argv[0]);
}

pid_t test_spawn(char *const argv[], char *const env[], const char *log)
{
	return spawn(argv, env, log, false);
}

pid_t test_spawn_tied(char *const argv[], char *const env[], const char *log)
{
	return spawn(argv, env, log, true);
}

char *test_command(const char *dir, const char *name, const char *cmd, int timeout_ms)
{
	char cmd_path[PATH_MAX], out_path[PATH_MAX];
	snprintf(cmd_path, sizeof(cmd_path), "%s/%s.cmd", dir, name);
	snprintf(out_path, sizeof(out_path), "%s/%s.out", dir, name);
	unlink(out_path);
	if (test_write_file(cmd_path, cmd) < 0 || !test_wait_file(out_path, timeout_ms))
		return NULL;
	char *text = test_read_file(out_path);
	unlink(out_path);
	if (text) {
		size_t n = strlen(text);
		while (n && (text[n - 1] == '\n' || text[n - 1] == ' '))
			text[--n] = '\0';
	}
	return text;
}

int test_wait_ready(const char *dir, const char *name, int timeout_ms, int *nspid, unsigned long long *va)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s.ready", dir, name);
	if (!test_wait_file(path, timeout_ms))
		return -1;
	char *text = test_read_file(path);
	int ok = text && sscanf(text, "%d %llx", nspid, va) == 2;
	free(text);
	return ok ? 0 : -1;
}

bool test_share(size_t index)
{
	const char *pass = getenv("TEST_PASS");
	if (getenv("CUSNAP_SWEEP_ALL") || !pass || !strcmp(pass, "plain"))
		return true;
	return index % 2 == (strcmp(pass, "tsan") ? 0u : 1u);
}

bool test_picked(const char *what, size_t index, size_t n)
{
	if (getenv("CUSNAP_SWEEP_ALL") || n < 2)
		return true;
	static unsigned draw; /* once per program: every loop of it picks from the same draw */
	static bool drawn;
	const char *fixed = getenv("CUSNAP_SWEEP_OFFSET");
	if (!drawn && fixed && *fixed)
		draw = (unsigned)atoi(fixed);
	else if (!drawn && getrandom(&draw, sizeof(draw), 0) != (ssize_t)sizeof(draw))
		draw = (unsigned)getpid();
	drawn = true;
	size_t pick = draw % n;
	if (index == 0) {
		printf("     %s: variant %zu of %zu this run (CUSNAP_SWEEP_OFFSET=%zu replays it; "
		       "CUSNAP_SWEEP_ALL=1 runs all)\n",
		       what, pick, n, pick);
		fflush(stdout);
	}
	return index == pick;
}

void test_require_criu(char *out, size_t len)
{
	if (getenv("CUSNAP_SANITIZER"))
		SKIP("CRIU does not dump sanitizer runtimes' shadow memory");
	if (geteuid() != 0)
		SKIP("CRIU needs root");
	if (test_find_criu(out, len) != 0)
		SKIP("no CRIU (run scripts/setup-criu.sh, or set CRIU=/path/to/criu)");
	prctl(PR_SET_CHILD_SUBREAPER, 1);
}

int test_find_criu(char *out, size_t len)
{
	const char *env = getenv("CRIU");
	if (env && *env) {
		snprintf(out, len, "%s", env);
		return access(out, X_OK);
	}
	/* Test executables live in BUILD/tests/<part>/. */
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/../../criu-path", test_exe_dir());
	char *text = test_read_file(path);
	if (text && *text) {
		text[strcspn(text, "\n")] = '\0';
		snprintf(out, len, "%s", text);
	} else {
		snprintf(out, len, "%s/../../criu/criu", test_exe_dir());
	}
	free(text);
	return access(out, X_OK);
}

int test_find_criu_old(char *out, size_t len)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/../../criu-old-path", test_exe_dir());
	char *text = test_read_file(path);
	int rc = -1;
	if (text && *text) {
		text[strcspn(text, "\n")] = '\0';
		snprintf(out, len, "%s", text);
		rc = access(out, X_OK) == 0 ? 0 : -1;
	}
	free(text);
	return rc;
}

long test_criu_version(const char *criu)
{
	char *argv[] = {(char *)criu, "--version", NULL}, *text;
	char path[64];
	snprintf(path, sizeof(path), "/tmp/criu-version-%d", (int)getpid());
	if (test_run_cmd(argv, path, 10000) != 0)
		return -1;
	text = test_read_file(path);
	unlink(path);
	int major = 0, minor = 0, patch = 0;
	const char *v = text ? strstr(text, "Version:") : NULL;
	long version = v && sscanf(v, "Version: %d.%d.%d", &major, &minor, &patch) >= 2
			       ? major * 1000000L + minor * 1000L + patch
			       : -1;
	free(text);
	return version;
}

bool test_child_passes(const char *fault, void (*fn)(void *arg), void *arg)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		test_failures = 0;
		if (fault)
			setenv("CUEMU_FAULT", fault, 1);
		fn(arg);
		fflush(stdout);
		_exit(test_failures ? 1 : 0);
	}
	int status = test_wait_child(pid, 30000);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}
