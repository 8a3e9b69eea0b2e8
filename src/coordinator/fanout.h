/* SPDX-License-Identifier: MIT */
/* The coordinator's barrier machinery (fanout.c), shared by its lifecycles. */
#ifndef CUSNAP_COORD_FANOUT_H
#define CUSNAP_COORD_FANOUT_H

#include "coord.h"

/* One request to one participant and what came back. */
struct call {
	const struct coord_target *t;
	uint16_t op;
	const uint8_t *payload;
	size_t len;
	int fd; /* sent with the request (-1: none) */
	int timeout_ms;
	/* results */
	int status;
	struct proto_header reply;
	uint8_t *reply_payload;
	char err[1200];
	struct topo_participant *decode_into; /* INSPECT: the reply decoded there, in the call's thread */
	int decoded;                          /* topo_decode's result */
};

/* One stage: op to each selected participant (NULL: all) at once; waits for
 * all. Returns the index of the first failure or -1; calls[] keeps every result. */
long fan_out(struct call *calls, const struct coord_target *t, size_t n, const bool *selected, uint16_t op,
	     const uint8_t *payload, size_t len, int timeout_ms);
/* The same with descriptor fds[i] (-1: none) sent to participant i. */
long fan_out_fds(struct call *calls, const struct coord_target *t, size_t n, const bool *selected, uint16_t op,
		 const uint8_t *payload, size_t len, const int *fds, int timeout_ms);
void free_calls(struct call *calls, size_t n);
/* INSPECT the selected (NULL: all) into p[], checked (versions, namespace PID).
 * Returns the index of the first failure (r->error says why) or -1. */
long inspect_some(struct call *calls, struct coord_target *t, size_t n, const bool *sel, const struct coord_options *o,
		  struct topo_participant *p, struct coord_report *r);
/* Sum of F_BYTES over the lifecycle results in calls[]. */
uint64_t bytes_of(const struct call *calls, size_t n);
/* A u64 field of c's REC_RESULT reply, or 0 when it has none. */
uint64_t result_u64(const struct call *c, uint16_t field);
/* The same for a u32 field: whether c's result has it. */
bool result_u32(const struct call *c, uint16_t field, uint32_t *v);
/* r->error: "STAGE: participant OBS (ns NS): what the call said". */
void stage_error(struct coord_report *r, const struct call *c, const char *stage);
/* Participants, allocations, shared allocations and mappings of p[] into r. */
void count_records(const struct topo_participant *p, size_t n, struct coord_report *r);
/* Who among sel (NULL: all) is sent the multicast steps, into out[]: the
 * participants whose shims serve them (PROTO_CAP_MULTICAST). Returns how many
 * (0 when no participant holds a multicast object), or -1 with r->error when
 * one holds multicast objects but does not serve them. */
long mc_select(const struct topo_participant *p, const struct coord_target *t, size_t n, const bool *sel, bool *out,
	       struct coord_report *r);
/* The request of the RESTORE_MULTICAST steps: every multicast object that any
 * selected participant has taken down in part or whole, so that all of its
 * participants join the same new object, in a record of type rec. Returns how many. */
size_t mc_rebuild_request(const struct topo_participant *p, size_t n, const bool *sel, uint16_t rec,
			  struct proto_buf *b);
/* A stage done, reported through o->on_stage (when set). */
void stage_progress(const struct coord_options *o, const char *stage, double ms, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* ---- content_files.c: the files of file content, beside the state file ---- */
/* LAYOUT_CONTENT_PREFIX <id hex> LAYOUT_CONTENT_SUFFIX. */
void content_file_name(const struct cusnap_id *id, char *out, size_t len);
/* A fresh file in directory dfd (dir: its name, for err) for each of p[0..n)
 * into fds[] (read-write): 0, or -1 with err (none left open). */
int content_files_create(int dfd, const char *dir, const struct topo_participant *p, size_t n, int *fds, char *err,
			 size_t errlen);
/* After PREPARE: the first participant whose file holds more than every
 * allocation it records (a workload writing through the descriptor it was
 * lent), with err; or -1. */
long content_files_oversize(const struct topo_participant *p, size_t n, const int *fds, char *err, size_t errlen);
/* After PREPARE: the files nothing was written to removed (their fds[] -1). */
void content_files_trim(int dfd, const struct topo_participant *p, size_t n, int *fds);
/* After PREPARE: each file whose shim said its CRC32C (calls[i]'s F_CRC32C)
 * added to digests, its size as it stands now. */
void content_files_digests(const struct call *calls, const struct topo_participant *p, size_t n, const int *fds,
			   struct file_digests *digests);
/* The file of participant id in directory dfd, read-only, or -1 (none there). */
int content_file_open(int dfd, const struct cusnap_id *id);
void content_files_close(int *fds, size_t n);

#endif
