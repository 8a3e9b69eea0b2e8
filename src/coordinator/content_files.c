/* SPDX-License-Identifier: MIT */
/* The files of file content (DESIGN.md §6.2): one per participant beside the
 * state file, made by the coordinator (never by the workload, which cannot
 * reach the directory and gets only a descriptor of its own file with PREPARE)
 * and given again, read-only, with RESTORE_CREATORS. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap/digests.h"
#include "cusnap/json.h"
#include "cusnap/layout.h"
#include "fanout.h"

void content_file_name(const struct cusnap_id *id, char *out, size_t len)
{
	char hex[ID_HEX_LEN + 1];
	id_hex(id, hex);
	snprintf(out, len, LAYOUT_CONTENT_PREFIX "%s" LAYOUT_CONTENT_SUFFIX, hex);
}

void content_files_close(int *fds, size_t n)
{
	for (size_t i = 0; fds && i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

int content_files_create(int dfd, const char *dir, const struct topo_participant *p, size_t n, int *fds, char *err,
			 size_t errlen)
{
	if (dfd < 0) {
		snprintf(err, errlen, "file content needs the state directory: %s: %s", dir ? dir : "(none given)",
			 dir ? "cannot be opened (missing, or a link)"
			     : "a prepare without one keeps its bytes in the processes");
		return -1;
	}
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		char name[64];
		content_file_name(&p[i].id, name, sizeof(name));
		/* Made afresh: whatever stood there (a file of an earlier prepare, a
		 * link) is unlinked, never written through. */
		if (unlinkat(dfd, name, 0) != 0 && errno != ENOENT)
			rc = -1;
		if (rc == 0 &&
		    (fds[i] = openat(dfd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
			rc = -1;
		if (rc < 0)
			snprintf(err, errlen, "cannot make %s/%s for file content: %s", dir, name, strerror(errno));
	}
	if (rc < 0)
		content_files_close(fds, n);
	return rc;
}

long content_files_oversize(const struct topo_participant *p, size_t n, const int *fds, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t bound = 0;
		for (size_t k = 0; k < p[i].nallocs; k++) /* (what it carries: shared and private) */
			bound += (p[i].allocs[k].size + 4095) & ~(uint64_t)4095;
		struct stat st;
		if (fds[i] >= 0 && fstat(fds[i], &st) == 0 && (uint64_t)st.st_size > bound) {
			snprintf(err, errlen,
				 "its file of file content holds %lld bytes, more than the %llu of every allocation "
				 "it records",
				 (long long)st.st_size, (unsigned long long)bound);
			return (long)i;
		}
	}
	return -1;
}

void content_files_trim(int dfd, const struct topo_participant *p, size_t n, int *fds)
{
	for (size_t i = 0; dfd >= 0 && i < n; i++) {
		struct stat st;
		if (fds[i] < 0 || fstat(fds[i], &st) != 0 || st.st_size != 0)
			continue;
		char name[64];
		content_file_name(&p[i].id, name, sizeof(name));
		unlinkat(dfd, name, 0); /* (nothing carried there: no file) */
		close(fds[i]);
		fds[i] = -1;
	}
}

void content_files_digests(const struct call *calls, const struct topo_participant *p, size_t n, const int *fds,
			   struct file_digests *digests)
{
	for (size_t i = 0; digests && i < n; i++) {
		uint32_t crc;
		struct stat st;
		if (fds[i] < 0 || !result_u32(&calls[i], F_CRC32C, &crc) || fstat(fds[i], &st) != 0)
			continue;
		char name[64];
		content_file_name(&p[i].id, name, sizeof(name));
		if (digests_add(digests, name, (uint64_t)st.st_size, crc) < 0)
			return; /* (out of memory: the others are read) */
	}
}

int content_file_open(int dfd, const struct cusnap_id *id)
{
	char name[64];
	content_file_name(id, name, sizeof(name));
	int fd = dfd < 0 ? -1 : openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
		close(fd);
		fd = -1; /* (not one of ours: the participant that needs one says so) */
	}
	return fd;
}
