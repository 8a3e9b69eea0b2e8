/* SPDX-License-Identifier: MIT */
/* Multicast validation (DESIGN.md §8) and comparison, on topologies built in
 * memory: each rule refuses with its own message, and records survive the
 * protocol encoding (topo_decode). */
#include <string.h>

#include "../harness/test.h"
#include "../../src/coordinator/coord.h"
#include "cusnap/proto.h"

#define MIB (1u << 20)

/* Two participants: P0 created multicast object M over devices {0, 1} and
 * added device 0; P1 imported it and added device 1; each bound 2 MiB of its
 * own memory at offset 2 MiB x rank. */
struct fixture {
	struct coord_target t[2];
	struct topo_participant p[2];
	struct topo_alloc allocs[2];
	struct topo_mc mcs[2];
	struct topo_mc_bind binds[2];
	int32_t added[2];
	struct cusnap_id importers[2];
};

static struct cusnap_id id_of(uint8_t v)
{
	struct cusnap_id id = {{0}};
	memset(id.b, v, sizeof(id.b));
	return id;
}

static void fixture(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	struct cusnap_id m = id_of(0x4d);
	for (int i = 0; i < 2; i++) {
		f->t[i] = (struct coord_target){.obs = 100 + i, .ns = 100 + i};
		f->allocs[i] = (struct topo_alloc){.key = 1,
						   .id = id_of((uint8_t)(0xa0 + i)),
						   .creator = id_of((uint8_t)(0x10 + i)),
						   .role = 1,
						   .shared = 1,
						   .size = 2 * MIB,
						   .device = i,
						   .handles = 1,
						   .granularity = 2 * MIB,
						   .binds = 1};
		f->added[i] = i;
		f->mcs[i] = (struct topo_mc){.key = 2,
					     .id = m,
					     .creator = id_of(0x10),
					     .role = i == 0 ? 1 : 2,
					     .size = 4 * MIB,
					     .used = 4 * MIB,
					     .num_devices = 2,
					     .granularity = 2 * MIB,
					     .handles = 1,
					     .added = &f->added[i],
					     .nadded = 1};
		f->binds[i] = (struct topo_mc_bind){.key = 2,
						    .mc_id = m,
						    .device = i,
						    .mc_offset = (uint64_t)i * 2 * MIB,
						    .size = 2 * MIB,
						    .member = f->allocs[i].id};
		f->p[i] = (struct topo_participant){.id = id_of((uint8_t)(0x10 + i)),
						    .nspid = 100u + (unsigned)i,
						    .allocs = &f->allocs[i],
						    .nallocs = 1,
						    .mcs = &f->mcs[i],
						    .nmcs = 1,
						    .binds = &f->binds[i],
						    .nbinds = 1};
	}
	f->importers[0] = id_of(0x11);
	f->mcs[0].importers = f->importers;
	f->mcs[0].nimporters = 1;
}

static int validate(struct fixture *f, size_t n, char *err)
{
	return coord_validate(f->t, f->p, n, NULL, err, 600);
}

#define REFUSED(f, n, want)                                                                         \
	do {                                                                                        \
		char err_[600] = "";                                                                \
		CHECK_EQ(validate((f), (n), err_), -1);                                             \
		if (!strstr(err_, (want)))                                                          \
			test_fail(__FILE__, __LINE__, "refusal \"%s\" lacks \"%s\"", err_, (want)); \
	} while (0)

static void complete_group_passes(void)
{
	struct fixture f;
	fixture(&f);
	char err[600] = "";
	CHECK_EQ(validate(&f, 2, err), 0);
	if (err[0])
		printf("%s\n", err);
}

static void refusals(void)
{
	struct fixture f;
	fixture(&f);
	f.mcs[1].role = 1;
	f.mcs[1].creator = f.p[1].id;
	REFUSED(&f, 2, "has two creators");

	fixture(&f);
	memset(&f.binds[1].member, 0, sizeof(f.binds[1].member));
	REFUSED(&f, 2, "binds memory the shim does not track");

	fixture(&f);
	f.binds[0].member_offset = 2 * MIB;
	REFUSED(&f, 2, "lies outside the bound allocation");

	fixture(&f);
	f.binds[0].mc_offset = MIB;
	REFUSED(&f, 2, "not aligned to the multicast granularity");

	fixture(&f);
	f.mcs[1].nadded = 0;
	f.binds[1].device = 0;
	f.binds[1].mc_offset = 2 * MIB; /* bound on device 0, which P0 added */
	REFUSED(&f, 2, "added 1 of its 2 devices");

	fixture(&f);
	f.p[1].nbinds = 0;
	f.allocs[1].binds = 0;
	REFUSED(&f, 2, "device 1 was added but nothing is bound on it");

	fixture(&f);
	f.added[1] = 0;
	REFUSED(&f, 2, "device 0 was added twice");

	fixture(&f);
	f.mcs[1].size = 8 * MIB;
	REFUSED(&f, 2, "disagree on it");

	/* Partial groups: the importer without its creator; an importer left out. */
	fixture(&f);
	struct fixture g;
	fixture(&g);
	g.t[0] = f.t[1];
	g.p[0] = f.p[1];
	g.p[0].allocs = &f.allocs[1];
	g.p[0].mcs = &f.mcs[1];
	g.p[0].binds = &f.binds[1];
	REFUSED(&g, 1, "which is not in the group (partial group)");
	fixture(&f);
	f.importers[1] = id_of(0x77);
	f.mcs[0].nimporters = 2;
	REFUSED(&f, 2, "is not in the group (partial group)");
	fixture(&f);
	f.p[1].nmcs = 0;
	f.p[1].nbinds = 0;
	REFUSED(&f, 1, "");
	f.mcs[0].nimporters = 1;
	REFUSED(&f, 2, "which no longer holds it (partial group)");
}

/* A participant's records through the wire encoding (topo.c's own encoders)
 * and back. */
static void encode(struct proto_buf *b, const struct fixture *f, int i)
{
	topo_encode_identity(b, REC_PARTICIPANT, &f->p[i]);
	topo_encode_mc(b, &f->mcs[i]);
	topo_encode_bind(b, &f->binds[i]);
}

static void decode_and_compare(void)
{
	struct fixture f;
	fixture(&f);
	struct proto_buf b = {0};
	encode(&b, &f, 0);
	struct topo_participant d;
	CHECK_EQ(topo_decode(b.data, b.len, &d), 0);
	CHECK_EQ(d.nmcs, 1);
	CHECK_EQ(d.nbinds, 1);
	CHECK_EQ(d.mcs[0].nadded, 1);
	CHECK_EQ(d.mcs[0].nimporters, 1);
	CHECK(id_equal(&d.mcs[0].importers[0], &f.importers[0]));
	CHECK_EQ(d.mcs[0].used, 4 * MIB);
	CHECK(id_equal(&d.binds[0].member, &f.allocs[0].id));
	char err[600] = "";
	/* The decoded records compare equal to the fixture's. */
	CHECK_EQ(coord_compare_multicast(&f.p[0], &d, NULL, 0, err, sizeof(err)), 0);
	/* A bind at another offset, or another device set, differs. */
	f.binds[0].mc_offset = 6 * MIB;
	CHECK_EQ(coord_compare_multicast(&f.p[0], &d, NULL, 0, err, sizeof(err)), -1);
	CHECK(strstr(err, "bind at offset") != NULL);
	f.binds[0].mc_offset = 0;
	f.added[0] = 1;
	CHECK_EQ(coord_compare_multicast(&f.p[0], &d, NULL, 0, err, sizeof(err)), -1);
	/* ... unless the devices were remapped at restore (1 -> 0). */
	f.binds[0].device = 1;
	int map[2] = {1, 0};
	CHECK_EQ(coord_compare_multicast(&f.p[0], &d, map, 2, err, sizeof(err)), 0);
	topo_free(&d);
	/* Truncated records are refused, not half read. */
	CHECK(topo_decode(b.data, b.len - 3, &d) != 0);
	pbuf_free(&b);
}

int main(void)
{
	test_run("a complete group passes", complete_group_passes);
	test_run("each multicast rule refuses with its own message", refusals);
	test_run("records through the encoding; comparison with a device map", decode_and_compare);
	return test_done();
}
