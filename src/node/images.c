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
#include <pthread.h>
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

/* CRC32C of [from, to) of fd read through buf: 0, or -errno (a file that ends
 * sooner: -EIO). */
static int digest_range(int fd, uint8_t *buf, off_t from, off_t to, uint32_t *crc)
{
	while (from < to) {
		size_t want = (uint64_t)(to - from) < CHUNK ? (size_t)(to - from) : CHUNK;
		ssize_t n = pread(fd, buf, want, from);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		*crc = crc32c(*crc, buf, (size_t)n);
		from += n;
	}
	return 0;
}

/* The size and CRC32C of file name in directory dfd: 0, or -errno. The holes
 * of a sparse file (file content's never-written blocks) are digested as the
 * zeros they read as, without reading them. */
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
	*crc = 0;
	int rc = 0;
	for (off_t at = 0; !rc && at < st.st_size;) {
		off_t data = lseek(fd, at, SEEK_DATA);
		if (data < 0)
			data = errno == ENXIO ? st.st_size : at; /* (the rest a hole; or no SEEK_DATA: read it all) */
		if (data > st.st_size)
			data = st.st_size;
		*crc = crc32c_zeros(*crc, (uint64_t)(data - at));
		off_t hole = data < st.st_size ? lseek(fd, data, SEEK_HOLE) : st.st_size;
		if (hole < 0 || hole > st.st_size)
			hole = st.st_size;
		rc = digest_range(fd, buf, data, hole, crc);
		at = hole;
	}
	*size = (uint64_t)st.st_size;
	close(fd);
	return rc;
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

/* One file's digest, taken by one of several threads. */
struct digest {
	char *name;
	uint64_t size;
	uint32_t crc;
	int rc;         /* 0, or -errno (-EINVAL: not a regular file) */
	bool size_only; /* its size taken, not its CRC32C (a file of file content being verified) */
};

struct digest_run {
	int dfd;
	struct digest *d;
	size_t n, next;      /* next: the first not taken (atomically) */
	const json_t *known; /* digests given (NULL: none) */
};

/* d's digest from known, when it has one for a regular file of the size d's
 * file is now: true. (Only read here: the threads share it.) */
static bool digest_known(int dfd, const json_t *known, struct digest *d)
{
	const json_t *k = known ? json_object_get(known, d->name) : NULL;
	const char *hex = k ? json_string_value(json_object_get(k, "crc32c")) : NULL;
	char *end;
	unsigned long crc = hex ? strtoul(hex, &end, 16) : 0;
	if (!hex || *end || end == hex || crc > UINT32_MAX)
		return false;
	struct stat st;
	if (fstatat(dfd, d->name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
	    (json_int_t)st.st_size != json_integer_value(json_object_get(k, "size")))
		return false;
	d->size = (uint64_t)st.st_size;
	d->crc = (uint32_t)crc;
	d->rc = 0;
	return true;
}

static void *digest_worker(void *arg)
{
	struct digest_run *run = arg;
	uint8_t *buf = NULL;
	for (size_t i; (i = __atomic_fetch_add(&run->next, 1, __ATOMIC_RELAXED)) < run->n;) {
		struct stat st;
		if (run->d[i].size_only) {
			bool file = fstatat(run->dfd, run->d[i].name, &st, AT_SYMLINK_NOFOLLOW) == 0;
			run->d[i].rc = !file ? -errno : S_ISREG(st.st_mode) ? 0 : -EINVAL;
			run->d[i].size = file ? (uint64_t)st.st_size : 0;
			continue;
		}
		if (digest_known(run->dfd, run->known, &run->d[i]))
			continue;
		if (!buf)
			buf = malloc(CHUNK);
		run->d[i].rc = buf ? digest_file(run->dfd, run->d[i].name, buf, &run->d[i].size, &run->d[i].crc)
				   : -ENOMEM;
	}
	free(buf);
	return NULL;
}

/* Every d[i] digested (known: digests given, NULL: none), files at once on
 * the machine's cores (at most 16). */
static void digest_all(int dfd, struct digest *d, size_t n, const json_t *known)
{
	struct digest_run run = {.dfd = dfd, .d = d, .n = n, .known = known};
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	size_t nt = (size_t)(cores > 1 ? cores : 1);
	nt = nt > n ? n : nt;
	nt = nt > 16 ? 16 : nt;
	pthread_t t[16];
	size_t started = 0;
	while (started + 1 < nt && pthread_create(&t[started], NULL, digest_worker, &run) == 0)
		started++;
	digest_worker(&run); /* (this thread takes its share, and whatever no thread could) */
	for (size_t i = 0; i < started; i++)
		pthread_join(t[i], NULL);
}

/* The names in directory dfd that digested() takes, into *out (each
 * malloc'ed): their count, or -1 (out of memory). */
static ssize_t names_of(int dfd, bool (*digested)(const char *), struct digest **out)
{
	int fd = dup(dfd);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct digest *d = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	bool ok = dir != NULL;
	while (ok && (e = readdir(dir))) {
		if (!digested(e->d_name))
			continue;
		if (n == cap) {
			struct digest *g = realloc(d, (cap = cap ? 2 * cap : 64) * sizeof(*d));
			if (!(ok = g != NULL))
				break;
			d = g;
		}
		d[n] = (struct digest){.name = strdup(e->d_name)};
		ok = d[n++].name != NULL;
	}
	if (dir)
		closedir(dir);
	else if (fd >= 0)
		close(fd);
	*out = d;
	if (!ok) {
		for (size_t i = 0; i < n; i++)
			free(d[i].name);
		free(d);
		*out = NULL;
		return -1;
	}
	return (ssize_t)n;
}

static void digests_free(struct digest *d, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(d[i].name);
	free(d);
}

static json_t *files_digest(const char *images, bool (*digested)(const char *), const json_t *known, char *err,
			    size_t errlen)
{
	int dfd = open(images, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct digest *d = NULL;
	ssize_t n = dfd < 0 ? -1 : names_of(dfd, digested, &d);
	json_t *files = n < 0 ? NULL : json_object();
	if (!files) {
		snprintf(err, errlen, "cannot read %s: %s", images, strerror(errno ? errno : ENOMEM));
		goto out;
	}
	digest_all(dfd, d, (size_t)n, known);
	for (ssize_t i = 0; i < n && files; i++) {
		if (d[i].rc == -EINVAL)
			continue; /* not a regular file: CRIU makes none */
		if (d[i].rc < 0) {
			snprintf(err, errlen, "cannot read %s/%s: %s", images, d[i].name, strerror(-d[i].rc));
			json_decref(files);
			files = NULL;
			break;
		}
		char hex[16];
		snprintf(hex, sizeof(hex), "%08" PRIx32, d[i].crc);
		json_object_set_new(files, d[i].name,
				    json_pack("{s:I, s:s}", "size", (json_int_t)d[i].size, "crc32c", hex));
	}
out:
	if (n > 0)
		digests_free(d, (size_t)n);
	if (dfd >= 0)
		close(dfd);
	return files;
}

static int files_verify(const char *images, const json_t *files, bool (*digested)(const char *), bool bytes, char *why,
			size_t len)
{
	int dfd = open(images, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	size_t n = 0;
	const char *name;
	json_t *want;
	struct digest *d = calloc(json_object_size(files) + 1, sizeof(*d));
	int rc = -1;
	if (dfd < 0 || !d) {
		snprintf(why, len, "cannot read %s: %s", images, strerror(errno ? errno : ENOMEM));
		goto out;
	}
	json_object_foreach((json_t *)files, name, want)
	{
		if (strchr(name, '/') || !digested(name) || !json_string_value(json_object_get(want, "crc32c"))) {
			snprintf(why, len, "the manifest's digest of %s is malformed", name);
			goto out;
		}
		if (!(d[n++].name = strdup(name))) {
			snprintf(why, len, "out of memory");
			goto out;
		}
		/* File content's: its blocks' CRCs are checked as they are copied
		 * back, before anything runs (DESIGN.md §6.3); here its size. */
		d[n - 1].size_only = !bytes && layout_content_name(name);
	}
	digest_all(dfd, d, n, NULL);
	for (size_t i = 0; i < n; i++) {
		want = json_object_get(files, d[i].name);
		json_int_t want_size = json_integer_value(json_object_get(want, "size"));
		const char *want_crc = json_string_value(json_object_get(want, "crc32c"));
		char hex[16];
		if (d[i].rc < 0) {
			snprintf(why, len, "%s/%s: %s", images, d[i].name,
				 d[i].rc == -EINVAL ? "not a regular file" : strerror(-d[i].rc));
			goto out;
		}
		snprintf(hex, sizeof(hex), "%08" PRIx32, d[i].crc);
		if ((json_int_t)d[i].size != want_size) {
			snprintf(why, len, "%s/%s is %" PRIu64 " bytes, the checkpoint wrote %lld (truncated or grown)",
				 images, d[i].name, d[i].size, (long long)want_size);
			goto out;
		}
		if (!d[i].size_only && strcmp(hex, want_crc) != 0) {
			snprintf(why, len, "%s/%s is damaged: CRC32C %s, the checkpoint recorded %s", images, d[i].name,
				 hex, want_crc);
			goto out;
		}
	}
	/* Every image file recorded: an emptied record or an added file is no checkpoint as written. */
	struct digest *all = NULL;
	ssize_t m = names_of(dfd, digested, &all);
	rc = m < 0 ? (snprintf(why, len, "cannot read %s", images), -1) : 0;
	for (ssize_t i = 0; rc == 0 && i < m; i++)
		if (!json_object_get(files, all[i].name)) {
			snprintf(why, len, "%s/%s has no digest: the record does not cover the files as written",
				 images, all[i].name);
			rc = -1;
		}
	if (m > 0)
		digests_free(all, (size_t)m);
out:
	if (d)
		digests_free(d, n);
	if (dfd >= 0)
		close(dfd);
	return rc;
}

json_t *images_digest(const char *images, const json_t *known, char *err, size_t errlen)
{
	return files_digest(images, image_file, known, err, errlen);
}

int images_verify(const char *images, const json_t *files, char *why, size_t len)
{
	return files_verify(images, files, image_file, false, why, len);
}

json_t *content_digest(const char *dir, const json_t *known, char *err, size_t errlen)
{
	return files_digest(dir, layout_content_name, known, err, errlen);
}

int content_verify(const char *dir, const json_t *files, bool bytes, char *why, size_t len)
{
	return files_verify(dir, files, layout_content_name, bytes, why, len);
}
