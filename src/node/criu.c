/* SPDX-License-Identifier: MIT */
/* Running CRIU: found explicitly, its command line built without a shell, its
 * log kept in the checkpoint directory and its last errors shown on failure. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cusnap/paths.h"
#include "internal.h"

/* How much of a CRIU log is read for its errors. */
#define CRIU_LOG_TAIL (1 << 20)

static bool executable(const char *p)
{
	return p && *p && access(p, X_OK) == 0;
}

/* Program name on PATH (or the usual directories): true with its path in out. */
static bool on_path(const char *name, char *out, size_t len)
{
	const char *path = getenv("PATH");
	return path_search(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin", name, X_OK, out, len);
}

const char *criu_network_lock(void)
{
	char path[PATH_MAX];
	return on_path("iptables-restore", path, sizeof(path)) ? NULL : "nftables";
}

int criu_find(const struct settings *s, char *out, size_t len, char *err, size_t errlen)
{
	if (s->criu[0]) {
		if (!executable(s->criu)) {
			snprintf(err, errlen, "%s (--criu or $CRIU): not an executable", s->criu);
			return -1;
		}
		snprintf(out, len, "%s", s->criu);
		return 0;
	}
	/* The project's provisioned wrapper (scripts/setup-criu.sh), beside cusnap. */
	char self[PATH_MAX];
	if (path_self_dir(self, sizeof(self))) {
		char cand[PATH_MAX + 32];
		snprintf(cand, sizeof(cand), "%s/../criu/criu", self);
		if (executable(cand)) {
			snprintf(out, len, "%s", cand);
			return 0;
		}
	}
	if (on_path("criu", out, len))
		return 0;
	snprintf(err, errlen,
		 "no criu found (--criu, $CRIU, PATH): run scripts/setup-criu.sh (or 'make criu') to provision CRIU >= "
		 "4.0 (4.2 on kernels 6.16 and later)");
	return -1;
}

/* What `PREFIX... --version` prints after "Version:" (prefix NULL-ended), or "". */
static void version_of(char *const prefix[], char *out, size_t len)
{
	out[0] = '\0';
	char *argv[16];
	size_t n = 0;
	while (prefix[n] && n < 14) {
		argv[n] = prefix[n];
		n++;
	}
	argv[n++] = "--version";
	argv[n] = NULL;
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 1);
		execv(argv[0], argv);
		_exit(127);
	}
	close(pipefd[1]);
	char buf[256] = "", version[64];
	/* To its end (or the buffer's): the lines may come in several writes. */
	ssize_t got = pid > 0 ? 0 : -1, r;
	while (got >= 0 && (size_t)got < sizeof(buf) - 1 &&
	       ((r = read(pipefd[0], buf + got, sizeof(buf) - 1 - (size_t)got)) > 0 || (r < 0 && errno == EINTR)))
		got += r > 0 ? r : 0;
	close(pipefd[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	if (got <= 0)
		return;
	buf[got] = '\0';
	char *v = strstr(buf, "Version:");
	if (v && sscanf(v, "Version: %63s", version) == 1)
		snprintf(out, len, "%s", version);
}

void criu_version(const char *criu, char *out, size_t len)
{
	/* Asked once per binary as it is (a checkpoint asks twice; each asking
	 * runs CRIU, 12-16 ms here), again when the file at the path changes. */
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static struct {
		char path[PATH_MAX], version[64];
		struct stat st;
	} last;
	struct stat st;
	bool known = stat(criu, &st) == 0;
	pthread_mutex_lock(&mu);
	if (known && !strcmp(last.path, criu) && last.st.st_dev == st.st_dev && last.st.st_ino == st.st_ino &&
	    last.st.st_size == st.st_size && last.st.st_mtim.tv_sec == st.st_mtim.tv_sec &&
	    last.st.st_mtim.tv_nsec == st.st_mtim.tv_nsec) {
		snprintf(out, len, "%s", last.version);
	} else {
		char *const argv[] = {(char *)criu, NULL};
		version_of(argv, out, len);
		if (known && out[0] && strlen(criu) < sizeof(last.path)) {
			snprintf(last.path, sizeof(last.path), "%s", criu);
			snprintf(last.version, sizeof(last.version), "%s", out);
			last.st = st;
		}
	}
	pthread_mutex_unlock(&mu);
}

void criu_self_version(char *out, size_t len)
{
	out[0] = '\0';
	char exe[PATH_MAX], cmdline[8192];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t c = fd >= 0 ? read(fd, cmdline, sizeof(cmdline) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0 || c <= 0)
		return;
	exe[n] = '\0';
	cmdline[c] = '\0';
	char *args[16];
	size_t nargs = 0;
	for (char *a = cmdline; a < cmdline + c && nargs < 15; a += strlen(a) + 1)
		args[nargs++] = a;
	const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
	char *prefix[16] = {exe};
	size_t k = 1;
	if (!strncmp(base, "ld-", 3)) {
		/* Run through a loader (scripts/setup-criu.sh's wrapper): its options,
		 * then CRIU's path, then CRIU's own arguments. */
		for (size_t i = 1; i < nargs && k < 14; i++) {
			prefix[k++] = args[i];
			if (args[i][0] != '-')
				break; /* CRIU itself */
			bool valued = !strcmp(args[i], "--library-path") || !strcmp(args[i], "--preload") ||
				      !strcmp(args[i], "--argv0") || !strcmp(args[i], "--audit");
			if (valued && i + 1 < nargs)
				prefix[k++] = args[++i];
		}
	}
	prefix[k] = NULL;
	version_of(prefix, out, len);
}

int criu_version_cmp(const char *a, const char *b)
{
	int va[3] = {0}, vb[3] = {0};
	sscanf(a, "%d.%d.%d", &va[0], &va[1], &va[2]);
	sscanf(b, "%d.%d.%d", &vb[0], &vb[1], &vb[2]);
	for (int i = 0; i < 3; i++)
		if (va[i] != vb[i])
			return va[i] < vb[i] ? -1 : 1;
	return 0;
}

/* The last error lines of a CRIU log, said as one error: only its tail is
 * read (a runaway restore can leave gigabytes). */
static void show_errors(const char *log_path)
{
	FILE *f = fopen(log_path, "re");
	if (!f) {
		voice(VOICE_ERROR, "(no CRIU log at %s)", log_path);
		return;
	}
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && st.st_size > CRIU_LOG_TAIL) {
		fseeko(f, st.st_size - CRIU_LOG_TAIL, SEEK_SET);
		int c;
		while ((c = fgetc(f)) != EOF && c != '\n')
			; /* from the next whole line */
	}
	char lines[8][512], line[512];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		/* (CRIU's RLIMIT_NOFILE line is harmless where the limit cannot be raised) */
		if ((strstr(line, "Error") || strstr(line, "error")) && !strstr(line, "RLIMIT_NOFILE"))
			snprintf(lines[n++ % 8], sizeof(lines[0]), "%s", line);
	fclose(f);
	char text[8 * 520] = "";
	size_t at = 0;
	for (int i = n > 8 ? n - 8 : 0; i < n; i++)
		at += (size_t)snprintf(text + at, sizeof(text) - at, "\n  %.*s", (int)strcspn(lines[i % 8], "\n"),
				       lines[i % 8]);
	voice(VOICE_ERROR, "CRIU failed; last errors from %s:%s", log_path, text);
}

struct criu_bounds criu_bounds_default(bool own_group, bool stop_on_signal, const struct settings *s)
{
	long long t = 10LL * s->timeout_ms;
	return (struct criu_bounds){
		.own_group = own_group,
		.stop_on_signal = stop_on_signal,
		.time_ms = s->criu_timeout_ms ? s->criu_timeout_ms
			   : t < 120000       ? 120000
					      : t,
		.log_max = s->criu_log_max,
		.dirfd = -1,
	};
}

static void criu_kill(pid_t pid, bool group)
{
	kill(group ? -pid : pid, SIGKILL);
	kill(pid, SIGKILL);
}

/* Watched, never waited on blindly: a runaway CRIU (a damaged image can make
 * a restored task spin while CRIU logs at 100 MB/s) is killed at its time or
 * log bound, or at once on a signal when the caller asks; pfd (-1: none) is
 * its pidfd. 0 with its *status once it exited, or criu_run's negative codes. */
static int watch(pid_t pid, int pfd, const char *log_path, const struct criu_bounds *b, int *status)
{
	double start = now_ms();
	for (;;) {
		pid_t w = waitpid(pid, status, WNOHANG);
		if (w == pid)
			return 0;
		if (w < 0 && errno != EINTR)
			return -1;
		struct stat st;
		const char *why = NULL;
		int rc = 0;
		if (now_ms() - start > (double)b->time_ms) {
			rc = -ETIMEDOUT;
			why = "its time bound";
		} else if (stat(log_path, &st) == 0 && st.st_size > b->log_max) {
			rc = -EFBIG;
			why = "its log bound";
		} else if (b->stop_on_signal && signal_caught()) {
			rc = -EINTR;
			why = strsignal(signal_caught());
		}
		if (why) {
			criu_kill(pid, b->own_group);
			while (waitpid(pid, status, 0) < 0 && errno == EINTR)
				;
			if (rc == -ETIMEDOUT)
				voice(VOICE_ERROR, "CRIU ran past %lld ms (criu_timeout_ms; from --timeout): killed",
				      b->time_ms);
			else if (rc == -EFBIG)
				voice(VOICE_ERROR,
				      "CRIU's log %s grew past %lld bytes (criu_log_max): a runaway CRIU, killed",
				      log_path, b->log_max);
			else
				voice(VOICE_ERROR, "%s while CRIU ran: CRIU killed", why);
			show_errors(log_path);
			return rc;
		}
		if (pfd >= 0)
			poll(&(struct pollfd){.fd = pfd, .events = POLLIN}, 1, 20);
		else
			usleep(20000);
	}
}

int criu_run(const char *criu, char *const argv[], const char *log_path, const struct criu_bounds *b)
{
	char *args[64];
	int n = 0;
	args[n++] = (char *)criu;
	for (int i = 1; argv[i] && n < 63; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (b->own_group)
			setpgid(0, 0);
		umask(077); /* its images hold the tree's memory (the host arena's GPU bytes too): 0600 */
		if (b->dirfd >= 0 && fcntl(b->dirfd, F_SETFD, 0) < 0)
			_exit(127); /* (CRIU would find no directory behind its paths) */
		/* CRIU prints little on its own; everything goes to its log. */
		execv(criu, args);
		_exit(127);
	}
	/* Its end seen at once through a pidfd (a 20 ms poll cost each run 10 ms
	 * on average); without one, every 20 ms. */
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0), status;
	int rc = watch(pid, pfd, log_path, b, &status);
	if (pfd >= 0)
		close(pfd);
	if (rc != 0)
		return rc;
	rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	if (rc != 0)
		show_errors(log_path);
	return rc;
}

void criu_dir_path(int dirfd, const char *name, char *out, size_t len)
{
	snprintf(out, len, "/proc/self/fd/%d%s%s", dirfd, name[0] ? "/" : "", name);
}

int criu_plugin_dir(int dirfd, char *out, size_t len)
{
	criu_dir_path(dirfd, LAYOUT_PLUGINS, out, len);
	if (mkdirat(dirfd, LAYOUT_PLUGINS, 0700) < 0 && errno != EEXIST)
		return -1;
	return 0;
}
