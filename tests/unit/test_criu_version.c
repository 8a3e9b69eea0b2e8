/* SPDX-License-Identifier: MIT */
/* CRIU's version as cusnap asks it (src/node/criu.c): read from `criu
 * --version` to its end (its lines may come in several writes), asked once
 * per binary as it is, asked again when the file at the path changes, and
 * nothing kept from a binary that prints none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/node/node.h"
#include "../harness/test.h"

static char dir[] = "/tmp/cusnap-criu-version-XXXXXX", criu[64], runs[64];

/* A criu that counts its runs in runs and prints version (none: NULL). */
static void fake_criu(const char *version)
{
	char tmp[80];
	snprintf(tmp, sizeof(tmp), "%s.new", criu);
	FILE *f = fopen(tmp, "w");
	CHECK(f != NULL);
	fprintf(f, "#!/bin/sh\necho run >> %s\n", runs);
	if (version)
		fprintf(f, "echo 'criu --version'\nsleep 0.1\necho 'Version: %s'\n", version); /* (two writes) */
	fclose(f);
	CHECK_EQ(chmod(tmp, 0700), 0);
	CHECK_EQ(rename(tmp, criu), 0); /* (a new file at the path, as an upgrade puts it) */
}

static int runs_so_far(void)
{
	FILE *f = fopen(runs, "r");
	int n = 0;
	for (int c; f && (c = fgetc(f)) != EOF;)
		n += c == '\n';
	if (f)
		fclose(f);
	return n;
}

static void asked_once(void)
{
	char v[64];
	fake_criu("4.2.1");
	criu_version(criu, v, sizeof(v));
	CHECK_STR(v, "4.2.1");
	criu_version(criu, v, sizeof(v));
	CHECK_STR(v, "4.2.1");
	CHECK_EQ(runs_so_far(), 1); /* the second asking ran nothing */
	fake_criu("4.3.0");
	criu_version(criu, v, sizeof(v));
	CHECK_STR(v, "4.3.0");
	CHECK_EQ(runs_so_far(), 2);
	fake_criu(NULL);
	criu_version(criu, v, sizeof(v));
	CHECK_STR(v, "");
	criu_version(criu, v, sizeof(v));
	CHECK_EQ(runs_so_far(), 4); /* none printed: asked again each time */
	unlink(criu);
	criu_version(criu, v, sizeof(v));
	CHECK_STR(v, "");
}

int main(void)
{
	CHECK(mkdtemp(dir) != NULL);
	snprintf(criu, sizeof(criu), "%s/criu", dir);
	snprintf(runs, sizeof(runs), "%s/runs", dir);
	test_run("criu --version read to its end, asked once per binary, again when it changes", asked_once);
	unlink(runs);
	rmdir(dir);
	return test_done();
}
