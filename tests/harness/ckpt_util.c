/* SPDX-License-Identifier: MIT */
/* The checkpoint API tests' helpers (tests/emu/ckpt_util.h), compiled once. */
#include "../emu/ckpt_util.h"

char *target_dir;

int target_start_wrapped(struct target *t, const char *name, const char *const *wrapper, const char *const *opts,
			 char *const *env)
{
	char helper[4096], log[4096];
	snprintf(helper, sizeof(helper), "%s/target_helper", test_exe_dir());
	if (access(helper, X_OK) != 0) /* the shim tests use the emulator tests' helper */
		snprintf(helper, sizeof(helper), "%s/../emu/target_helper", test_exe_dir());
	snprintf(log, sizeof(log), "%s/%s.log", target_dir, name);
	const char *argv[32];
	int n = 0;
	for (int i = 0; wrapper && wrapper[i]; i++)
		argv[n++] = wrapper[i];
	argv[n++] = helper;
	argv[n++] = target_dir;
	argv[n++] = name;
	for (int i = 0; opts && opts[i] && n < 30; i++)
		argv[n++] = opts[i];
	argv[n] = NULL;
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->child = test_spawn((char *const *)argv, env, log);
	t->pid = t->child;
	if (test_wait_ready(target_dir, name, 20000, &t->nspid, &t->va) < 0) {
		char *text = test_read_file(log);
		test_fail(__FILE__, __LINE__, "target %s did not get ready; its log:\n%s", name, text ? text : "");
		free(text);
		return -1;
	}
	return 0;
}

int target_start(struct target *t, const char *name, const char *const *opts, char *const *env)
{
	return target_start_wrapped(t, name, NULL, opts, env);
}

char *target_cmd(struct target *t, const char *cmd)
{
	char *out = test_command(target_dir, t->name, cmd, 20000);
	if (!out)
		test_fail(__FILE__, __LINE__, "target %s: no answer to '%s'", t->name, cmd);
	return out;
}

void target_stop(struct target *t)
{
	if (t->child <= 0)
		return;
	char *bye = test_command(target_dir, t->name, "exit", 5000);
	if (bye) {
		int status = test_wait_child(t->child, 20000);
		if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
			test_fail(__FILE__, __LINE__, "target %s exited with status %#x (see %s/%s.log)", t->name,
				  status, target_dir, t->name);
		free(bye);
		t->child = 0;
		return;
	}
	kill(t->pid, SIGKILL);
	if (t->child != t->pid)
		kill(t->child, SIGKILL);
	waitpid(t->child, NULL, 0);
	t->child = 0;
}

CUresult ck_lock(pid_t pid, unsigned timeout_ms)
{
	CUcheckpointLockArgs a;
	memset(&a, 0, sizeof(a));
	a.timeoutMs = timeout_ms;
	return cuCheckpointProcessLock(pid, &a);
}

CUresult ck_restore(pid_t pid, CUcheckpointGpuPair *pairs, unsigned n)
{
	CUcheckpointRestoreArgs a;
	memset(&a, 0, sizeof(a));
	a.gpuPairs = pairs;
	a.gpuPairsCount = n;
	return cuCheckpointProcessRestore(pid, &a);
}

int ck_state(pid_t pid)
{
	CUprocessState s = (CUprocessState)-1;
	CUresult rc = cuCheckpointProcessGetState(pid, &s);
	return rc == CUDA_SUCCESS ? (int)s : -(int)rc;
}

void ck_suspend(struct target *t)
{
	CHECK_CU(ck_lock(t->pid, 10000));
	CHECK_CU(cuCheckpointProcessCheckpoint(t->pid, NULL));
	CHECK_EQ(ck_state(t->pid), CU_PROCESS_STATE_CHECKPOINTED);
	CHECK_EQ(test_count_maps(t->pid, "memfd:cuemu"), 0);
}

void ck_resume(struct target *t)
{
	CHECK_CU(ck_restore(t->pid, NULL, 0));
	CHECK_EQ(ck_state(t->pid), CU_PROCESS_STATE_LOCKED);
	CHECK_CU(cuCheckpointProcessUnlock(t->pid, NULL));
	CHECK_EQ(ck_state(t->pid), CU_PROCESS_STATE_RUNNING);
}

void target_dir_make(const char *tag)
{
	/* Under the build tree rather than /tmp: the namespace tests hide /tmp. */
	char tmpl[4096];
	snprintf(tmpl, sizeof(tmpl), "%s/tmp-%s-XXXXXX", test_exe_dir(), tag);
	target_dir = strdup(mkdtemp(tmpl));
}

void target_dir_remove(void)
{
	if (!test_failures) {
		char *argv[] = {"rm", "-rf", target_dir, NULL};
		test_run_cmd(argv, NULL, 30000);
	} else {
		printf("target logs kept in %s\n", target_dir);
	}
}
