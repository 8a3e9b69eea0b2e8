/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cusnap/usock.h"

/* Fill addr for path; when path is too long, open its directory into *dirfd and
 * address the socket through /proc/self/fd. */
static int make_addr(const char *path, struct sockaddr_un *addr, int *dirfd)
{
	memset(addr, 0, sizeof(*addr));
	addr->sun_family = AF_UNIX;
	*dirfd = -1;
	if (strlen(path) < sizeof(addr->sun_path)) {
		memcpy(addr->sun_path, path, strlen(path) + 1);
		return 0;
	}
	const char *slash = strrchr(path, '/');
	if (!slash || !slash[1])
		return -ENAMETOOLONG;
	char dir[4096];
	size_t dlen = (size_t)(slash - path);
	if (dlen >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, path, dlen);
	dir[dlen ? dlen : 1] = '\0';
	if (!dlen)
		dir[0] = '/';
	*dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (*dirfd < 0)
		return -errno;
	int n = snprintf(addr->sun_path, sizeof(addr->sun_path), "/proc/self/fd/%d/%s", *dirfd, slash + 1);
	if (n < 0 || (size_t)n >= sizeof(addr->sun_path)) {
		close(*dirfd);
		*dirfd = -1;
		return -ENAMETOOLONG;
	}
	return 0;
}

int usock_listen(const char *path, int backlog)
{
	return usock_listen_mode(path, backlog, 0);
}

/* A stream socket at path: listening (backlog > 0; a stale socket file
 * replaced, then chmod'ed to mode when not 0) or connected. fd or -errno. */
static int socket_at(const char *path, int backlog, unsigned mode)
{
	struct sockaddr_un addr;
	int dirfd;
	int rc = make_addr(path, &addr, &dirfd);
	if (rc < 0)
		return rc;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
	} else if (backlog > 0) {
		/* A socket file left by a dead process (or by a dump) is replaced. */
		unlink(addr.sun_path);
		rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || (mode && chmod(addr.sun_path, mode) < 0) ||
				     listen(fd, backlog) < 0
			     ? -errno
			     : fd;
	} else {
		while ((rc = connect(fd, (struct sockaddr *)&addr, sizeof(addr))) < 0 && errno == EINTR)
			;
		rc = rc < 0 ? -errno : fd;
	}
	if (rc < 0 && fd >= 0)
		close(fd);
	if (dirfd >= 0)
		close(dirfd);
	return rc;
}

int usock_listen_mode(const char *path, int backlog, unsigned mode)
{
	return socket_at(path, backlog > 0 ? backlog : 1, mode);
}

int usock_connect(const char *path)
{
	return socket_at(path, 0, 0);
}
