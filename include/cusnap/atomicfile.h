/* SPDX-License-Identifier: MIT */
/* The one durable, symlink-proof way cusnap writes a file (the state file, the
 * manifest, the control and note files): a temporary beside the target created
 * O_EXCL|O_NOFOLLOW relative to a directory descriptor, written in full,
 * fsync'ed, renamed over the target (a symlink standing there is replaced,
 * never followed), then the directory fsync'ed. */
#ifndef CUSNAP_ATOMICFILE_H
#define CUSNAP_ATOMICFILE_H

#include <stddef.h>
#include <sys/types.h>

/* Write len bytes from p to fd, a file or a socket (EINTR and short writes
 * handled; a socket's gone peer is -EPIPE, never SIGPIPE): 0 or -errno. */
int io_write_all(int fd, const void *p, size_t len);
/* Read exactly len bytes from fd into p: 0, -EIO at an early end, or -errno. */
int io_read_all(int fd, void *p, size_t len);

/* Replace dirfd/name by data atomically (mode for a new file). 0, or -errno
 * with *step naming what failed ("create", "write", "fsync", "rename", "fsync
 * of the directory"). */
int atomic_write_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode, const char **step);

/* The same in directory dir (opened O_NOFOLLOW: a symlink there is refused). */
int atomic_write(const char *dir, const char *name, const void *data, size_t len, mode_t mode, const char **step);

/* A text (NULL: it could not be made) into dir/name the same way, through
 * dirfd when it is an open descriptor of dir (else dir is opened): 0, or -1
 * with why naming the file and the step. */
int atomic_write_text(int dirfd, const char *dir, const char *name, const char *text, mode_t mode, char *why,
		      size_t len);

#endif
