/* The checkpoint API reaches a target by its observed PID across PID and mount
 * namespaces. */
#include <stdio.h>

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

static void cycle_in(const char *name, const char *const *wrapper)
{
	struct target t;
	if (target_start_wrapped(&t, name, wrapper, NULL, NULL) < 0)
		return;
	t.pid = child_of(t.child);
	CHECK(t.pid > 0);
	CHECK_EQ(t.nspid, 1);      /* its own namespace's first process */
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

static void pid_namespace(void)
{
	const char *wrapper[] = {"/usr/bin/unshare", "--pid", "--fork", NULL};
	cycle_in("pidns", wrapper);
}

static void pid_and_mount_namespace(void)
{
	/* A private /tmp: the target's endpoint is only reachable via /proc/PID/root. */
	const char *wrapper[] = {"/usr/bin/unshare", "--mount", "--pid", "--fork", "/bin/sh", "-c",
				 "mount -t tmpfs tmpfs /tmp && exec \"$0\" \"$@\"", NULL};
	cycle_in("mntns", wrapper);
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
