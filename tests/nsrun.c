/* SPDX-License-Identifier: MIT */
/* nsrun_helper LOG PROGRAM [ARG...]: run one test program in namespaces of
 * its own, so that the CRIU programs can run beside each other (tests/run.sh):
 * - a PID namespace: a restore needs its dumped PIDs free, and here no other
 *   program's processes can take them; this helper is its init and reaps
 *   every orphan, the test runs as its child;
 * - a mount namespace with its own /proc (the PIDs the test reads are its
 *   namespace's), its own /run/cusnap (cusnap's locks and state directories
 *   are named by PID, which other namespaces repeat) and its own /tmp
 *   (cuemu's checkpoint endpoints are named by PID namespace inode and PID
 *   there: a namespace's inode is reused once it dies, and a process of
 *   another program took over a restored process's endpoint name), in which
 *   a checkout under /tmp stays where it was;
 * - a network namespace with its loopback up: ports, and the firewall rules
 *   CRIU's network lock adds, are its own.
 * LOG is opened after the mount namespace is made (CRIU cannot dump a file
 * opened through another namespace's mount) and takes the program's output;
 * stdin is /dev/null. Exits with the program's status (128 + signal when
 * killed); SIGTERM, SIGINT or SIGHUP to the helper ends the whole namespace. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t init_pid;

static void die(const char *what)
{
	fprintf(stderr, "nsrun_helper: %s: %s\n", what, strerror(errno));
	exit(125);
}

static void loopback_up(void)
{
	struct ifreq ifr = {0};
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		die("the loopback's flags");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		die("the loopback up");
	close(s);
}

/* The directory directly under /tmp that path (made absolute) lies in, into
 * top: 0, or -1 when it lies elsewhere. */
static int tmp_top(const char *path, char *top, size_t len)
{
	char abs[PATH_MAX];
	if (!realpath(path, abs) || strncmp(abs, "/tmp/", 5) != 0)
		return -1;
	size_t n = strcspn(abs + 5, "/");
	if (!n || 5 + n >= len)
		return -1;
	memcpy(top, abs, 5 + n);
	top[5 + n] = '\0';
	return 0;
}

/* A /tmp of its own, in which the directories of /tmp that hold the paths
 * given (the checkout the suite runs from, its log) are still there: a
 * clone under /tmp (mktemp -d) must see itself by its absolute paths. */
static void own_tmp(const char *const *paths, size_t n)
{
	char tops[4][PATH_MAX];
	int fds[4];
	size_t k = 0;
	for (size_t i = 0; i < n && k < 4; i++) {
		if (tmp_top(paths[i], tops[k], sizeof(tops[k])) < 0)
			continue;
		bool seen = false;
		for (size_t j = 0; j < k && !seen; j++)
			seen = strcmp(tops[j], tops[k]) == 0;
		if (seen)
			continue;
		if ((fds[k] = open(tops[k], O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
			die(tops[k]);
		k++;
	}
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)))
		die("getcwd");
	if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0)
		die("a /tmp of its own");
	for (size_t i = 0; i < k; i++) {
		char from[64];
		snprintf(from, sizeof(from), "/proc/self/fd/%d", fds[i]);
		if (mkdir(tops[i], 0700) < 0 || mount(from, tops[i], NULL, MS_BIND | MS_REC, NULL) < 0)
			die(tops[i]);
		close(fds[i]);
	}
	if (chdir(cwd) < 0) /* (the directory as the new /tmp shows it) */
		die(cwd);
}

/* In the new namespaces, as their init: the mounts, the output, the program. */
static void mounts(const char *const *keep, size_t nkeep)
{
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die("mounts private");
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		die("/proc of the PID namespace");
	if (mkdir("/run/cusnap", 0700) < 0 && errno != EEXIST)
		die("/run/cusnap");
	if (mount("tmpfs", "/run/cusnap", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700") < 0)
		die("a /run/cusnap of its own");
	own_tmp(keep, nkeep);
}

static void output(const char *log)
{
	int in = open("/dev/null", O_RDONLY);
	int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
	if (in < 0 || out < 0)
		die(log);
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
		die("dup2");
	syscall(SYS_close_range, 3U, ~0U, 0U);
}

static void forward(int sig)
{
	(void)sig;
	if (init_pid > 0)
		kill(init_pid, SIGKILL); /* the namespace's init: every process in it ends */
}

/* The namespace's init: the program as its child, every orphan reaped. */
static int init(char **argv)
{
	pid_t test = fork();
	if (test < 0)
		die("fork");
	if (test == 0) {
		signal(SIGTERM, SIG_DFL);
		execv(argv[0], argv);
		fprintf(stderr, "nsrun_helper: %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	for (;;) {
		int st;
		pid_t p = wait(&st);
		if (p < 0 && errno == EINTR)
			continue;
		if (p < 0)
			return 125;
		if (p == test)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: nsrun_helper LOG PROGRAM [ARG...]\n");
		return 64;
	}
	if (unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET) < 0)
		die("unshare");
	loopback_up();
	struct sigaction sa = {.sa_handler = forward};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	init_pid = fork();
	if (init_pid < 0)
		die("fork");
	if (init_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		char logdir[PATH_MAX];
		snprintf(logdir, sizeof(logdir), "%s", argv[1]);
		char *slash = strrchr(logdir, '/');
		if (slash)
			*slash = '\0';
		const char *keep[] = {".", slash ? logdir : ".", argv[2]};
		mounts(keep, sizeof(keep) / sizeof(keep[0]));
		output(argv[1]);
		exit(init(argv + 2));
	}
	int st;
	while (waitpid(init_pid, &st, 0) < 0)
		if (errno != EINTR)
			die("waitpid");
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
