/* SPDX-License-Identifier: MIT */
/* Reaching participants: endpoint paths, one request and its reply, INSPECT,
 * and printing what they answer (client.c, print.c). Shared by
 * snapshot-cuda-vmm, cusnap and the tests. */
#ifndef CUSNAP_COORD_CLIENT_H
#define CUSNAP_COORD_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cusnap/json.h"
#include "cusnap/proto.h"
#include "cusnap/topo.h"

/* A participant as the caller names it: observed PID and innermost namespace PID. */
struct coord_target {
	int obs;
	int ns;
	char endpoint[4400];
};

/* The endpoint path of a participant (DESIGN.md §3):
 * <proc_root>/<obs>/root/<control_dir>/cuda-vmm-<ns>.sock, or with an empty
 * proc_root <control_dir>/cuda-vmm-<ns>.sock. Returns 0 or -ENAMETOOLONG. */
int coord_endpoint_path(const char *proc_root, const char *control_dir, int obs, int ns, char *out, size_t len);

/* One request and its reply on a new connection, within timeout_ms. On success
 * returns 0 with the reply's header and payload (malloc'ed, may be NULL); a
 * reply with an error status also returns that status, its message in err.
 * Transport failures return a proto_status with err describing them. */
int coord_request(const char *endpoint, uint16_t op, const void *payload, size_t len, int timeout_ms,
		  struct proto_header *reply, uint8_t **reply_payload, char *err, size_t errlen);
/* The same with descriptor fd sent along (-1: none; the caller keeps it). */
int coord_request_fd(const char *endpoint, uint16_t op, const void *payload, size_t len, int fd, int timeout_ms,
		     struct proto_header *reply, uint8_t **reply_payload, char *err, size_t errlen);

/* The phase a reply reports (F_PHASE of its result or error record; shims of
 * protocol 1.2 and later send it with every lifecycle reply), or 0. */
uint32_t coord_reply_phase(const uint8_t *payload, size_t len);

/* INSPECT one participant into *out. Returns 0 or a proto_status with err. */
int coord_inspect(const struct coord_target *t, int timeout_ms, struct topo_participant *out, char *err, size_t errlen);

/* The participants as JSON: {"participants":[...]} (NULL when out of memory). */
json_t *coord_topology_json(const struct coord_target *t, const struct topo_participant *p, size_t n);
/* The participants a state file records, as targets and topologies to print:
 * malloc'ed arrays in *t and *p (p[i] borrows st's records: free only the
 * arrays). 0 or -ENOMEM. */
struct state;
int coord_state_view(const struct state *st, struct coord_target **t, struct topo_participant **p);
/* The same, readable. */
void coord_print_text(FILE *f, const struct coord_target *t, const struct topo_participant *p, size_t n);

#endif
