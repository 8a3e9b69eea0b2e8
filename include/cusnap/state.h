/* SPDX-License-Identifier: MIT */
/* The state sidecar DIR/cuda-vmm.state (DESIGN.md §7): what prepare recorded,
 * for restore to rebuild and compare against.
 *
 * Layout (little-endian):
 *   off size field
 *    0   8   magic "CSVMSTAT"
 *    8   2   major version (1): a reader refuses newer majors
 *   10   2   minor version (0)
 *   12   8   creation time (seconds since the epoch)
 *   20   4   content mode (1 host, 2 native)
 *   24   4   participant count N
 *   28       N x { id 16 bytes | nspid u32 | observed pid u32 | stream length L u32 |
 *                  L bytes: the participant's INSPECT records }
 *   end-4 4  CRC32C of every byte before it
 * No FDs, tokens or allocation bytes are stored. */
#ifndef CUSNAP_STATE_H
#define CUSNAP_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "cusnap/ids.h"
#include "cusnap/layout.h"
#include "cusnap/topo.h"

#define STATE_FILE LAYOUT_STATE
#define STATE_MAJOR 1
#define STATE_MINOR 0

struct state_participant {
	struct cusnap_id id;
	uint32_t nspid;
	uint32_t obs;
	uint8_t *stream; /* INSPECT records (owned) */
	size_t len;
	struct topo_participant topo; /* decoded stream */
};

struct state {
	uint64_t created;
	uint32_t content;
	size_t n;
	struct state_participant *p;
};

/* Write DIR/cuda-vmm.state atomically: a temporary file in DIR, fsync, rename,
 * fsync of DIR, through dirfd when it is DIR open (else DIR is opened, a link
 * there refused). On failure the previous file is untouched. Returns 0 or
 * -errno, err naming the step. */
int state_write(int dirfd, const char *dir, const struct state *s, char *err, size_t errlen);
/* Decode a whole file's bytes; each refusal has its own message. Returns 0 or -EINVAL. */
int state_decode(const uint8_t *buf, size_t len, struct state *s, char *err, size_t errlen);
/* Read and decode PATH. Returns 0, -ENOENT when it does not exist, or another -errno. */
int state_read(const char *path, struct state *s, char *err, size_t errlen);
/* The same for DIR/cuda-vmm.state reached through dirfd, DIR open (a link
 * there refused; DIR names it in err). */
int state_read_at(int dirfd, const char *dir, struct state *s, char *err, size_t errlen);
void state_free(struct state *s);

#endif
