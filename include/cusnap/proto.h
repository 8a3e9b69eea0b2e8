/* SPDX-License-Identifier: MIT */
/* The shim <-> coordinator <-> shim protocol (DESIGN.md §5).
 *
 * Every message is a 24-byte little-endian header packed field by field,
 * followed by payload_len bytes of records:
 *
 *   off size field
 *    0   4   magic        "CSVM" (0x4d565343)
 *    4   2   major        incompatible changes
 *    6   2   minor        compatible additions
 *    8   2   op           enum proto_op
 *   10   2   flags        PROTO_FLAG_REPLY on replies
 *   12   4   request_id   echoed in the reply
 *   16   4   status       0 or a negative enum proto_status (replies)
 *   20   4   payload_len  bytes, at most PROTO_MAX_PAYLOAD
 *
 * A record is type u16 | length u32 | value. Top-level records (REC_*) carry a
 * stream of field records (F_*) as their value. Readers skip record and field
 * types they do not know, so minor versions can add both; a peer with another
 * major version gets PROTO_E_VERSION naming both versions. The shim and the
 * coordinator ship in different images, so mixed versions are normal. */
#ifndef CUSNAP_PROTO_H
#define CUSNAP_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cusnap/ids.h"

#define PROTO_MAGIC 0x4d565343u
#define PROTO_MAJOR 1
#define PROTO_MINOR \
	9 /* 1.2: error replies carry F_PHASE; 1.3: F_CAPS bits; 1.4: REC_REQUEST; 1.5: holders; 1.6: EXPORT_MANY; \
	   * 1.7: file content; 1.8: F_GENERATION; 1.9: F_CRC32C */
#define PROTO_HEADER_LEN 24
#define PROTO_REC_HEADER_LEN 6
/* Sanity maximum of one payload (bytes), checked before any allocation. */
#define PROTO_MAX_PAYLOAD (256u << 20)
#define PROTO_FLAG_REPLY 1u

enum proto_op {
#define OP(name, value, kind, admitted, done, next) PROTO_OP_##name = value,
#include "cusnap/ops.def"
#undef OP
};

/* The shim's phase (DESIGN.md §6.1), as F_PHASE carries it. */
enum proto_phase {
	PROTO_PHASE_ACTIVE = 1,
	PROTO_PHASE_QUIESCED = 2,
	PROTO_PHASE_MULTICAST_DETACHED = 3,
	PROTO_PHASE_PREPARED = 4,
	PROTO_PHASE_CREATORS_RESTORED = 5,
	PROTO_PHASE_UNICAST_RESTORED = 6,
	PROTO_PHASE_FAILED = 7,
	PROTO_PHASE_MC_CREATED = 8,  /* multicast objects made anew by their creators */
	PROTO_PHASE_MC_IMPORTED = 9, /* imported by the others, devices re-added */
	PROTO_PHASE_RESTORED = 10,   /* binds and multicast mappings back: ready to RESUME */
	PROTO_PHASE_COUNT
};

/* What F_CONTENT carries (PREPARE). File content (1.7) is host content whose
 * bytes go to the file whose descriptor comes with PREPARE (and come back from
 * the one that comes with RESTORE_CREATORS), not to memory of the process. */
enum proto_content { PROTO_CONTENT_HOST = 1, PROTO_CONTENT_NATIVE = 2, PROTO_CONTENT_FILE = 3 };
/* The first minor version that serves file content. */
#define PROTO_MINOR_FILE 7
/* What F_ROLE carries. */
enum proto_role { PROTO_ROLE_CREATOR = 1, PROTO_ROLE_IMPORTER = 2 };
/* F_HANDLE_TYPES and F_SHARED_TYPES carry CUmemAllocationHandleType bits as
 * cuda.h numbers them (the shim checks these at compile time). */
enum proto_handle_type {
	PROTO_HANDLE_POSIX_FD = 0x1,
	PROTO_HANDLE_WIN32 = 0x2,
	PROTO_HANDLE_WIN32_KMT = 0x4,
	PROTO_HANDLE_FABRIC = 0x8,
};
/* Device ordinals on the wire (F_DEVICE, F_DEVICE_MAP, F_MC_ADDED) and in every
 * per-device table of the shim and the tools are below this. */
#define PROTO_MAX_DEVICES 64
/* What a caller waits for one participant's step unless told otherwise: the
 * node library's timeout_ms (src/node/settings.def) and the coordinator
 * command line's --timeout alike. */
#define PROTO_STEP_TIMEOUT_MS 30000

/* F_CAPS bits: optional operations a participant serves. A coordinator sends
 * such an operation only to a participant that set its bit. */
#define PROTO_CAP_MULTICAST (1ull << 0) /* PREPARE_MULTICAST, RESTORE_MULTICAST_* */
#define PROTO_CAP_HOLDERS (1ull << 1)   /* PREPARE's F_HOLD: an importer carries what its creator let go */
#define PROTO_CAPS_SHIM (PROTO_CAP_MULTICAST | PROTO_CAP_HOLDERS) /* what this shim serves */

enum proto_status {
	PROTO_OK = 0,
	PROTO_E_MAGIC = -1001,   /* not our protocol */
	PROTO_E_VERSION = -1002, /* major version mismatch */
	PROTO_E_OP = -1003,      /* unknown operation */
	PROTO_E_LENGTH = -1004,  /* a length field is out of range */
	PROTO_E_TRUNCATED = -1005,
	PROTO_E_FD = -1006, /* a descriptor came where none was expected (or none came) */
	PROTO_E_MALFORMED = -1007,
	PROTO_E_PHASE = -1008, /* wrong phase for the operation */
	PROTO_E_AUTH = -1009,  /* bad capability token */
	PROTO_E_NOT_FOUND = -1010,
	PROTO_E_DRIVER = -1011, /* a driver call failed; the message says which */
	PROTO_E_INTERNAL = -1012,
	PROTO_E_TIMEOUT = -1013,
	PROTO_E_IO = -1014,           /* the peer went away */
	PROTO_E_UNRESTORABLE = -1015, /* QUIESCE: the process holds what cannot be taken down and rebuilt */
};

/* Top-level record types. */
enum proto_rec_type {
	REC_HELLO = 1,
	REC_PARTICIPANT = 2,
	REC_ALLOCATION = 3,
	REC_MAPPING = 4,
	REC_ERROR = 5,
	REC_EXPORT = 6, /* EXPORT request: F_ALLOC_ID, F_TOKEN, F_ID and F_ENDPOINT (the redeemer), F_HOPS;
			 * reply: F_SIZE, F_MC_DEVICES */
	REC_RESULT = 7,
	REC_MULTICAST = 8, /* a multicast object this participant holds (DESIGN.md §8) */
	REC_MC_BIND = 9,   /* one of its binds made by this participant */
	REC_REQUEST = 10,  /* a lifecycle request's parameters (request.h; 1.4) */
};

/* Field types inside records. Units: sizes, offsets and addresses in bytes. */
enum proto_field {
	F_ID = 1,             /* 16 bytes: participant id */
	F_NSPID = 2,          /* u32 */
	F_PID = 3,            /* u32: pid as the shim sees itself */
	F_PHASE = 4,          /* u32: enum shim phase */
	F_ENDPOINT = 5,       /* string: the endpoint path in the participant's mount namespace */
	F_MAJOR_MIN = 6,      /* u32 */
	F_MAJOR_MAX = 7,      /* u32 */
	F_MINOR = 8,          /* u32 */
	F_CAPS = 9,           /* u64: capability bits */
	F_ALLOC_ID = 10,      /* 16 bytes */
	F_CREATOR = 11,       /* 16 bytes: creator participant id */
	F_ROLE = 12,          /* u32: 1 creator, 2 importer */
	F_SHARED = 13,        /* u32: 0 or 1 */
	F_SIZE = 14,          /* u64 */
	F_DEVICE = 15,        /* u32 (CUmemLocation id) */
	F_HANDLE_TYPES = 16,  /* u32: requested handle types */
	F_HANDLES = 17,       /* u32: live logical handles */
	F_MAPPINGS = 18,      /* u32 */
	F_KEY = 19,           /* u64: the record's key within its participant */
	F_SHARED_TYPES = 20,  /* u32: handle types it was exported as */
	F_ALLOC_FLAGS = 21,   /* u32: compressionType | gpuDirectRDMACapable << 8 | usage << 16 */
	F_ADDRESS = 22,       /* u64 */
	F_OFFSET = 23,        /* u64 */
	F_MAP_FLAGS = 24,     /* u64 */
	F_ACCESS = 25,        /* 12 bytes: location type u32 | location id u32 | flags u32; repeated */
	F_TOKEN = 26,         /* 16 bytes */
	F_MESSAGE = 27,       /* string */
	F_LOC_TYPE = 28,      /* u32: CUmemLocationType of the allocation */
	F_ALLOC_TYPE = 29,    /* u32: CUmemAllocationType */
	F_GRANULARITY = 30,   /* u64: bytes */
	F_CONTENT = 31,       /* u32: 1 host, 2 native, 3 file (PREPARE) */
	F_BYTES = 32,         /* u64: bytes copied (lifecycle results) */
	F_COUNT = 33,         /* u32: allocations handled (lifecycle results) */
	F_DETACHED = 34,      /* u32: 0 or 1: released by prepare, not yet restored */
	F_DEVICE_MAP = 35,    /* 8 bytes: old device ordinal u32 | new ordinal u32; repeated (RESTORE_CREATORS) */
	F_MC_USED = 36,       /* u64: the highest multicast offset bound or mapped */
	F_MC_DEVICES = 37,    /* u32: numDevices of the multicast object */
	F_MC_ADDED = 38,      /* u32: a device this participant added; repeated */
	F_MEMBER = 39,        /* 16 bytes: the bound allocation's id (absent: memory the shim does not track) */
	F_MEMBER_OFFSET = 40, /* u64 */
	F_BINDS = 41,         /* u32: multicast binds holding an allocation */
	F_MC_OFFSET = 42,     /* u64 */
	F_MC_REBUILD = 43,    /* 16 bytes: a multicast object to rebuild; repeated (RESTORE_MULTICAST*) */
	F_MC_IMPORTER = 44,   /* 16 bytes: a participant that imported this multicast object; repeated */
	F_HOLD = 45,   /* allocation id 16 | creator 16 | holder 16 | the holder's endpoint; repeated (PREPARE) */
	F_HOLDER = 46, /* u32: 0 or 1: this importer carries the allocation for the group (§6.2) */
	F_HOPS = 47,   /* u32: EXPORT forwarded by a creator that let go: served there or refused, never forwarded */
	F_GENERATION = 48, /* u64: tracked changes allowed so far (1.8; INSPECT's identity, a step's result) */
	F_CRC32C = 49,     /* u32: file content's file as PREPARE wrote it, holes as zeros (1.9; PREPARE's result) */
};

struct proto_header {
	uint32_t magic;
	uint16_t major;
	uint16_t minor;
	uint16_t op;
	uint16_t flags;
	uint32_t request_id;
	int32_t status;
	uint32_t payload_len;
};

void proto_header_pack(const struct proto_header *h, uint8_t out[PROTO_HEADER_LEN]);
/* Unpack and check magic, major version and length. Returns 0 or a proto_status. */
int proto_header_unpack(const uint8_t in[PROTO_HEADER_LEN], struct proto_header *h);
const char *proto_status_name(int status);
const char *proto_op_name(int op);
const char *proto_phase_name(uint32_t phase);

/* ---- building payloads ---- */
struct proto_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
	bool failed; /* an allocation failed: the buffer is unusable */
};

void pbuf_put(struct proto_buf *b, uint16_t type, const void *value, uint32_t len);
void pbuf_put_u32(struct proto_buf *b, uint16_t type, uint32_t v);
void pbuf_put_u64(struct proto_buf *b, uint16_t type, uint64_t v);
void pbuf_put_id(struct proto_buf *b, uint16_t type, const struct cusnap_id *id);
void pbuf_put_str(struct proto_buf *b, uint16_t type, const char *s);
/* Open a record whose value is the fields that follow; returns its offset for pbuf_end. */
size_t pbuf_begin(struct proto_buf *b, uint16_t type);
void pbuf_end(struct proto_buf *b, size_t at);
void pbuf_free(struct proto_buf *b);

/* ---- reading payloads ---- */
struct proto_rec {
	uint16_t type;
	uint32_t len;
	const uint8_t *value;
};

struct proto_iter {
	const uint8_t *p;
	const uint8_t *end;
	int error; /* PROTO_E_TRUNCATED when a record runs past the end */
};

void piter_init(struct proto_iter *it, const void *data, size_t len);
/* Next record; false at the end or on error (it->error). */
bool piter_next(struct proto_iter *it, struct proto_rec *rec);
/* Next record of one type, the others skipped; false at the end or on error. */
bool piter_next_of(struct proto_iter *it, uint16_t type, struct proto_rec *rec);
/* The fields of every record of one type (or of either of two types) in a
 * payload, in order. */
struct proto_field_iter {
	struct proto_iter recs, fields;
	uint16_t type, alt;
	bool inside;
	int error; /* a record or field ran past its end */
};

void pfield_init(struct proto_field_iter *it, const void *data, size_t len, uint16_t rec_type);
void pfield_init2(struct proto_field_iter *it, const void *data, size_t len, uint16_t rec_type, uint16_t alt);
bool pfield_next(struct proto_field_iter *it, struct proto_rec *field);

/* Typed values; each returns 0 or PROTO_E_LENGTH when the length is wrong. */
int prec_u32(const struct proto_rec *r, uint32_t *v);
int prec_u64(const struct proto_rec *r, uint64_t *v);
int prec_id(const struct proto_rec *r, struct cusnap_id *id);
/* Copy a string value (no NULs inside) into out; PROTO_E_LENGTH when it does not fit. */
int prec_str(const struct proto_rec *r, char *out, size_t outlen);

/* ---- messages on a socket ---- */
/* Milliseconds on the monotonic clock (the one clock for deadlines and timings). */
double now_ms(void);
/* Absolute deadline (CLOCK_MONOTONIC ms) timeout_ms from now; -1 = none. */
int64_t proto_deadline(int timeout_ms);
/* Close a client's connection once the peer has closed its end (its EOF, or
 * deadline): the peer's socket is gone when this returns, so that CRIU never
 * finds half a connection in a tree it dumps right after. */
void proto_close(int sock, int64_t deadline);
/* The most descriptors one message carries (the kernel's SCM_MAX_FD). */
#define PROTO_MAX_FDS 253
/* Send header + payload, with pass_fd (>= 0) attached by SCM_RIGHTS. Returns 0 or a proto_status. */
int proto_send(int sock, const struct proto_header *h, const void *payload, int pass_fd, int64_t deadline);
/* The same with nfds (<= PROTO_MAX_FDS) descriptors attached, in order. */
int proto_send_fds(int sock, const struct proto_header *h, const void *payload, const int *fds, size_t nfds,
		   int64_t deadline);
/* Receive one message. *payload is malloc'ed (NULL when empty). A descriptor that
 * arrives is stored in *fd when fd is non-NULL, else closed and PROTO_E_FD returned.
 * Returns 0 or a proto_status. */
int proto_recv(int sock, struct proto_header *h, uint8_t **payload, int *fd, int64_t deadline);
/* The same with up to maxfds descriptors stored in fds, in the order sent, and
 * their number in *nfds. More than maxfds: all closed, PROTO_E_FD. */
int proto_recv_fds(int sock, struct proto_header *h, uint8_t **payload, int *fds, size_t maxfds, size_t *nfds,
		   int64_t deadline);

#endif
