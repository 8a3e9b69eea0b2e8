/* SPDX-License-Identifier: MIT */
/* Who carries a shared allocation its creator let go (DESIGN.md §6.2), on
 * topologies built in memory: the importer first in (ns pid, pid) order, once
 * per allocation; none while the creator holds it; refusals for a partial group
 * and for an interposer too old to carry. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../harness/test.h"
#include "../../src/coordinator/coord.h"
#include "cusnap/proto.h"

#define MIB (1u << 20)
#define N 4

/* P0 created allocation A; P1..P3 imported it. P0 holds it unless released. */
struct fixture {
	struct coord_target t[N];
	struct topo_participant p[N];
	struct topo_alloc allocs[N];
	struct coord_holds h; /* what validate found */
	char err[600];
};

static struct cusnap_id id_of(uint8_t v)
{
	struct cusnap_id id = {{0}};
	for (size_t i = 0; i < sizeof(id.b); i++)
		id.b[i] = (uint8_t)(v + i); /* (equal halves would hash to 0, an empty slot) */
	return id;
}

static void fixture(struct fixture *f, bool released)
{
	memset(f, 0, sizeof(*f));
	for (int i = 0; i < N; i++) {
		/* ns pids: P1 300, P2 200, P3 200 (another namespace: pid breaks the tie). */
		static const int ns[N] = {100, 300, 200, 200}, obs[N] = {10, 11, 13, 12};
		f->t[i] = (struct coord_target){.obs = obs[i], .ns = ns[i]};
		f->allocs[i] = (struct topo_alloc){.key = 1,
						   .id = id_of(0xa0),
						   .creator = id_of(0x10),
						   .role = i == 0 ? PROTO_ROLE_CREATOR : PROTO_ROLE_IMPORTER,
						   .shared = 1,
						   .shared_types = PROTO_HANDLE_POSIX_FD,
						   .size = 2 * MIB,
						   .handles = 1,
						   .granularity = 2 * MIB};
		snprintf(f->p[i].endpoint, sizeof(f->p[i].endpoint), "/run/p%d.sock", i);
		f->p[i].id = id_of((uint8_t)(0x10 + i));
		f->p[i].caps = PROTO_CAPS_SHIM;
		f->p[i].minor = PROTO_MINOR;
		f->p[i].allocs = &f->allocs[i];
		f->p[i].nallocs = i == 0 && released ? 0 : 1;
	}
}

static int validate(struct fixture *f)
{
	return coord_validate(f->t, f->p, N, &f->h, f->err, sizeof(f->err));
}

static void creator_holds(void)
{
	struct fixture f;
	fixture(&f, false);
	CHECK_EQ(validate(&f), 0);
	CHECK_EQ(f.h.n, 0);
	CHECK(f.h.v == NULL);
}

static void first_importer_carries(void)
{
	struct fixture f;
	fixture(&f, true);
	CHECK_EQ(validate(&f), 0);
	CHECK_EQ(f.h.n, 1);
	if (f.h.n == 1) {
		/* ns 200 twice: the lower pid (12, P3) carries. */
		CHECK(id_equal(&f.h.v[0].holder, &f.p[3].id));
		CHECK(id_equal(&f.h.v[0].creator, &f.p[0].id));
		CHECK(id_equal(&f.h.v[0].alloc, &f.allocs[1].id));
		CHECK_EQ(f.h.v[0].endpoint_len, strlen("/run/p3.sock"));
		CHECK(!memcmp(f.h.v[0].endpoint, "/run/p3.sock", f.h.v[0].endpoint_len));
	}
	free(f.h.v);
	/* Without holds asked for, the same validation passes. */
	CHECK_EQ(coord_validate(f.t, f.p, N, NULL, f.err, sizeof(f.err)), 0);
}

static void refusals(void)
{
	struct fixture f;
	fixture(&f, true);
	/* The holder's interposer cannot carry: refused, naming it and the creator. */
	f.p[3].caps = PROTO_CAP_MULTICAST;
	f.p[3].minor = 4;
	CHECK_EQ(validate(&f), -1);
	CHECK_CONTAINS(f.err, "holds neither a handle nor a mapping");
	CHECK_CONTAINS(f.err, "participant 12 (ns 200) is too old");
	CHECK(f.h.v == NULL && f.h.n == 0);
	/* Nor the creator's (it must forward the exports it handed out). */
	fixture(&f, true);
	f.p[0].caps = PROTO_CAP_MULTICAST;
	CHECK_EQ(validate(&f), -1);
	CHECK_CONTAINS(f.err, "participant 10 (ns 100) is too old");
	/* Without the creator's process: a partial group, whoever holds. */
	fixture(&f, true);
	CHECK_EQ(coord_validate(f.t + 1, f.p + 1, N - 1, &f.h, f.err, sizeof(f.err)), -1);
	CHECK_CONTAINS(f.err, "partial group");
	/* Importers disagreeing with the holder are named as such. */
	fixture(&f, true);
	f.allocs[1].size = 4 * MIB;
	CHECK_EQ(validate(&f), -1);
	CHECK_CONTAINS(f.err, "importer and holder disagree");
}

int main(void)
{
	test_run("the creator holds: nobody else carries", creator_holds);
	test_run("the creator let go: the importer first in (ns pid, pid) order carries", first_importer_carries);
	test_run("holders refused: too old an interposer, a partial group, a disagreement", refusals);
	return test_done();
}
