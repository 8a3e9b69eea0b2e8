/* SPDX-License-Identifier: MIT */
/* Checkpoint jobs, as driver 590 introduced them and 610 requires them for
 * legacy IPC (`cuda-checkpoint --launch-job`; CRIU's test/others/cuda-ipc;
 * NVIDIA/cuda-checkpoint issues 43 and 56):
 *
 *  - a process whose environment names a job file (CUDA_CHECKPOINT_JOB_FILE)
 *    when it calls cuInit is a member of that job; a controller joins it by
 *    naming the same file in its own environment;
 *  - from the r610 profile on, a process that uses legacy IPC (an opened or an
 *    exported handle) checkpoints only inside a job: outside, its checkpoint
 *    fails with CUDA_ERROR_NOT_SUPPORTED;
 *  - a job's members go in the job's order: every member locked before any is
 *    checkpointed, one checkpoint (or restore) at a time, restores in
 *    checkpoint order. Unlocks are not ordered here (not documented);
 *  - inside a job the driver carries legacy IPC through the checkpoint: the
 *    exporter's memory keeps its identity, the importers' mappings come back
 *    onto it (ckpt_server.c).
 *
 * The driver keeps its own record in the job file while it checkpoints (which
 * is why a controller copies the file only once every member is
 * CHECKPOINTED). cuemu's record is a text log, one line per transition:
 * "member|lock|checkpoint|restore|unlock PID", each PID as its member sees
 * itself. What the real driver writes there is its own business. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap/log.h"
#include "emu.h"

#define JOB_ENV "CUDA_CHECKPOINT_JOB_FILE"

static int job_fd = -1; /* this process's own open file description of its job file */

static uint64_t key_of(const struct stat *st)
{
	return ((uint64_t)st->st_dev * 0x9e3779b97f4a7c15ull ^ (uint64_t)st->st_ino) | 1;
}

void emu_job_join(void)
{
	const char *path = getenv(JOB_ENV);
	if (job_fd >= 0 || !path || !*path)
		return;
	job_fd = open(path, O_RDWR | O_APPEND | O_CLOEXEC);
	struct stat st;
	if (job_fd >= 0 && (fstat(job_fd, &st) < 0 || !S_ISREG(st.st_mode))) {
		close(job_fd);
		job_fd = -1;
		errno = EINVAL;
	}
	if (job_fd < 0) {
		LOG_AT(LOG_WARN, "%s=%s: not a job file (%s): this process is in no checkpoint job", JOB_ENV, path,
		       strerror(errno));
		return;
	}
	emu_job_note("member");
}

bool emu_job_rules(void)
{
	return emu.profile >= EMU_PROFILE_R610 && job_fd >= 0;
}

uint64_t emu_job_caller_key(void)
{
	const char *path = getenv(JOB_ENV);
	struct stat st;
	return path && *path && stat(path, &st) == 0 ? key_of(&st) : 0;
}

void emu_job_note(const char *what)
{
	if (job_fd < 0)
		return;
	char line[48];
	int n = snprintf(line, sizeof(line), "%s %d\n", what, (int)getpid());
	if (write(job_fd, line, (size_t)n) != n) /* O_APPEND: one write, one line */
		LOG_AT(LOG_WARN, "job file: cannot record '%s': %s", what, strerror(errno));
}

/* One member's transitions as the log has them: the last line of each kind. */
struct member {
	int pid;
	long member, lock, checkpoint, restore, unlock; /* line numbers, -1: none */
};

/* Every PID the log names, in members[] (malloc'ed, *n of them); -1 when out of memory. */
static int read_log(struct member **members, size_t *n)
{
	*members = NULL;
	*n = 0;
	struct stat st;
	if (fstat(job_fd, &st) < 0)
		return -1;
	size_t len = (size_t)st.st_size;
	char *text = malloc(len + 1);
	if (!text)
		return -1;
	ssize_t got = pread(job_fd, text, len, 0);
	text[got > 0 ? (size_t)got : 0] = '\0';
	size_t cap = 0;
	long line = 0;
	for (char *p = text, *next; p && *p; p = next, line++) {
		next = strchr(p, '\n');
		if (next)
			*next++ = '\0';
		char what[16];
		int pid;
		if (sscanf(p, "%15s %d", what, &pid) != 2 || pid <= 0)
			continue;
		struct member *m = NULL;
		for (size_t i = 0; i < *n && !m; i++)
			if ((*members)[i].pid == pid)
				m = &(*members)[i];
		if (!m) {
			if (*n == cap) {
				cap = cap ? 2 * cap : 8;
				struct member *grown = realloc(*members, cap * sizeof(*grown));
				if (!grown) {
					free(text);
					return -1;
				}
				*members = grown;
			}
			m = &(*members)[(*n)++];
			*m = (struct member){pid, -1, -1, -1, -1, -1};
		}
		long *at = !strcmp(what, "member")       ? &m->member
			   : !strcmp(what, "lock")       ? &m->lock
			   : !strcmp(what, "checkpoint") ? &m->checkpoint
			   : !strcmp(what, "restore")    ? &m->restore
			   : !strcmp(what, "unlock")     ? &m->unlock
							 : NULL;
		if (at)
			*at = line;
	}
	free(text);
	return 0;
}

static bool alive(int pid)
{
	return kill(pid, 0) == 0 || errno == EPERM;
}

/* Locked now: its last lock is after its last unlock (a checkpoint or a
 * restore happens only while locked). */
static bool locked(const struct member *m)
{
	return m->lock > m->unlock;
}

CUresult emu_job_may_checkpoint(uint64_t caller, bool uses_ipc)
{
	if (emu.profile < EMU_PROFILE_R610)
		return CUDA_SUCCESS;
	if (job_fd < 0) {
		if (!uses_ipc)
			return CUDA_SUCCESS;
		LOG_AT(LOG_ERROR, "r610: native checkpoint of a process using legacy IPC outside a checkpoint job "
				  "(start it with cuda-checkpoint --launch-job): CUDA_ERROR_NOT_SUPPORTED");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	struct stat st;
	if (fstat(job_fd, &st) < 0 || caller != key_of(&st)) {
		LOG_AT(LOG_ERROR,
		       "r610: the caller is not in this process's checkpoint job (its %s names another "
		       "file, or none): CUDA_ERROR_NOT_SUPPORTED",
		       JOB_ENV);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	struct member *m;
	size_t n;
	if (read_log(&m, &n) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult rc = CUDA_SUCCESS;
	for (size_t i = 0; i < n && !rc; i++) {
		if (m[i].pid == getpid() || m[i].member < 0 || locked(&m[i]) || !alive(m[i].pid))
			continue;
		LOG_AT(LOG_ERROR,
		       "r610: job member %d is not locked: a job locks every member before it "
		       "checkpoints any: CUDA_ERROR_NOT_SUPPORTED",
		       m[i].pid);
		rc = CUDA_ERROR_NOT_SUPPORTED;
	}
	free(m);
	return rc;
}

CUresult emu_job_may_restore(void)
{
	if (!emu_job_rules())
		return CUDA_SUCCESS;
	struct member *m;
	size_t n;
	if (read_log(&m, &n) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	long mine = -1;
	for (size_t i = 0; i < n; i++)
		if (m[i].pid == getpid())
			mine = m[i].checkpoint;
	CUresult rc = CUDA_SUCCESS;
	for (size_t i = 0; i < n && !rc; i++) {
		/* Checkpointed before this process and not restored since: it goes first. */
		const struct member *o = &m[i];
		if (o->pid == getpid() || o->checkpoint < 0 || o->checkpoint > mine || o->restore > o->checkpoint ||
		    !alive(o->pid))
			continue;
		LOG_AT(LOG_ERROR,
		       "r610: job member %d was checkpointed before this process and is not restored "
		       "yet: a job restores in checkpoint order: CUDA_ERROR_NOT_SUPPORTED",
		       o->pid);
		rc = CUDA_ERROR_NOT_SUPPORTED;
	}
	free(m);
	return rc;
}

CUresult emu_job_begin(void)
{
	if (!emu_job_rules() || flock(job_fd, LOCK_EX | LOCK_NB) == 0)
		return CUDA_SUCCESS;
	LOG_AT(LOG_ERROR, "r610: another member of the checkpoint job is being checkpointed or restored: a job's "
			  "members go one at a time: CUDA_ERROR_NOT_SUPPORTED");
	return CUDA_ERROR_NOT_SUPPORTED;
}

void emu_job_end(void)
{
	if (emu_job_rules())
		flock(job_fd, LOCK_UN);
}
