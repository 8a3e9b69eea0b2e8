/* SPDX-License-Identifier: MIT */
/* The coordinator's files of file content (src/coordinator/content_files.c):
 * made fresh beside the state file (a symlink standing there is replaced, never
 * written through), found again by participant id, the empty ones removed, and
 * a file grown past what its participant shares caught. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness/test.h"
#include "../../src/coordinator/fanout.h"
#include "cusnap/layout.h"

static void two_participants(struct topo_participant p[2], struct topo_alloc a[2])
{
	memset(p, 0, 2 * sizeof(*p));
	memset(a, 0, 2 * sizeof(*a));
	for (int i = 0; i < 2; i++) {
		p[i].id.b[0] = (uint8_t)(0x10 + i);
		a[i].shared = 1;
		a[i].size = 10000; /* 12,288 bytes in a file (4 KiB aligned) */
		p[i].allocs = &a[i];
		p[i].nallocs = 1;
	}
}

static void made_found_trimmed(void)
{
	char *dir = test_tempdir("content");
	struct topo_participant p[2];
	struct topo_alloc a[2];
	two_participants(p, a);
	char name[64], path[PATH_MAX], victim[PATH_MAX];
	content_file_name(&p[0].id, name, sizeof(name));
	CHECK(layout_content_name(name));
	/* A link planted where participant 0's file goes: replaced, its target untouched. */
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	CHECK_EQ(test_write_file(victim, "keep"), 0);
	CHECK_EQ(symlink(victim, path), 0);
	int fds[2] = {-1, -1};
	char err[256] = "";
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(dfd >= 0);
	CHECK_EQ(content_files_create(dfd, dir, p, 2, fds, err, sizeof(err)), 0);
	CHECK(fds[0] >= 0 && fds[1] >= 0);
	struct stat st;
	CHECK(lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600);
	char *kept = test_read_file(victim);
	CHECK(kept && !strcmp(kept, "keep"));
	free(kept);
	/* Participant 0 wrote its bytes, 1 nothing: 1's file goes. */
	char bytes[12288];
	memset(bytes, 0x5a, sizeof(bytes));
	CHECK_EQ(pwrite(fds[0], bytes, sizeof(bytes), 0), (ssize_t)sizeof(bytes));
	CHECK_EQ(content_files_oversize(p, 2, fds, err, sizeof(err)), -1);
	content_files_trim(dfd, p, 2, fds);
	CHECK(fds[0] >= 0);
	CHECK_EQ(fds[1], -1);
	int again = content_file_open(dfd, &p[0].id);
	CHECK(again >= 0);
	CHECK_EQ(content_file_open(dfd, &p[1].id), -1);
	/* Grown past the 12,288 bytes participant 0 shares: caught. */
	CHECK_EQ(pwrite(fds[0], "x", 1, sizeof(bytes)), 1);
	CHECK_EQ(content_files_oversize(p, 2, fds, err, sizeof(err)), 0);
	CHECK_CONTAINS(err, "12289 bytes, more than the 12288");
	close(again);
	content_files_close(fds, 2);
	CHECK_EQ(fds[0], -1);
	/* No directory: refused, nothing open. */
	CHECK_EQ(content_files_create(-1, NULL, p, 2, fds, err, sizeof(err)), -1);
	CHECK_CONTAINS(err, "needs the state directory");
	CHECK(fds[0] == -1 && fds[1] == -1);
	close(dfd);
	free(dir);
}

int main(void)
{
	test_run("made fresh (a planted link replaced), found again, the empty removed, an oversized one caught",
		 made_found_trimmed);
	return test_done();
}
