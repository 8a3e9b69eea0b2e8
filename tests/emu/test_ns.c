/* SPDX-License-Identifier: MIT */
/* The checkpoint API reaches a target by its observed PID across PID and mount
 * namespaces. */
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>

#include "ckpt_util.h"

/* The single child of pid (the target started by unshare --fork). */
static pid_t child_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", pid, pid);
	char *text = test_read_file(path);
	pid_t c = text ? (pid_t)atoi(text) : 0;
	free(text);
	return c;
}

static void cycle_in_env(const char *name, const char *const *wrapper, char *const *env)
{
	struct target t;
	if (target_start_wrapped(&t, name, wrapper, NULL, env) < 0)
		return;
	t.pid = child_of(t.child);
	CHECK(t.pid > 0);
	CHECK_EQ(t.nspid, 1);    /* its own namespace's first process */
	CHECK(t.pid != t.nspid); /* addressed by the PID we observe */
	CHECK_EQ(ck_state(t.pid), CU_PROCESS_STATE_RUNNING);
	ck_suspend(&t);
	ck_resume(&t);
	char want[64];
	snprintf(want, sizeof(want), "PASS %#llx", t.va);
	TARGET_EXPECT(&t, "check 1", want);
	int tid = 0;
	CHECK_CU(cuCheckpointProcessGetRestoreThreadId(t.pid, &tid));
	char task[64];
	snprintf(task, sizeof(task), "/proc/%d/task/%d", t.pid, tid);
	CHECK(access(task, F_OK) == 0); /* translated to an observed TID */
	target_stop(&t);
}

static void cycle_in(const char *name, const char *const *wrapper)
{
	cycle_in_env(name, wrapper, NULL);
}

static void pid_namespace(void)
{
	const char *wrapper[] = {"/usr/bin/unshare", "--pid", "--fork", NULL};
	cycle_in("pidns", wrapper);
}

static void pid_and_mount_namespace(void)
{
	/* The target's run directory is a tmpfs mounted in its own mount namespace:
	 * its checkpoint socket is only reachable through /proc/PID/root. */
	static char run[4200], env_run[4300], script[8600];
	snprintf(run, sizeof(run), "%s/private-run", target_dir);
	mkdir(run, 0700);
	snprintf(env_run, sizeof(env_run), "CUEMU_RUN_DIR=%s", run);
	snprintf(script, sizeof(script), "mount -t tmpfs tmpfs '%s' && exec \"$0\" \"$@\"", run);
	const char *wrapper[] = {"/usr/bin/unshare", "--mount", "--pid", "--fork", "/bin/sh", "-c", script, NULL};
	char *env[] = {env_run, NULL};
	cycle_in_env("mntns", wrapper, env);
	/* Nothing of it is visible here. */
	char sockets[4300];
	snprintf(sockets, sizeof(sockets), "%s", run);
	DIR *d = opendir(sockets);
	int entries = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		entries += e->d_name[0] != '.';
	if (d)
		closedir(d);
	CHECK_EQ(entries, 0);
}

int main(void)
{
	if (geteuid() != 0)
		SKIP("namespaces need root");
	if (access("/usr/bin/unshare", X_OK) != 0)
		SKIP("/usr/bin/unshare (util-linux) is missing");
	CHECK_CU(cuInit(0));
	target_dir_make("ns");
	test_run("a target in a new PID namespace, by its observed PID", pid_namespace);
	test_run("a target in new PID and mount namespaces", pid_and_mount_namespace);
	target_dir_remove();
	return test_done();
}
