/* SPDX-License-Identifier: MIT */
/* The one way a command that changed a tree ends (DESIGN.md §9; CRIU's
 * cr_dump_finish is the model): the record of how far it got, the undo of
 * exactly that, a check of every process afterwards, and the exit code picked
 * from what the check saw. Also the recovery of a tree an interrupted command
 * left (`cusnap resume --pid ROOT`), and the signals that end a command early. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "cusnap/atomicfile.h"
#include "cusnap/control.h"
#include "cusnap/state.h"

/* ---- the check ---- */

int tree_verify(struct tree *t, char *why, size_t len, size_t *gone)
{
	*gone = 0;
	why[0] = '\0';
	if (tree_states(t, why, len) < 0)
		return -1;
	for (size_t i = 0; i < t->ncuda; i++) {
		struct coord_target *c = &t->targets[i];
		if (proc_gone(c->obs)) {
			(*gone)++; /* killed by someone else: nothing to put back */
			continue;
		}
		int st = t->procs[t->cuda_index[i]].state;
		if (st != CU_PROCESS_STATE_RUNNING) {
			snprintf(why, len, "process %d is %s", c->obs,
				 st < 0 ? "not answering the native API" : state_name(st));
			return -1;
		}
		if (!t->procs[t->cuda_index[i]].shim)
			continue;
		struct topo_participant p;
		char err[1200];
		if (coord_inspect(c, coord_undo_timeout_ms(t->s->timeout_ms), &p, err, sizeof(err)) != 0) {
			snprintf(why, len, "participant %d does not answer: %s", c->obs, err);
			return -1;
		}
		uint32_t phase = p.phase;
		topo_free(&p);
		if (phase != PROTO_PHASE_ACTIVE) {
			snprintf(why, len, "participant %d is in phase %s", c->obs, proto_phase_name(phase));
			return -1;
		}
	}
	return 0;
}

/* ---- recovery from any intermediate state ---- */

/* The phases of the tree's participants: how many are not ACTIVE into
 * *unsettled. 0, or -1 with err naming one that does not answer (a process
 * that is gone is left out). */
static int participants_unsettled(struct tree *t, int timeout_ms, size_t *unsettled, char *err, size_t errlen)
{
	*unsettled = 0;
	for (size_t i = 0; i < t->ncuda; i++) {
		if (!t->procs[t->cuda_index[i]].shim || proc_gone(t->targets[i].obs))
			continue;
		struct topo_participant p;
		if (coord_inspect(&t->targets[i], timeout_ms, &p, err, errlen) != 0) {
			char why[1024];
			snprintf(why, sizeof(why), "%s", err);
			snprintf(err, errlen, "participant %d does not answer: %s", t->targets[i].obs, why);
			return -1;
		}
		*unsettled += p.phase != PROTO_PHASE_ACTIVE;
		topo_free(&p);
	}
	return 0;
}

int tree_recover(struct tree *t, int dirfd, const char *dir, enum recover_from from, const struct devmap *map,
		 struct recovery *out, char *err, size_t errlen)
{
	char state[PATH_MAX + 32];
	snprintf(state, sizeof(state), "%s/" STATE_FILE, dir);
	memset(out, 0, sizeof(*out));
	struct coord_report *r = &out->report;
	/* This is the undo: it gets a longer deadline than the step it undoes, so
	 * that a participant merely starved of CPU is waited for. */
	int timeout_ms = coord_undo_timeout_ms(t->s->timeout_ms);
	/* From whatever state an interrupted (even SIGKILLed) command left: native
	 * LOCKED or CHECKPOINTED, shims part way through a prepare or a rebuild. */
	size_t frozen = 0;
	if (tree_states(t, err, errlen) < 0)
		return -1;
	for (size_t i = 0; i < t->ncuda; i++) {
		int s = t->procs[t->cuda_index[i]].state;
		frozen += s == CU_PROCESS_STATE_CHECKPOINTED || s == CU_PROCESS_STATE_LOCKED;
	}
	double t0 = now_ms();
	if (frozen) {
		uint64_t before = cuda_resident(t);
		if (native_thaw(t, dirfd, dir, map ? map->pairs : NULL, map ? map->npairs : 0, err, errlen) < 0)
			return -1;
		uint64_t after = cuda_resident(t), moved = before > after ? before - after : 0;
		out->ms_thaw = now_ms() - t0;
		progress("native restore+unlock", out->ms_thaw, "%zu processes%s, %.1f MiB of them back on the GPU",
			 frozen, map && map->npairs ? ", devices remapped" : "", (double)moved / (1 << 20));
		progress_bytes("native restore+unlock", moved);
	}
	/* The participants know their phase (a locked or checkpointed process
	 * answers only once thawed): whatever the state directory holds, the tree
	 * is whole only when every one of them is active again. */
	size_t unsettled = 0;
	if (t->nshim && participants_unsettled(t, timeout_ms, &unsettled, err, errlen) < 0)
		return -1;
	if (!unsettled) {
		out->nothing = !frozen;
		return 0;
	}
	struct coord_options o = {.timeout_ms = timeout_ms,
				  .dir = dir,
				  .dirfd = dirfd,
				  .on_stage = progress_stage,
				  .on_warning = progress_warning,
				  .device_map = map && map->nordinals ? map->ordinals : NULL,
				  .device_map_len = map ? map->nordinals : 0};
	t0 = now_ms();
	size_t gone = 0;
	for (size_t i = 0; i < t->ncuda; i++)
		gone += t->procs[t->cuda_index[i]].shim && proc_gone(t->targets[i].obs);
	bool have_state = from != RECOVER_RECORDS &&
			  (dirfd > 0 ? faccessat(dirfd, STATE_FILE, F_OK, AT_SYMLINK_NOFOLLOW) : access(state, F_OK)) ==
				  0;
	if (have_state && gone && from != RECOVER_STATE) {
		/* The state file names a participant that is gone: the others rebuild
		 * in place from their own records (the gone one left out). */
		voice(VOICE_INFO, "%zu participant(s) of the state file gone: the others rebuild in place", gone);
		have_state = false;
	}
	if (from == RECOVER_STATE && !have_state) {
		snprintf(err, errlen, "%s is missing: the checkpoint is not whole", state);
		return -1;
	}
	if (have_state) {
		/* The state file was written: the prepare completed; rebuild from it. */
		o.require_state = true;
		int rc = coord_restore(t->targets, t->ncuda, &o, r);
		out->ms_rebuild = now_ms() - t0;
		progress_bytes(coord_stage_label[COORD_STAGE_RESTORE_CREATORS], r->bytes);
		if (rc < 0)
			snprintf(err, errlen, "rebuilding shared memory failed: %s%s", r->error,
				 r->state_unreadable ? "; while the processes still hold their own records, `cusnap "
						       "resume --discard-state` rebuilds them in place without it"
						     : "");
		return rc < 0 ? -1 : 0;
	}
	/* No state file (a prepare cut short, a directory that is not this tree's,
	 * or told to do without it): each participant rebuilds in place from its
	 * own records. */
	if (!gone)
		voice(VOICE_INFO, "%zu participant(s) not active and %s: rebuilding in place from their own records",
		      unsettled,
		      from == RECOVER_RECORDS ? "--discard-state (the state file is not read)"
					      : "no state file in the state directory");
	int rc = coord_abort(t->targets, t->ncuda, &o, r);
	out->ms_rebuild = now_ms() - t0;
	if (rc < 0)
		snprintf(err, errlen, "rebuilding shared memory in place failed: %s", r->error);
	return rc < 0 ? -1 : 0;
}

int tree_release(struct tree *t, int dirfd, const char *dir, enum recover_from from, const struct devmap *map,
		 enum release_kind kind, struct recovery *out, char *err, size_t errlen)
{
	pid_t root = t->procs[0].pid;
	const char *done = kind == RELEASE_RESTORED ? CONTROL_RESTORE_DONE : CONTROL_SNAPSHOT_DONE;
	char why[PATH_MAX + 256];
	int rc = tree_recover(t, dirfd, dir, from, map, out, err, errlen);
	struct boundary *b = kind == RELEASE_RESTORED ? t->s->boundary : NULL;
	if (rc == 0 && b && b->ready(b, err, errlen) < 0)
		rc = -1; /* (another member's restore failed: none of them runs) */
	/* Only now may the workload run: its sharing is back. */
	if (rc == 0 && control_write(root, t->s->control_dir, done, why, sizeof(why)) < 0) {
		if (kind == RELEASE_IN_PLACE)
			voice(VOICE_WARN, "cannot write %s", why);
		else
			rc = -1, snprintf(err, errlen, "cannot write %s", why);
	}
	if (rc == 0) {
		progress(kind == RELEASE_RESTORED ? "restore complete" : "resumed in place",
			 out->ms_thaw + out->ms_rebuild, "%s/%s written", t->s->control_dir, done);
		return 0;
	}
	/* A half-restored workload must never run (reaped when it is our child:
	 * its PIDs free for the next restore). */
	pid_t parent = 0;
	if (kind == RELEASE_RESTORED)
		proc_tree_kill(root, proc_state(root, &parent) && parent == getpid());
	return -1;
}

/* ---- the finish ---- */

/* The CUDA processes of t that died while the command worked, into out: each
 * PID and, while it is a zombie, how it ended ("1234 killed by SIGSEGV"); a
 * process its parent has already reaped is named alone. The count. */
static size_t tree_deaths(const struct tree *t, char *out, size_t len)
{
	size_t n = 0, at = 0;
	out[0] = '\0';
	for (size_t i = 0; i < t->ncuda; i++) {
		pid_t pid = t->targets[i].obs;
		if (!proc_gone(pid))
			continue;
		char how[64] = "";
		int st = proc_exit_status(pid);
		if (st >= 0 && WIFSIGNALED(st))
			snprintf(how, sizeof(how), " killed by SIG%s%s", sigabbrev_np(WTERMSIG(st)) ?: "?",
				 WCOREDUMP(st) ? " (core dumped)" : "");
		else if (st >= 0 && WIFEXITED(st))
			snprintf(how, sizeof(how), " exited with status %d", WEXITSTATUS(st));
		if (n++ < 4 && at < len)
			at += (size_t)snprintf(out + at, len - at, "%s%d%s", n > 1 ? ", " : "", (int)pid, how);
	}
	if (n > 4 && at < len)
		snprintf(out + at, len - at, ", and %zu more", n - 4);
	return n;
}

int finish(struct tree *t, const struct record *rec, const char *fmt, ...)
{
	char what[2000];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (rec->stuck)
		return fail(EX_TERMINATED,
			    "%s: the state of the tree is unknown; once the call returns, `cusnap resume "
			    "--pid %d` brings it back",
			    what, (int)rec->root);
	char err[1400] = "";
	bool undone = true;
	if (rec->changed) {
		struct recovery r;
		undone = tree_recover(t, rec->dirfd, rec->dir, RECOVER_ANY, NULL, &r, err, sizeof(err)) == 0;
	}
	char why[1400] = "";
	size_t gone = 0;
	bool verified = undone && tree_verify(t, why, sizeof(why), &gone) == 0;
	/* (cusnap kills nothing before the boundary: a process gone died of its own) */
	char lost[400] = "", dead[300];
	if (gone) {
		gone = tree_deaths(t, dead, sizeof(dead));
		snprintf(lost, sizeof(lost), " (%zu CUDA process%s died meanwhile: %s)", gone, gone > 1 ? "es" : "",
			 dead);
	}
	if (verified && gone && gone == t->ncuda)
		return fail(EX_TERMINATED, "%s; every CUDA process of the tree died meanwhile (%s): nothing runs", what,
			    dead);
	if (verified && gone)
		return fail(EX_LEFT_RUNNING,
			    "%s: undone, and the rest of the tree runs, but it is not as before: %zu CUDA process%s "
			    "died meanwhile (%s)",
			    what, gone, gone > 1 ? "es" : "", dead);
	if (verified) {
		/* (its state file describes a prepare that is undone: nothing to resume from) */
		if (rec->changed && rec->dir) {
			char state[PATH_MAX + 32];
			snprintf(state, sizeof(state), "%s/" STATE_FILE, rec->dir);
			unlink(state);
		}
		state_dir_end(rec->root, NULL);
		return fail(EX_LEFT_RUNNING, "%s: everything undone, the workload runs as before%s", what, lost);
	}
	/* (A participant whose rebuild failed stays parked: it refuses VMM calls
	 * and cannot be rebuilt again in place.) */
	if (!undone)
		return fail(EX_TERMINATED,
			    "%s; undoing it failed: %s%s; the tree is left half-done (`cusnap inspect --pid %d`)", what,
			    err, lost, (int)rec->root);
	return fail(EX_TERMINATED, "%s; after the undo %s%s: the tree is left half-done (`cusnap inspect --pid %d`)",
		    what, why, lost, (int)rec->root);
}

/* ---- signals: SIGINT, SIGTERM and SIGHUP end a command at its next boundary ---- */

static volatile sig_atomic_t caught, times;

static void on_signal(int sig)
{
	caught = sig;
	times = times + 1;
}

void signals_arm(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART; /* calls in flight finish; the command stops at its next phase boundary */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

int signal_caught(void)
{
	return caught;
}

int signals_caught(void)
{
	return times;
}

bool interrupted_why(const char *after, char *why, size_t len)
{
	int sig = caught;
	if (!sig)
		return false;
	voice(VOICE_ERROR, "%s after %s: undoing", strsignal(sig), after);
	snprintf(why, len, "interrupted by %s after %s", strsignal(sig), after);
	return true;
}

int interrupted(struct tree *t, const struct record *rec, const char *after)
{
	char why[200];
	return interrupted_why(after, why, sizeof(why)) ? finish(t, rec, "%s", why) : 0;
}
