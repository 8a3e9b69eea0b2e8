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

#include "cusnap/counters.h"
#include "cusnap/crc32c.h"
#include "cusnap/digests.h"
#include "cusnap/hostmem.h"
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
	bool given;     /* its digest taken from the known ones, the file not read */
};

struct digest_run {
	int dfd;
	struct digest *d;
	size_t n, next;                   /* next: the first not taken (atomically) */
	const struct file_digests *known; /* digests given (NULL: none) */
};

/* d's digest from known, when it has one for a regular file of the size d's
 * file is now: true. (Only read here: the threads share it.) */
static bool digest_known(int dfd, const struct file_digests *known, struct digest *d)
{
	const struct file_digest *k = digests_find(known, d->name);
	struct stat st;
	if (!k || fstatat(dfd, d->name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != k->size)
		return false;
	d->size = k->size;
	d->crc = k->crc32c;
	d->rc = 0;
	d->given = true;
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
		if (!buf) /* (populated: a page fault each would cost more than the reads) */
			buf = hostmem_alloc(CHUNK, COUNT_NONE);
		run->d[i].rc = buf ? digest_file(run->dfd, run->d[i].name, buf, &run->d[i].size, &run->d[i].crc)
				   : -ENOMEM;
	}
	hostmem_free(buf, CHUNK, COUNT_NONE);
	return NULL;
}

/* Every d[i] digested (known: digests given, NULL: none), files at once on
 * the machine's cores (at most 16). */
static void digest_all(int dfd, struct digest *d, size_t n, const struct file_digests *known)
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

static void digest_list_free(struct digest *d, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(d[i].name);
	free(d);
}

/* The directory name in at, opened (never through a link): its descriptor,
 * or -1 (errno). */
static int dir_open(int at, const char *name)
{
	return openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

static int files_digest(int at, const char *name, const char *images, bool (*digested)(const char *),
			const struct file_digests *known, struct file_digests *out, struct digest_count *count,
			char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	*count = (struct digest_count){0};
	int dfd = dir_open(at, name);
	struct digest *d = NULL;
	ssize_t n = dfd < 0 ? -1 : names_of(dfd, digested, &d);
	int rc = n < 0 ? -1 : 0;
	if (rc < 0)
		snprintf(err, errlen, "cannot read %s: %s", images, strerror(errno ? errno : ENOMEM));
	else
		digest_all(dfd, d, (size_t)n, known);
	for (ssize_t i = 0; rc == 0 && i < n; i++) {
		if (d[i].rc == -EINVAL)
			continue; /* not a regular file: CRIU makes none */
		if (d[i].rc < 0)
			rc = -1, snprintf(err, errlen, "cannot read %s/%s: %s", images, d[i].name, strerror(-d[i].rc));
		else if (digests_add(out, d[i].name, d[i].size, d[i].crc) < 0)
			rc = -1, snprintf(err, errlen, "out of memory");
		else if (d[i].given)
			count->given++;
		else
			count->read_bytes += d[i].size;
	}
	if (rc < 0)
		digests_free(out);
	if (n > 0)
		digest_list_free(d, (size_t)n);
	if (dfd >= 0)
		close(dfd);
	return rc;
}

static int files_verify(int at, const char *name, const char *images, const struct file_digests *files,
			bool (*digested)(const char *), bool bytes, char *why, size_t len)
{
	int dfd = dir_open(at, name), e = dfd < 0 ? errno : ENOMEM;
	size_t n = 0;
	struct digest *d = calloc(files->n + 1, sizeof(*d));
	int rc = -1;
	if (dfd < 0 || !d) {
		snprintf(why, len, "cannot read %s: %s", images, strerror(e));
		goto out;
	}
	for (size_t i = 0; i < files->n; i++) {
		const char *file = files->f[i].name;
		if (!digested(file)) {
			snprintf(why, len, "the digests name %s, which is none of the checkpoint's files", file);
			goto out;
		}
		if (!(d[n++].name = strdup(file))) {
			snprintf(why, len, "out of memory");
			goto out;
		}
		/* File content's: its blocks' CRCs are checked as they are copied
		 * back, before anything runs (DESIGN.md §6.3); here its size. */
		d[n - 1].size_only = !bytes && layout_content_name(file);
	}
	digest_all(dfd, d, n, NULL);
	for (size_t i = 0; i < n; i++) {
		const struct file_digest *want = &files->f[i];
		if (d[i].rc < 0) {
			snprintf(why, len, "%s/%s: %s", images, d[i].name,
				 d[i].rc == -EINVAL ? "not a regular file" : strerror(-d[i].rc));
			goto out;
		}
		if (d[i].size != want->size) {
			snprintf(why, len,
				 "%s/%s is %" PRIu64 " bytes, the checkpoint wrote %" PRIu64 " (truncated or grown)",
				 images, d[i].name, d[i].size, want->size);
			goto out;
		}
		if (!d[i].size_only && d[i].crc != want->crc32c) {
			snprintf(why, len, "%s/%s is damaged: CRC32C %08" PRIx32 ", the checkpoint recorded %08" PRIx32,
				 images, d[i].name, d[i].crc, want->crc32c);
			goto out;
		}
	}
	/* Every image file recorded: an emptied record or an added file is no checkpoint as written. */
	struct digest *all = NULL;
	ssize_t m = names_of(dfd, digested, &all);
	rc = m < 0 ? (snprintf(why, len, "cannot read %s", images), -1) : 0;
	for (ssize_t i = 0; rc == 0 && i < m; i++)
		if (!digests_find(files, all[i].name)) {
			snprintf(why, len, "%s/%s has no digest: the record does not cover the files as written",
				 images, all[i].name);
			rc = -1;
		}
	if (m > 0)
		digest_list_free(all, (size_t)m);
out:
	if (d)
		digest_list_free(d, n);
	if (dfd >= 0)
		close(dfd);
	return rc;
}

int images_digest(int at, const char *name, const char *images, const struct file_digests *known,
		  struct file_digests *out, struct digest_count *count, char *err, size_t errlen)
{
	return files_digest(at, name, images, image_file, known, out, count, err, errlen);
}

int images_verify(int at, const char *name, const char *images, const struct file_digests *files, char *why, size_t len)
{
	return files_verify(at, name, images, files, image_file, false, why, len);
}

int content_digest(int at, const char *name, const char *dir, const struct file_digests *known,
		   struct file_digests *out, struct digest_count *count, char *err, size_t errlen)
{
	return files_digest(at, name, dir, layout_content_name, known, out, count, err, errlen);
}

int content_verify(int at, const char *name, const char *dir, const struct file_digests *files, bool bytes, char *why,
		   size_t len)
{
	return files_verify(at, name, dir, files, layout_content_name, bytes, why, len);
}
