/* SPDX-License-Identifier: MIT */
/* The coordinator's lifecycle (DESIGN.md §6): validation, prepare, restore and
 * abort across participants, their stages, options and report. Shared by
 * snapshot-cuda-vmm, cusnap, the benchmarks and the tests. */
#ifndef CUSNAP_COORD_H
#define CUSNAP_COORD_H

#include <stdbool.h>

#include "coord_client.h"
#include "cusnap/digests.h"
#include "cusnap/request.h"

#include "cusnap/state.h"

/* The holders PREPARE names (DESIGN.md §6.2): v is malloc'ed, its endpoints
 * point into the topology validated. */
struct coord_holds {
	struct req_hold *v;
	size_t n;
};
/* Topology validation (DESIGN.md §6.5), O(records). Returns 0 or -1 with the
 * first violation, naming participant, object and rule, in err. When holds is
 * given, it receives who carries each allocation its creator let go (free v). */
int coord_validate(const struct coord_target *t, const struct topo_participant *p, size_t n, struct coord_holds *holds,
		   char *err, size_t errlen);
/* Does the topology now (cur) match what was recorded (rec), with recorded device
 * ordinals translated by map (map[old] = new; NULL or nmap 0: unchanged)?
 * Returns 0 or -1 with err. */
int coord_compare(const struct topo_participant *rec, const struct topo_participant *cur, const int *map, size_t nmap,
		  char *err, size_t errlen);

/* A recorded device ordinal as it is after a restore onto other GPUs (map[old] = new). */
int coord_remap_device(int dev, const int *map, size_t nmap);
/* The multicast rules of DESIGN.md §8 (called by coord_validate). */
int coord_validate_multicast(const struct coord_target *t, const struct topo_participant *p, size_t n, char *err,
			     size_t errlen);
/* The multicast part of coord_compare. */
int coord_compare_multicast(const struct topo_participant *rec, const struct topo_participant *cur, const int *map,
			    size_t nmap, char *err, size_t errlen);

struct coord_options {
	int timeout_ms; /* per participant and stage */
	enum proto_content content;
	const char *dir; /* where cuda-vmm.state goes */
	/* dir, open: the caller's handle on it, its files reached through it
	 * (0, as a designated initializer leaves it, or -1: dir opened here) */
	int dirfd;
	bool require_state; /* restore: a missing state file is an error */
	/* Each stage as it completes: its label, its time and what it adds (""
	 * when nothing); the caller prints it in its own voice. NULL: silent. */
	void (*on_stage)(const char *stage, double ms, const char *note);
	/* What the caller should know although the step goes on (a participant
	 * gone, not rebuilt), in a sentence; the caller prints it. NULL: silent. */
	void (*on_warning)(const char *what);
	const int *device_map; /* restore: device_map[old ordinal] = new ordinal (GPUs remapped) */
	/* prepare with file content: each file's digest its shim gave (from the
	 * blocks' CRCs it took on the way) is added here; NULL: not wanted. */
	struct file_digests *content_digests;
	size_t device_map_len;
};

/* The stages of prepare, restore and abort (include/cusnap/stages.def). */
enum coord_stage {
#define STAGE(id, key, label) COORD_STAGE_##id,
#include "stages.def"
#undef STAGE
	COORD_STAGE_COUNT
};
/* "inspect", "validate", ...: the keys of the report's "timings_ms". */
extern const char *const coord_stage_key[COORD_STAGE_COUNT];
/* "HELLO/INSPECT", "QUIESCE", ...: the labels of the progress lines. */
extern const char *const coord_stage_label[COORD_STAGE_COUNT];

struct coord_report {
	char op[16];
	size_t participants, allocations, mappings, shared;
	uint64_t bytes; /* copied by host-mode prepare or restore */
	/* The VMM memory the tree holds on each device (ordinal), each allocation
	 * counted once (at its creator, or the importer that carries it). */
	uint64_t device_bytes[PROTO_MAX_DEVICES];
	double ms[COORD_STAGE_COUNT]; /* per stage (0: not run) */
	double ms_total;
	bool nothing_to_do;    /* restore: no state file */
	bool state_unreadable; /* restore: a state file there that cannot be read (corrupt, foreign) */
	bool aborted;          /* prepare failed and every touched participant was rebuilt */
	bool unchanged;        /* prepare failed before it changed anything */
	int status; /* the failed call's proto_status (PROTO_E_UNRESTORABLE: QUIESCE refused what it holds) */
	char error[2048];
};

/* Prepare (DESIGN.md §6.2): INSPECT, validate, QUIESCE, INSPECT again, PREPARE,
 * write DIR/cuda-vmm.state. On failure after QUIESCE every touched participant
 * is rebuilt (ABORT). Returns 0 or -1 (report.error says what failed). */
int coord_prepare(struct coord_target *t, size_t n, const struct coord_options *o, struct coord_report *r);
/* Restore (DESIGN.md §6.3) from DIR/cuda-vmm.state. */
int coord_restore(struct coord_target *t, size_t n, const struct coord_options *o, struct coord_report *r);
/* Rebuild every listed participant that is part way through a prepare. */
int coord_abort(struct coord_target *t, size_t n, const struct coord_options *o, struct coord_report *r);
/* The deadline of an undo (an abort, a recovery, the check after it) when the
 * step it undoes had timeout_ms: longer, so that a step that failed because
 * the machine is busy is still undone, and only a participant that stays
 * silent through it is given up on: max(4 x timeout_ms, 10 s). */
int coord_undo_timeout_ms(int timeout_ms);
/* The report as one JSON object. */
json_t *coord_report_json(const struct coord_report *r);
#endif
