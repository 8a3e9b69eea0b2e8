/* SPDX-License-Identifier: MIT */
/* A checkpoint directory replaced only by a whole checkpoint (DESIGN.md §9.1):
 * a checkpoint is built in DIR/.partial beside the one DIR holds, and put in
 * its place once whole, entry by entry through DIR/.previous, the manifest
 * last (the commit point). Each step can be taken again, so a command cut
 * short anywhere is settled by the next one on DIR: an attempt whose CRIU dump
 * finished (the tree was dumped) is put in place, any other removed, the
 * previous checkpoint kept. A failed attempt leaves nothing behind. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/layout.h"
#include "cusnap/manifest.h"
#include "cusnap/state.h"

#define PARTIAL LAYOUT_PARTIAL
#define PREVIOUS LAYOUT_PREVIOUS

/* A checkpoint's entries that move between the three, one at a time, the
 * manifest last (layout.h's table; the files of file content move together,
 * move_content). */
static bool moves_alone(const struct layout_entry *e)
{
	return e->moves && e->kind != LAYOUT_KIND_FILES;
}

static bool exists_at(int dfd, const char *name)
{
	struct stat st;
	return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Remove name in dfd and everything under it, never following a link. */
static void remove_at(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		unlinkat(dfd, name, 0);
		return;
	}
	DIR *d = fdopendir(fd);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			remove_at(fd, e->d_name);
	if (d)
		closedir(d);
	else
		close(fd);
	unlinkat(dfd, name, AT_REMOVEDIR);
}

int ckptdir_begin(int dfd, const char *dir, char *out, size_t len, int *work)
{
	char why[512];
	int rc = ckptdir_settle(dfd, dir, why, sizeof(why));
	if (rc < 0)
		return rc;
	remove_at(dfd, PARTIAL);
	if (mkdirat(dfd, PARTIAL, 0700) < 0 ||
	    (*work = openat(dfd, PARTIAL, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return -errno;
	snprintf(out, len, "%s/" PARTIAL, dir);
	return 0;
}

void ckptdir_discard(int dfd)
{
	remove_at(dfd, PARTIAL);
}

int ckptdir_keep_log(int dfd, const char *dir, char *out, size_t len)
{
	if (renameat(dfd, PARTIAL "/" LAYOUT_IMAGES "/" LAYOUT_DUMP_LOG, dfd, LAYOUT_FAILED_LOG) < 0)
		return -errno;
	snprintf(out, len, "%s/" LAYOUT_FAILED_LOG, dir);
	return 0;
}

/* The files of file content (named by participant, so as many as the tree
 * has) move as one more entry: every one DIR holds aside (only while the
 * attempt still holds its images, which move first: after that, those in DIR
 * are the attempt's), or every one of the attempt's in. 0, or -errno (why). */
static int move_content(int from, int to, bool aside, char *why, size_t len)
{
	int fd = dup(from), rc = 0;
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd >= 0)
			close(fd);
		return snprintf(why, len, "listing the files of file content: %s", strerror(errno)), -errno;
	}
	struct dirent *e;
	while (rc == 0 && (e = readdir(d))) {
		if (!layout_content_name(e->d_name) || (aside && exists_at(to, e->d_name)))
			continue;
		if (renameat(from, e->d_name, to, e->d_name) < 0) {
			rc = -errno;
			snprintf(why, len, "%s %s: %s", aside ? "moving the previous" : "putting in place", e->d_name,
				 strerror(errno));
		}
	}
	closedir(d);
	return rc;
}

/* Each entry of DIR moved to .previous (when not there already), then the
 * attempt's moved in, the manifest last; then .previous and .partial removed.
 * Taken again after a cut, it finishes what it began. */
int ckptdir_publish(int dfd, char *why, size_t len)
{
	int part = openat(dfd, PARTIAL, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), prev = -1, rc = 0;
	if (part < 0)
		return snprintf(why, len, "%s: %s", PARTIAL, strerror(errno)), -errno;
	if ((mkdirat(dfd, PREVIOUS, 0700) < 0 && errno != EEXIST) ||
	    (prev = openat(dfd, PREVIOUS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		rc = -errno;
		snprintf(why, len, "%s: %s", PREVIOUS, strerror(errno));
		goto out;
	}
	if (exists_at(part, LAYOUT_IMAGES) && (rc = move_content(dfd, prev, true, why, len)) < 0)
		goto out;
	for (size_t i = 0; i < layout_nentries; i++) {
		const char *name = layout_entries[i].name;
		if (!moves_alone(&layout_entries[i]))
			continue;
		if (!strcmp(name, LAYOUT_MANIFEST) && (rc = move_content(part, dfd, false, why, len)) < 0)
			goto out;
		if (exists_at(dfd, name) && !exists_at(prev, name) && renameat(dfd, name, prev, name) < 0) {
			rc = -errno;
			snprintf(why, len, "moving the previous %s aside: %s", name, strerror(errno));
			goto out;
		}
		if (exists_at(part, name) && renameat(part, name, dfd, name) < 0) {
			rc = -errno;
			snprintf(why, len, "putting %s in place: %s", name, strerror(errno));
			goto out;
		}
	}
	fsync(dfd);
out:
	if (part >= 0)
		close(part);
	if (prev >= 0)
		close(prev);
	if (rc == 0) {
		remove_at(dfd, PREVIOUS);
		remove_at(dfd, PARTIAL);
		unlinkat(dfd, LAYOUT_FAILED_LOG, 0); /* (an earlier attempt's: this one stands) */
	}
	return rc;
}

/* Did the CRIU dump of the attempt in dfd/.partial finish (its log says so)? */
static bool dump_finished(int dfd)
{
	int fd = openat(dfd, PARTIAL "/" LAYOUT_IMAGES "/" LAYOUT_DUMP_LOG, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return false;
	char tail[4096];
	off_t end = lseek(fd, 0, SEEK_END);
	ssize_t n = pread(fd, tail, sizeof(tail) - 1,
			  end > (off_t)sizeof(tail) - 1 ? end - (off_t)sizeof(tail) + 1 : 0);
	close(fd);
	if (n <= 0)
		return false;
	tail[n] = '\0';
	return strstr(tail, "Dumping finished successfully") != NULL;
}

int ckptdir_settle(int dfd, const char *dir, char *why, size_t len)
{
	int rc = 0;
	bool partial = exists_at(dfd, PARTIAL);
	if (partial && exists_at(dfd, PARTIAL "/" MANIFEST_FILE) && dump_finished(dfd)) {
		/* The tree was dumped, and the command cut short before its checkpoint was put in place. */
		voice(VOICE_INFO, "%s/" PARTIAL " holds a checkpoint whose dump finished: put in place", dir);
		rc = ckptdir_publish(dfd, why, len);
	} else {
		if (partial)
			voice(VOICE_INFO, "%s/" PARTIAL ": a checkpoint cut short before its dump finished: removed",
			      dir);
		remove_at(dfd, PARTIAL);
		/* A publish cut short before its commit: the previous checkpoint back. */
		int prev = openat(dfd, PREVIOUS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		for (size_t i = 0; prev >= 0 && !exists_at(dfd, MANIFEST_FILE) && i < layout_nentries; i++) {
			const char *name = layout_entries[i].name;
			if (moves_alone(&layout_entries[i]) && exists_at(prev, name) && !exists_at(dfd, name))
				renameat(prev, name, dfd, name);
		}
		if (prev >= 0)
			close(prev);
		remove_at(dfd, PREVIOUS);
	}
	return rc;
}
