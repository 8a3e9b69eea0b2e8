/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cusnap/atomicfile.h"

/* The one I/O loop: all of len bytes out of p (write) or into it (read), EINTR
 * and short transfers handled. A write tries send() first, so that a socket's
 * gone peer is -EPIPE, never SIGPIPE. */
static int io_all(int fd, char *at, size_t len, bool out)
{
	bool sock = out;
	while (len) {
		ssize_t n = sock ? send(fd, at, len, MSG_NOSIGNAL) : out ? write(fd, at, len) : read(fd, at, len);
		if (n < 0 && sock && errno == ENOTSOCK) {
			sock = false;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		at += n;
		len -= (size_t)n;
	}
	return 0;
}

int io_write_all(int fd, const void *p, size_t len)
{
	return io_all(fd, (char *)p, len, true);
}

int io_read_all(int fd, void *p, size_t len)
{
	return io_all(fd, p, len, false);
}

int atomic_write_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode, const char **step)
{
	char tmp[300];
	if (snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", name, (int)getpid()) >= (int)sizeof(tmp)) {
		*step = "create";
		return -ENAMETOOLONG;
	}
	unlinkat(dirfd, tmp, 0); /* one a killed run of ours left (a symlink is removed, not followed) */
	*step = "create";
	int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	if (fd < 0)
		return -errno;
	int rc = io_write_all(fd, data, len);
	*step = "write";
	if (rc == 0) {
		*step = "fsync";
		rc = fsync(fd) < 0 ? -errno : 0;
	}
	if (close(fd) < 0 && rc == 0) {
		*step = "close";
		rc = -errno;
	}
	if (rc == 0) {
		*step = "rename";
		rc = renameat(dirfd, tmp, dirfd, name) < 0 ? -errno : 0;
	}
	if (rc < 0) {
		unlinkat(dirfd, tmp, 0);
		return rc;
	}
	*step = "fsync of the directory";
	return fsync(dirfd) < 0 ? -errno : 0;
}

int atomic_write(const char *dir, const char *name, const void *data, size_t len, mode_t mode, const char **step)
{
	*step = "open of the directory";
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	int rc = atomic_write_at(dfd, name, data, len, mode, step);
	close(dfd);
	return rc;
}

int atomic_write_text(int dirfd, const char *dir, const char *name, const char *text, mode_t mode, char *why,
		      size_t len)
{
	const char *step = "encode";
	int rc = !text        ? -ENOMEM
		 : dirfd >= 0 ? atomic_write_at(dirfd, name, text, strlen(text), mode, &step)
			      : atomic_write(dir, name, text, strlen(text), mode, &step);
	if (rc < 0)
		snprintf(why, len, "writing %s/%s: %s failed: %s", dir, name, step, strerror(-rc));
	return rc < 0 ? -1 : 0;
}
