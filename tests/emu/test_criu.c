/* SPDX-License-Identifier: MIT */
/* A target is natively checkpointed, dumped by CRIU, restored by CRIU, natively
 * restored and unlocked from another process, and has its bytes back. */
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>

#include "ckpt_util.h"

static char criu[PATH_MAX];

static void show_log(const char *path)
{
	char *text = test_read_file(path);
	if (!text)
		return;
	size_t n = strlen(text);
	printf("---- last lines of %s ----\n%s\n", path, n > 3000 ? text + n - 3000 : text);
	free(text);
}

static void dump_and_restore(void)
{
	struct target t;
	const char *opts[] = {"--size", "8388608", "--seed", "9", NULL};
	if (target_start(&t, "criu", opts, NULL) < 0)
		return;
	ck_suspend(&t);
	char images[PATH_MAX - 64], pid[32], dump_log[PATH_MAX], restore_log[PATH_MAX];
	snprintf(images, sizeof(images), "%s/images", target_dir);
	mkdir(images, 0700);
	snprintf(pid, sizeof(pid), "%d", t.pid);
	snprintf(dump_log, sizeof(dump_log), "%s/dump.log", images);
	snprintf(restore_log, sizeof(restore_log), "%s/restore.log", images);
	/* (plain CRIU: none of the plugins the machine's own directory may hold, cusnap's among them) */
	char no_plugins[PATH_MAX];
	snprintf(no_plugins, sizeof(no_plugins), "%s/no-plugins", target_dir);
	mkdir(no_plugins, 0700);
	char *dump[] = {criu, "dump", "-t", pid, "-D", images, "-o", "dump.log", "-v4", "--libdir", no_plugins, NULL};
	int rc = test_run_cmd(dump, NULL, 120000);
	CHECK_EQ(rc, 0);
	if (rc != 0) {
		show_log(dump_log);
		target_stop(&t);
		return;
	}
	/* CRIU killed it; reap the zombie so that its PID is free for the restore. */
	waitpid(t.child, NULL, 0);
	t.child = 0;
	char *restore[] = {criu,          "restore", "-d",       "-D",       images, "-o",
			   "restore.log", "-v4",     "--libdir", no_plugins, NULL};
	rc = test_run_cmd(restore, NULL, 120000);
	CHECK_EQ(rc, 0);
	if (rc != 0) {
		show_log(restore_log);
		return;
	}
	t.child = t.pid; /* reparented to us, the subreaper */
	CHECK(kill(t.pid, 0) == 0);
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_CHECKPOINTED);
	CHECK_EQ(test_count_maps(t.pid, "memfd:cuemu"), 0);
	ck_resume(&t);
	char want[64];
	snprintf(want, sizeof(want), "PASS %#llx", t.va);
	TARGET_EXPECT(&t, "check 9", want);
	TARGET_EXPECT(&t, "maps", "1");
	target_stop(&t);
}

int main(void)
{
	test_require_criu(criu, sizeof(criu));
	CHECK_CU(cuInit(0));
	target_dir_make("criu");
	test_run("native checkpoint, CRIU dump, CRIU restore, native restore", dump_and_restore);
	target_dir_remove();
	return test_done();
}
