/* SPDX-License-Identifier: MIT */
/* The workload's control directory (DESIGN.md §3, §9). It belongs to the
 * workload, so cusnap, running as root, reaches it only through directory
 * descriptors: opened inside the workload's own root (every symlink on the way
 * resolved within that root, never out of it), files created there O_EXCL|
 * O_NOFOLLOW and renamed over their names, removals that never follow a link,
 * and endpoint sockets removed only when nothing listens on them. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"
#include "cusnap/atomicfile.h"
#include "cusnap/control.h"

static int open_dir_at(int at, const char *path, unsigned long long resolve)
{
	struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC, .resolve = resolve};
	int fd = (int)syscall(SYS_openat2, at, path, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

int control_dir_open(pid_t pid, const char *dir, char *why, size_t len)
{
	char root[64];
	snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
	int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0) {
		int e = errno;
		snprintf(why, len, "%s: %s", root, strerror(e));
		return -e;
	}
	int fd = open_dir_at(rfd, dir, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
	close(rfd);
	if (fd < 0)
		snprintf(why, len, "the control directory %s of process %d: %s", dir, (int)pid, strerror(-fd));
	return fd;
}

int control_dir_open_here(const char *path, char *why, size_t len)
{
	int fd = open_dir_at(AT_FDCWD, path, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
	if (fd < 0)
		snprintf(why, len, "the control directory %s: %s%s", path, strerror(-fd),
			 fd == -ELOOP ? " (a symlink on the way is refused)" : "");
	return fd;
}

bool control_exists(pid_t pid, const char *dir, const char *name)
{
	char why[PATH_MAX + 128];
	int dfd = control_dir_open(pid, dir, why, sizeof(why));
	if (dfd < 0)
		return false;
	bool there = faccessat(dfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
	close(dfd);
	return there;
}

int control_write(pid_t pid, const char *dir, const char *name, char *why, size_t len)
{
	int dfd = control_dir_open(pid, dir, why, len);
	if (dfd < 0)
		return -1;
	const char *step;
	int rc = atomic_write_at(dfd, name, "", 0, 0644, &step);
	close(dfd);
	if (rc < 0)
		snprintf(why, len, "%s/%s of process %d: %s failed: %s", dir, name, (int)pid, step, strerror(-rc));
	return rc < 0 ? -1 : 0;
}

void control_host_path(pid_t pid, const char *dir, char *out, size_t len)
{
	char why[PATH_MAX + 128], link[64];
	snprintf(out, len, "%s", dir);
	int dfd = control_dir_open(pid, dir, why, sizeof(why));
	if (dfd < 0)
		return;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", dfd);
	char path[PATH_MAX];
	ssize_t n = readlink(link, path, sizeof(path) - 1);
	close(dfd);
	if (n > 0 && path[0] == '/') {
		path[n] = '\0';
		snprintf(out, len, "%s", path);
	}
}

int control_endpoint_stale(int dfd, const char *name)
{
	struct stat st;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST; /* not a socket: not ours to touch */
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int n = snprintf(addr.sun_path, sizeof(addr.sun_path), "/proc/self/fd/%d/%s", dfd, name);
	if (n < 0 || (size_t)n >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	int rc = connect(s, (struct sockaddr *)&addr, sizeof(addr));
	int err = errno;
	close(s);
	if (rc == 0)
		return -EBUSY; /* something listens: a live process's endpoint */
	if (err != ECONNREFUSED)
		return -err;
	return unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? -errno : 1;
}
