/* SPDX-License-Identifier: MIT */
/* SQLite-style countdown fault sweeps over cusnap's commands (DESIGN.md §12).
 *
 * For one command, one content mode and one participant role: a census run
 * lists every driver call the command makes in that process and how often
 * (CUEMU_TRACE, intersected with emu/api.def); then for each such call, N = 1, 2, ... the
 * call's Nth invocation during the command fails (CUEMU_FAULT, counted only
 * while the arming file exists), until the command completes with no fault
 * fired (CUEMU_FAULT_REPORT). After every case the invariant of the command
 * must hold:
 *   suspend, checkpoint: exit 0 and the counterpart (resume, restore) brings
 *     the group back; or exit 1 with every participant active, every process
 *     running and the group passing its own check; or exit 2 naming the failing
 *     call and the state left, with the workload parked (a participant whose
 *     rebuild failed refuses VMM calls: it never runs on half-rebuilt memory).
 *   resume: exit 0 and the group passes; or exit 2 as above.
 *   restore: exit 0 and the restored group passes; or exit 2 naming the
 *     failing call with the restored tree killed.
 * CUSNAP_SWEEP_ALL=1 runs every combination (make sweep); the suite runs a
 * part of it (sweep_selected, sweep_case_selected). */
#ifndef CUSNAP_TESTS_E2E_SWEEP_H
#define CUSNAP_TESTS_E2E_SWEEP_H

#include "e2e_util.h"

enum sweep_op { SWEEP_SUSPEND, SWEEP_RESUME, SWEEP_CHECKPOINT, SWEEP_RESTORE };

struct sweep {
	enum sweep_op op;
	const char *content; /* host | native */
	const char *role;    /* VMM_GROUP_FAULT_ROLE: parent, worker0, ... */
	bool multicast;      /* VMM_GROUP_MULTICAST=1 */
	bool ipc;            /* VMM_GROUP_IPC=1 */
	bool release;        /* VMM_GROUP_RELEASE=1: the creator lets go, the worker carries */
	bool contiguous;     /* VMM_GROUP_CONTIGUOUS=1: mappings back to back, granted together */
	const char *criu;    /* checkpoint and restore */
};

extern const char *const sweep_op_names[];

/* Every driver call cuemu implements (emu/api.def), by symbol. */
extern const char *const sweep_calls[];

/* Is combination index of a sweep run here? test_share: all of them in the
 * plain pass, half under ASan; TSan's pass runs no sweep (tests/suite.def). */
bool sweep_selected(int index);

/* Within a selected combination, is the fault case of this ordinal run? The
 * cases are the census's calls in emu/api.def's order, each as many times as
 * the census made it (case N fails its Nth call), numbered across the census,
 * so that a share is the same number of cases whatever the offset. One in
 * CUSNAP_SWEEP_STRIDE (4 in the plain pass, 8 under a sanitizer unless the
 * program sets it), from an offset drawn at random once per program and
 * printed (CUSNAP_SWEEP_OFFSET replays it): each run of the suite sweeps
 * another share, and `make sweep` (CUSNAP_SWEEP_ALL) sweeps every case in
 * every combination. */
bool sweep_case_selected(size_t ordinal);

int sweep_tool(struct group *g, const char *cmd, const char *content, const char *criu, char **out);

/* The dumped tree's processes come to us (a subreaper): reap them. */
void sweep_reap(struct group *g);

/* The root CRIU restored, from its pidfile (0: none). */
pid_t sweep_restored_root(struct group *g);

/* Every process of g active and running, and the group passing afterwards. */
bool sweep_group_whole(struct group *g, int procs, const char *what);

/* After exit 2: the state named, and the workload parked (some participant
 * not active: its shim refuses VMM calls; the workload never runs on). */
bool sweep_parked(struct group *g, int procs, const char *out, const char *what);

/* The restored group (root from the pidfile) passes its own check. */
bool sweep_restored_passes(struct group *g, int procs, const char *what);

/* The invariant of one case (see the top of this file); rc is the command's exit. */
bool sweep_check(const struct sweep *s, struct group *g, int procs, int rc, const char *out, const char *call,
		 const char *what);

/* One case: a fresh group with env, the step before the command (unarmed),
 * then the command armed. Returns its exit (-1: the group or the step before
 * failed), its output in *out. */
int sweep_case(const struct sweep *s, struct group *g, int workers, char *const *env, const char *arm, char **out);

/* Run the sweep; returns its number of fault cases. */
int sweep_run(const struct sweep *s);

/* The sweeps of two commands (base's op, then second) over both content modes
 * and both roles, as sweep_selected picks; one_role_first: the first command in
 * one role per mode only (unless CUSNAP_SWEEP_ALL). Prints and checks how many
 * fault cases each ran; label follows "countdown sweeps" in the line. */
void sweep_pair(const struct sweep *base, enum sweep_op second, bool one_role_first, const char *label);

/* A program of one test (NAME, titled title): the sweeps of a suspend (base)
 * and a resume, labelled label. Its exit code. */
int sweep_suspend_resume_main(const char *name, const struct sweep *base, const char *label, const char *title);

#endif
