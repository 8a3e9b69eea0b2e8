/* SPDX-License-Identifier: MIT */
/* A checkpoint's CRIU images, guarded: each file's size and CRC32C recorded
 * after the dump (cusnap in the manifest, the plugin in its digests file), and
 * checked before CRIU restores anything (a damaged page image would restore as
 * if whole: the workload's memory, GPU bytes of the host arena included,
 * silently wrong). Every image file must be recorded: one that is not (a
 * record emptied, a file added) is refused too. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap/crc32c.h"
#include "cusnap/json.h"
#include "cusnap/layout.h"
#include "internal.h"

#define CHUNK (4u << 20)

/* The size and CRC32C of file name in directory dfd: 0, or -errno. */
static int digest_file(int dfd, const char *name, uint8_t *buf, uint64_t *size, uint32_t *crc)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	*size = 0;
	*crc = 0;
	for (;;) {
		ssize_t n = read(fd, buf, CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			return -e;
		}
		if (n == 0)
			break;
		*crc = crc32c(*crc, buf, (size_t)n);
		*size += (uint64_t)n;
	}
	close(fd);
	return 0;
}

/* Is name one of the files a digest covers? Not CRIU's logs and statistics
 * (written again by every restore), not hidden files, not the plugin's record
 * of the digests itself. */
static bool image_file(const char *name)
{
	size_t len = strlen(name);
	return name[0] != '.' && !(len > 4 && !strcmp(name + len - 4, ".log")) && strncmp(name, "stats-", 6) != 0 &&
	       strcmp(name, IMAGES_DIGESTS) != 0;
}

static json_t *files_digest(const char *images, bool (*digested)(const char *), char *err, size_t errlen)
{
	int dfd = open(images, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = dfd < 0 ? NULL : fdopendir(dfd);
	uint8_t *buf = malloc(CHUNK);
	json_t *files = json_object();
	if (!d || !buf || !files) {
		snprintf(err, errlen, "cannot read %s: %s", images, strerror(errno ? errno : ENOMEM));
		goto fail;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!digested(e->d_name))
			continue;
		uint64_t size;
		uint32_t crc;
		int rc = digest_file(dfd, e->d_name, buf, &size, &crc);
		if (rc == -EINVAL)
			continue; /* not a regular file: CRIU makes none */
		if (rc < 0) {
			snprintf(err, errlen, "cannot read %s/%s: %s", images, e->d_name, strerror(-rc));
			goto fail;
		}
		char hex[16];
		snprintf(hex, sizeof(hex), "%08" PRIx32, crc);
		json_object_set_new(files, e->d_name, json_pack("{s:I, s:s}", "size", (json_int_t)size, "crc32c", hex));
	}
	closedir(d);
	free(buf);
	return files;
fail:
	if (d)
		closedir(d);
	else if (dfd >= 0)
		close(dfd);
	free(buf);
	json_decref(files);
	return NULL;
}

static int files_verify(const char *images, const json_t *files, bool (*digested)(const char *), char *why, size_t len)
{
	int dfd = open(images, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	uint8_t *buf = malloc(CHUNK);
	int rc = -1;
	if (dfd < 0 || !buf) {
		snprintf(why, len, "cannot read %s: %s", images, strerror(errno ? errno : ENOMEM));
		goto out;
	}
	const char *name;
	json_t *want;
	json_object_foreach((json_t *)files, name, want)
	{
		json_int_t want_size = json_integer_value(json_object_get(want, "size"));
		const char *want_crc = json_string_value(json_object_get(want, "crc32c"));
		uint64_t size;
		uint32_t crc;
		char hex[16];
		if (strchr(name, '/') || !digested(name) || !want_crc) {
			snprintf(why, len, "the manifest's digest of %s is malformed", name);
			goto out;
		}
		int r = digest_file(dfd, name, buf, &size, &crc);
		if (r < 0) {
			snprintf(why, len, "%s/%s: %s", images, name,
				 r == -EINVAL ? "not a regular file" : strerror(-r));
			goto out;
		}
		snprintf(hex, sizeof(hex), "%08" PRIx32, crc);
		if ((json_int_t)size != want_size) {
			snprintf(why, len, "%s/%s is %" PRIu64 " bytes, the checkpoint wrote %lld (truncated or grown)",
				 images, name, size, (long long)want_size);
			goto out;
		}
		if (strcmp(hex, want_crc) != 0) {
			snprintf(why, len, "%s/%s is damaged: CRC32C %s, the checkpoint recorded %s", images, name, hex,
				 want_crc);
			goto out;
		}
	}
	/* Every image file recorded: an emptied record or an added file is no checkpoint as written. */
	DIR *d = fdopendir(dfd);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (digested(e->d_name) && !json_object_get(files, e->d_name)) {
			snprintf(why, len, "%s/%s has no digest: the record does not cover the files as written",
				 images, e->d_name);
			closedir(d);
			dfd = -1;
			goto out;
		}
	if (d) {
		closedir(d);
		dfd = -1;
		rc = 0;
	}
out:
	if (dfd >= 0)
		close(dfd);
	free(buf);
	return rc;
}

json_t *images_digest(const char *images, char *err, size_t errlen)
{
	return files_digest(images, image_file, err, errlen);
}

int images_verify(const char *images, const json_t *files, char *why, size_t len)
{
	return files_verify(images, files, image_file, why, len);
}

json_t *content_digest(const char *dir, char *err, size_t errlen)
{
	return files_digest(dir, layout_content_name, err, errlen);
}

int content_verify(const char *dir, const json_t *files, char *why, size_t len)
{
	return files_verify(dir, files, layout_content_name, why, len);
}
