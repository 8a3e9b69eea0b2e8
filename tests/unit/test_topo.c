/* SPDX-License-Identifier: MIT */
/* The record codec (topo.c): for every record type a golden vector (the bytes
 * the encoder writes, which a shim of this protocol version must send) and a
 * round trip through the decoder. */
#include <stdio.h>
#include <string.h>

#include "../harness/test.h"
#include "cusnap/proto.h"
#include "cusnap/topo.h"

/* Written once from the encoder and checked by hand against proto.h: type u16,
 * length u32, then the fields in the encoder's order, all little-endian. */
#define GOLDEN_IDENTITY                                                                            \
	"02006f000000010010000000a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a10200040000002a000000030004000000" \
	"9210000004000400000004000000060004000000010000000700040000000100000008000400000003000000" \
	"09000800000001000000000000000500090000002f632f652e736f636b"
#define GOLDEN_ALLOC                                                                               \
	"0300ce00000013000800000007000000000000000a0010000000b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b20b00" \
	"10000000c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c30c0004000000010000000d00040000000100000014000400" \
	"0000010000000e000800000000002000000000001d0004000000010000001c0004000000010000000f000400" \
	"0000030000001000040000000900000015000400000001020100110004000000020000001200040000000500" \
	"00001e000800000000002000000000002200040000000100000029000400000001000000"
#define GOLDEN_MAPPING                                                                             \
	"04008a00000013000800000007000000000000000a0010000000b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b21600" \
	"0800000000002000007f00000e00080000000000100000000000170008000000000010000000000018000800" \
	"000000000000000000002200040000000000000019000c00000001000000000000000300000019000c000000" \
	"01000000ffffffff01000000"
#define GOLDEN_MC                                                                                  \
	"0800ea00000013000800000009000000000000000a0010000000f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f60b00" \
	"10000000c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c30c0004000000010000000e00080000000000400000000000" \
	"2400080000000000200000000000250004000000020000001000040000000100000014000400000001000000" \
	"1e00080000000000200000000000110004000000010000001200040000000100000022000400000000000000" \
	"26000400000000000000260004000000020000002c0010000000d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d42c00" \
	"10000000e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5"
#define GOLDEN_BIND                                                                                \
	"09008600000013000800000009000000000000000a0010000000f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f60f00" \
	"04000000020000002a000800000000002000000000000e00080000000000200000000000270010000000b2b2" \
	"b2b2b2b2b2b2b2b2b2b2b2b2b2b2280008000000000000000000000016000800000000004000007f00002200" \
	"0400000001000000"

static struct cusnap_id id_of(uint8_t b)
{
	struct cusnap_id id;
	memset(id.b, b, sizeof(id.b));
	return id;
}

/* The encoding as hex, for the golden comparison (and its message). */
static void hex_of(const struct proto_buf *b, char *out, size_t len)
{
	out[0] = '\0';
	for (size_t i = 0; i < b->len && 2 * i + 3 <= len; i++)
		snprintf(out + 2 * i, 3, "%02x", b->data[i]);
}

static void check_golden(const struct proto_buf *b, const char *golden, const char *what)
{
	char hex[4096];
	CHECK(!b->failed);
	hex_of(b, hex, sizeof(hex));
	if (strcmp(hex, golden) != 0)
		test_fail(__FILE__, __LINE__, "%s: encoded as\n%s\nwant\n%s", what, hex, golden);
}

/* The decoded record encodes to the same bytes: nothing lost either way. */
static void check_same(const struct proto_buf *a, const struct proto_buf *b, const char *what)
{
	if (a->len != b->len || memcmp(a->data, b->data, a->len) != 0)
		test_fail(__FILE__, __LINE__, "%s: decoded and encoded again, the bytes differ", what);
}

/* Decode b, which must hold exactly one participant's worth of records. */
static struct topo_participant decoded(const struct proto_buf *b)
{
	struct topo_participant p;
	CHECK_EQ(topo_decode(b->data, b->len, &p), PROTO_OK);
	return p;
}

static void identity(void)
{
	static struct topo_participant p = {.nspid = 42,
					    .pid = 4242,
					    .phase = PROTO_PHASE_PREPARED,
					    .major_min = 1,
					    .major_max = 1,
					    .minor = 3,
					    .caps = PROTO_CAP_MULTICAST,
					    .endpoint = "/c/e.sock"};
	p.id = id_of(0xa1);
	struct proto_buf b = {0};
	topo_encode_identity(&b, REC_PARTICIPANT, &p);
	check_golden(&b, GOLDEN_IDENTITY, "identity");
	struct topo_participant q = decoded(&b);
	CHECK(id_equal(&q.id, &p.id));
	CHECK_EQ(q.nspid, 42);
	CHECK_EQ(q.pid, 4242);
	CHECK_EQ(q.phase, PROTO_PHASE_PREPARED);
	CHECK_EQ(q.major_min, 1);
	CHECK_EQ(q.major_max, 1);
	CHECK_EQ(q.minor, 3);
	CHECK_EQ(q.caps, PROTO_CAP_MULTICAST);
	CHECK_STR(q.endpoint, "/c/e.sock");
	topo_free(&q);
	pbuf_free(&b);
}

static void allocation(void)
{
	struct topo_alloc a = {.key = 7,
			       .id = id_of(0xb2),
			       .creator = id_of(0xc3),
			       .role = PROTO_ROLE_CREATOR,
			       .shared = 1,
			       .shared_types = PROTO_HANDLE_POSIX_FD,
			       .size = 2 << 20,
			       .alloc_type = 1,
			       .loc_type = 1,
			       .device = 3,
			       .handle_types = PROTO_HANDLE_POSIX_FD | PROTO_HANDLE_FABRIC,
			       .alloc_flags = 0x10201,
			       .handles = 2,
			       .mappings = 5,
			       .granularity = 2 << 20,
			       .detached = 1,
			       .binds = 1};
	struct proto_buf b = {0};
	topo_encode_alloc(&b, &a);
	check_golden(&b, GOLDEN_ALLOC, "allocation");
	struct topo_participant q = decoded(&b);
	CHECK_EQ(q.nallocs, 1);
	if (q.nallocs == 1) {
		struct proto_buf again = {0};
		topo_encode_alloc(&again, &q.allocs[0]);
		check_same(&b, &again, "allocation");
		pbuf_free(&again);
		CHECK_EQ(q.allocs[0].device, 3);
		CHECK_EQ(q.allocs[0].alloc_flags, 0x10201);
		CHECK(id_equal(&q.allocs[0].creator, &a.creator));
	}
	topo_free(&q);
	pbuf_free(&b);
}

static void mapping(void)
{
	struct topo_access acc[2] = {{.loc_type = 1, .loc_id = 0, .flags = 3},
				     {.loc_type = 1, .loc_id = -1, .flags = 1}};
	struct topo_mapping m = {.key = 7,
				 .alloc_id = id_of(0xb2),
				 .address = 0x7f0000200000,
				 .size = 1 << 20,
				 .offset = 1 << 20,
				 .flags = 0,
				 .access = acc,
				 .naccess = 2,
				 .detached = 0};
	struct proto_buf b = {0};
	topo_encode_mapping(&b, &m);
	check_golden(&b, GOLDEN_MAPPING, "mapping");
	struct topo_participant q = decoded(&b);
	CHECK_EQ(q.nmaps, 1);
	if (q.nmaps == 1) {
		const struct topo_mapping *g = &q.maps[0];
		CHECK_EQ(g->key, 7);
		CHECK(id_equal(&g->alloc_id, &m.alloc_id));
		CHECK_EQ(g->address, m.address);
		CHECK_EQ(g->size, m.size);
		CHECK_EQ(g->offset, m.offset);
		CHECK_EQ(g->naccess, 2);
		CHECK(g->naccess == 2 && memcmp(g->access, acc, sizeof(acc)) == 0);
		struct proto_buf again = {0};
		topo_encode_mapping(&again, g);
		check_same(&b, &again, "mapping");
		pbuf_free(&again);
	}
	topo_free(&q);
	pbuf_free(&b);
}

static void multicast(void)
{
	int32_t added[2] = {0, 2};
	struct cusnap_id importers[2] = {id_of(0xd4), id_of(0xe5)};
	struct topo_mc m = {.key = 9,
			    .id = id_of(0xf6),
			    .creator = id_of(0xc3),
			    .role = PROTO_ROLE_CREATOR,
			    .size = 4 << 20,
			    .used = 2 << 20,
			    .num_devices = 2,
			    .handle_types = PROTO_HANDLE_POSIX_FD,
			    .shared_types = PROTO_HANDLE_POSIX_FD,
			    .granularity = 2 << 20,
			    .handles = 1,
			    .mappings = 1,
			    .detached = 0,
			    .added = added,
			    .nadded = 2,
			    .importers = importers,
			    .nimporters = 2};
	struct proto_buf b = {0};
	topo_encode_mc(&b, &m);
	check_golden(&b, GOLDEN_MC, "multicast");
	struct topo_participant q = decoded(&b);
	CHECK_EQ(q.nmcs, 1);
	if (q.nmcs == 1) {
		struct topo_mc g = q.mcs[0];
		CHECK_EQ(g.nadded, 2);
		CHECK(g.nadded == 2 && memcmp(g.added, added, sizeof(added)) == 0);
		CHECK_EQ(g.nimporters, 2);
		CHECK(g.nimporters == 2 && memcmp(g.importers, importers, sizeof(importers)) == 0);
		CHECK_EQ(g.used, 2 << 20);
		struct proto_buf again = {0};
		topo_encode_mc(&again, &g);
		check_same(&b, &again, "multicast");
		pbuf_free(&again);
	}
	topo_free(&q);
	pbuf_free(&b);
}

static void bind(void)
{
	struct topo_mc_bind x = {.key = 9,
				 .mc_id = id_of(0xf6),
				 .device = 2,
				 .mc_offset = 2 << 20,
				 .size = 2 << 20,
				 .member = id_of(0xb2),
				 .member_offset = 0,
				 .member_va = 0x7f0000400000,
				 .detached = 1};
	struct proto_buf b = {0};
	topo_encode_bind(&b, &x);
	check_golden(&b, GOLDEN_BIND, "multicast bind");
	struct topo_participant q = decoded(&b);
	CHECK_EQ(q.nbinds, 1);
	if (q.nbinds == 1) {
		struct proto_buf again = {0};
		topo_encode_bind(&again, &q.binds[0]);
		check_same(&b, &again, "multicast bind");
		pbuf_free(&again);
		CHECK(id_equal(&q.binds[0].member, &x.member));
		CHECK_EQ(q.binds[0].member_va, 0x7f0000400000);
	}
	topo_free(&q);
	/* Memory the shim does not track: no F_MEMBER, decoded as the zero id. */
	x.member = (struct cusnap_id){{0}};
	pbuf_free(&b);
	topo_encode_bind(&b, &x);
	q = decoded(&b);
	CHECK(q.nbinds == 1 && id_is_zero(&q.binds[0].member));
	topo_free(&q);
	pbuf_free(&b);
}

/* A whole participant through topo_encode and back: every record kept, in order. */
static void whole_participant(void)
{
	struct topo_alloc allocs[2] = {{.key = 1, .id = id_of(1), .role = PROTO_ROLE_CREATOR, .size = 1 << 21},
				       {.key = 2, .id = id_of(2), .role = PROTO_ROLE_IMPORTER, .size = 1 << 22}};
	struct topo_mapping maps[1] = {{.key = 1, .alloc_id = id_of(1), .address = 1 << 30, .size = 1 << 21}};
	static struct topo_participant p = {.nspid = 5, .endpoint = "/e"};
	p.allocs = allocs;
	p.nallocs = 2;
	p.maps = maps;
	p.nmaps = 1;
	struct proto_buf b = {0};
	topo_encode(&b, &p);
	struct topo_participant q = decoded(&b);
	CHECK_EQ(q.nspid, 5);
	CHECK_EQ(q.nallocs, 2);
	CHECK(q.nallocs == 2 && q.allocs[1].role == PROTO_ROLE_IMPORTER && q.allocs[1].size == 1 << 22);
	CHECK_EQ(q.nmaps, 1);
	CHECK(q.nmaps == 1 && q.maps[0].address == 1 << 30);
	struct proto_buf again = {0};
	topo_encode(&again, &q);
	check_same(&b, &again, "participant");
	pbuf_free(&again);
	topo_free(&q);
	pbuf_free(&b);
}

int main(void)
{
	test_run("identity: golden vector and round trip", identity);
	test_run("allocation: golden vector and round trip", allocation);
	test_run("mapping: golden vector and round trip, access list", mapping);
	test_run("multicast: golden vector and round trip, added devices and importers", multicast);
	test_run("multicast bind: golden vector and round trip, untracked member", bind);
	test_run("a whole participant round trip", whole_participant);
	return test_done();
}
