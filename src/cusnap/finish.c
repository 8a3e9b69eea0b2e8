/* SPDX-License-Identifier: MIT */
/* The one way a command that changed a tree ends (SYSTEM.md §9; CRIU's
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
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/atomicfile.h"

/* ---- where a tree's state directory is ---- */

void state_dir_default(pid_t pid, char *out, size_t len)
{
	char run[PATH_MAX - 32];
	run_dir_path(run, sizeof(run));
	snprintf(out, len, "%s/suspend-%d", run, (int)pid);
}

/* The default directory holds "state-dir", naming the directory a command was
 * given, so that `cusnap resume --pid ROOT` alone finds the state file. */
#define NOTE "state-dir"

void state_dir_of(pid_t pid, const char *given, char *out, size_t len)
{
	if (given) {
		snprintf(out, len, "%s", given);
		return;
	}
	char def[PATH_MAX], why[PATH_MAX + 128];
	state_dir_default(pid, def, sizeof(def));
	snprintf(out, len, "%s", def);
	/* Read only from a directory nobody else can write. */
	int dfd = dir_open_trusted(def, false, why, sizeof(why));
	int fd = dfd < 0 ? -1 : openat(dfd, NOTE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd >= 0)
		close(dfd);
	if (fd < 0)
		return;
	/* The whole file less its final newline: a directory name may hold newlines. */
	char text[PATH_MAX + 2];
	ssize_t n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n > 1 && text[0] == '/' && text[n - 1] == '\n') {
		text[n - 1] = '\0';
		snprintf(out, len, "%s", text);
	}
}

int state_dir_begin(pid_t pid, const char *dir)
{
	char def[PATH_MAX], state[PATH_MAX + 32], why[PATH_MAX + 128];
	state_dir_default(pid, def, sizeof(def));
	/* An old state file would be taken for this command's if it is cut short. */
	snprintf(state, sizeof(state), "%s/" STATE_FILE, dir);
	if (unlink(state) < 0 && errno != ENOENT)
		return -errno;
	int dfd = dir_open_trusted(def, true, why, sizeof(why));
	if (dfd < 0)
		return -EACCES;
	int rc = 0;
	if (!strcmp(def, dir)) {
		unlinkat(dfd, NOTE, 0);
	} else {
		char abs[PATH_MAX], text[PATH_MAX + 2];
		const char *step;
		if (!realpath(dir, abs)) {
			rc = -errno;
		} else {
			int n = snprintf(text, sizeof(text), "%s\n", abs);
			rc = atomic_write_at(dfd, NOTE, text, (size_t)n, 0600, &step);
		}
	}
	close(dfd);
	return rc;
}

void state_dir_end(pid_t pid, const char *dir)
{
	char def[PATH_MAX], why[PATH_MAX + 128];
	state_dir_default(pid, def, sizeof(def));
	int dfd = dir_open_trusted(def, false, why, sizeof(why));
	if (dfd < 0)
		return;
	unlinkat(dfd, NOTE, 0);
	if (dir && !strcmp(def, dir))
		unlinkat(dfd, STATE_FILE, 0); /* the tree runs again: nothing to resume from */
	close(dfd);
	rmdir(def); /* when empty: nothing piles up */
}

/* ---- the check ---- */

int tree_verify(struct tree *t, char *why, size_t len, size_t *gone)
{
	*gone = 0;
	why[0] = '\0';
	if (tree_states(t, why, len) < 0)
		return -1;
	for (size_t i = 0; i < t->ncuda; i++) {
		struct coord_target *c = &t->targets[i];
		if (coord_process_gone(c->obs)) {
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
		if (coord_inspect(c, coord_undo_timeout_ms(settings.timeout_ms), &p, err, sizeof(err)) != 0) {
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
		if (!t->procs[t->cuda_index[i]].shim || coord_process_gone(t->targets[i].obs))
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

int tree_recover(struct tree *t, const char *dir, bool discard, const struct devmap *map, struct coord_report *r,
		 bool *nothing, char *err, size_t errlen)
{
	char state[PATH_MAX + 32];
	snprintf(state, sizeof(state), "%s/" STATE_FILE, dir);
	memset(r, 0, sizeof(*r));
	*nothing = false;
	/* This is the undo: it gets a longer deadline than the step it undoes, so
	 * that a participant merely starved of CPU is waited for. */
	int timeout_ms = coord_undo_timeout_ms(settings.timeout_ms);
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
		if (native_thaw(t, dir, map ? map->pairs : NULL, map ? map->npairs : 0, err, errlen) < 0)
			return -1;
		progress("native restore+unlock", now_ms() - t0, "%zu processes%s", frozen,
			 map && map->npairs ? ", devices remapped" : "");
	}
	/* The participants know their phase (a locked or checkpointed process
	 * answers only once thawed): whatever the state directory holds, the tree
	 * is whole only when every one of them is active again. */
	size_t unsettled = 0;
	if (t->nshim && participants_unsettled(t, timeout_ms, &unsettled, err, errlen) < 0)
		return -1;
	if (!unsettled) {
		*nothing = !frozen;
		return 0;
	}
	struct coord_options o = {.timeout_ms = timeout_ms,
				  .dir = dir,
				  .on_stage = progress_stage,
				  .device_map = map && map->nordinals ? map->ordinals : NULL,
				  .device_map_len = map ? map->nordinals : 0};
	if (!discard && access(state, F_OK) == 0) {
		/* The state file was written: the prepare completed; rebuild from it. */
		o.require_state = true;
		if (coord_restore(t->targets, t->ncuda, &o, r) < 0) {
			snprintf(err, errlen, "rebuilding shared memory failed: %s%s", r->error,
				 r->state_unreadable ? "; while the processes still hold their own records, `cusnap "
						       "resume --discard-state` rebuilds them in place without it"
						     : "");
			return -1;
		}
		return 0;
	}
	/* No state file (a prepare cut short, a directory that is not this tree's,
	 * or told to do without it): each participant rebuilds in place from its
	 * own records. */
	fprintf(stderr, "cusnap: %zu participant(s) not active and %s: rebuilding in place from their own records\n",
		unsettled,
		discard ? "--discard-state (the state file is not read)" : "no state file in the state directory");
	if (coord_abort(t->targets, t->ncuda, &o, r) < 0) {
		snprintf(err, errlen, "rebuilding shared memory in place failed: %s", r->error);
		return -1;
	}
	return 0;
}

/* ---- the finish ---- */

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
		struct coord_report r;
		bool nothing;
		undone = tree_recover(t, rec->dir, false, NULL, &r, &nothing, err, sizeof(err)) == 0;
	}
	char why[1400] = "";
	size_t gone = 0;
	bool verified = undone && tree_verify(t, why, sizeof(why), &gone) == 0;
	char lost[96] = "";
	if (gone)
		snprintf(lost, sizeof(lost), " (%zu process%s gone, not by cusnap)", gone, gone > 1 ? "es" : "");
	if (verified && gone && gone == t->ncuda)
		return fail(EX_TERMINATED, "%s; every CUDA process of the tree is gone (not by cusnap): nothing runs",
			    what);
	if (verified) {
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

static volatile sig_atomic_t caught;

static void on_signal(int sig)
{
	caught = sig;
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

int interrupted(struct tree *t, const struct record *rec, const char *after)
{
	int sig = caught;
	if (!sig)
		return 0;
	fprintf(stderr, "cusnap: %s after %s: undoing\n", strsignal(sig), after);
	return finish(t, rec, "interrupted by %s after %s", strsignal(sig), after);
}
