/* The coordinator library, shared by snapshot-cuda-vmm and cusnap. */
#ifndef CUSNAP_COORD_H
#define CUSNAP_COORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cusnap/proto.h"
#include "cusnap/topo.h"

/* A participant as the caller names it: observed PID and innermost namespace PID. */
struct coord_target {
	int obs;
	int ns;
	char endpoint[4400];
};

/* The endpoint path of a participant (SYSTEM.md §3):
 * <proc_root>/<obs>/root/<control_dir>/cuda-vmm-<ns>.sock, or with an empty
 * proc_root <control_dir>/cuda-vmm-<ns>.sock. Returns 0 or -ENAMETOOLONG. */
int coord_endpoint_path(const char *proc_root, const char *control_dir, int obs, int ns, char *out, size_t len);
/* The control directory: SNAPSHOT_CONTROL_DIR, DYN_SNAPSHOT_CONTROL_DIR, /snapshot-control. */
const char *coord_default_control_dir(void);

/* One request and its reply on a new connection, within timeout_ms. On success
 * returns 0 with the reply's header and payload (malloc'ed, may be NULL); a
 * reply with an error status also returns that status, its message in err.
 * Transport failures return a proto_status with err describing them. */
int coord_request(const char *endpoint, uint16_t op, const void *payload, size_t len, int timeout_ms,
		  struct proto_header *reply, uint8_t **reply_payload, char *err, size_t errlen);

/* HELLO then INSPECT one participant into *out. Returns 0 or a proto_status with err. */
int coord_inspect(const struct coord_target *t, int timeout_ms, struct topo_participant *out, char *err,
		  size_t errlen);

/* JSON of participants (one object, {"participants":[...]}) to f. */
void coord_print_json(FILE *f, const struct coord_target *t, const struct topo_participant *p, size_t n);
/* The same, readable. */
void coord_print_text(FILE *f, const struct coord_target *t, const struct topo_participant *p, size_t n);

#endif
