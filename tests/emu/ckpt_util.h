/* SPDX-License-Identifier: MIT */
/* Driving target_helper processes and the checkpoint API from a test. */
#ifndef CUSNAP_TESTS_EMU_CKPT_UTIL_H
#define CUSNAP_TESTS_EMU_CKPT_UTIL_H

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness/test.h"
#include "emu_util.h"

struct target {
	char name[32];
	pid_t pid;   /* observed (the pid to give the checkpoint API) */
	pid_t child; /* what we forked (== pid unless started through a wrapper) */
	int nspid;
	unsigned long long va;
};

extern char *target_dir;

/* Start target_helper NAME with its options; extra env as "K=V" (NULL ended). */
int target_start_wrapped(struct target *t, const char *name, const char *const *wrapper, const char *const *opts,
			 char *const *env);

int target_start(struct target *t, const char *name, const char *const *opts, char *const *env);

char *target_cmd(struct target *t, const char *cmd);

/* Command whose answer must start with want. */
#define TARGET_EXPECT(t, cmd, want)                                                                                    \
	do {                                                                                                           \
		char *got_ = target_cmd((t), (cmd));                                                                   \
		if (got_ && strncmp(got_, (want), strlen(want)) != 0)                                                  \
			test_fail(__FILE__, __LINE__, "target %s: '%s' answered '%s', want '%s...'", (t)->name, (cmd), \
				  got_, (want));                                                                       \
		free(got_);                                                                                            \
	} while (0)

/* Ask the target to exit and check that it exits cleanly (under a sanitizer
 * this is where its reports turn into a failure); kill it otherwise. */
void target_stop(struct target *t);

CUresult ck_lock(pid_t pid, unsigned timeout_ms);

CUresult ck_restore(pid_t pid, CUcheckpointGpuPair *pairs, unsigned n);

int ck_state(pid_t pid);

/* RUNNING -> LOCKED -> CHECKPOINTED: device backing gone. */
void ck_suspend(struct target *t);

/* CHECKPOINTED -> LOCKED -> RUNNING. */
void ck_resume(struct target *t);

void target_dir_make(const char *tag);

void target_dir_remove(void);

#endif
