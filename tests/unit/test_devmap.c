/* SPDX-License-Identifier: MIT */
/* Device maps (src/cusnap/devmap.c), as `cusnap restore --device-map` and the
 * CRIU plugin's device_map take them: UUID pairs, ordinal pairs, auto; a map
 * that changes nothing is none; partial maps, unknown GPUs, repeats and
 * malformed text refused, each with its reason. */
#include <string.h>

#include "../../src/node/node.h"
#include "../harness/test.h"

static CUuuid gpu(int n)
{
	CUuuid u;
	memset(u.bytes, 0x10 + n, sizeof(u.bytes));
	return u;
}

static const char *G0 = "GPU-10101010-1010-1010-1010-101010101010", *G1 = "GPU-11111111-1111-1111-1111-111111111111",
		  *G2 = "GPU-12121212-1212-1212-1212-121212121212";

static void maps(void)
{
	CUuuid had[2] = {gpu(0), gpu(1)}, here[3] = {gpu(1), gpu(2), gpu(0)};
	struct devmap m;
	char why[256], spec[256];
	/* UUIDs: swap 0 and 1 (here, GPU 0 is ordinal 2, GPU 1 ordinal 0). */
	snprintf(spec, sizeof(spec), "%s=%s,%s=%s", G0, G1, G1, G0);
	CHECK_EQ(devmap_parse(spec, had, 2, here, 3, &m, why, sizeof(why)), 0);
	CHECK_EQ(m.npairs, 2u);
	CHECK(!memcmp(m.pairs[0].oldUuid.bytes, had[0].bytes, 16) &&
	      !memcmp(m.pairs[0].newUuid.bytes, had[1].bytes, 16));
	CHECK_EQ(m.nordinals, 2u);
	CHECK_EQ(m.ordinals[0], 0);
	CHECK_EQ(m.ordinals[1], 2);
	/* Ordinals: the checkpoint's 0 onto this machine's 1 (GPU 2), 1 onto 2 (GPU 0). */
	CHECK_EQ(devmap_parse("0=1,1=2", had, 2, here, 3, &m, why, sizeof(why)), 0);
	CHECK_EQ(m.npairs, 2u);
	CHECK(!memcmp(m.pairs[0].newUuid.bytes, here[1].bytes, 16) &&
	      !memcmp(m.pairs[1].newUuid.bytes, here[2].bytes, 16));
	CHECK_EQ(m.ordinals[0], 1);
	CHECK_EQ(m.ordinals[1], 2);
	/* Mixed, and onto themselves: no map. */
	snprintf(spec, sizeof(spec), "0=%s,%s=0", G0, G1);
	CHECK_EQ(devmap_parse(spec, had, 2, here, 3, &m, why, sizeof(why)), 0);
	CHECK_EQ(m.npairs, 0u);
	CHECK_EQ(m.nordinals, 0u);
	/* auto: the GPUs that are here keep theirs; no map. */
	CHECK_EQ(devmap_parse("auto", had, 2, here, 3, &m, why, sizeof(why)), 0);
	CHECK_EQ(m.npairs, 0u);
	/* auto on another machine: in order onto the GPUs no one kept. */
	CUuuid other[3] = {gpu(5), gpu(0), gpu(6)};
	CHECK_EQ(devmap_parse("auto", had, 2, other, 3, &m, why, sizeof(why)), 0);
	CHECK_EQ(m.npairs, 2u);
	CHECK_EQ(m.ordinals[0], 1); /* GPU 0 is here: kept */
	CHECK_EQ(m.ordinals[1], 0); /* GPU 1 is not: the first free one */
	CHECK_EQ(devmap_parse("", had, 2, here, 3, &m, why, sizeof(why)), 0);
	CHECK_EQ(m.npairs, 0u);
}

static void refused(void)
{
	CUuuid had[2] = {gpu(0), gpu(1)}, here[2] = {gpu(1), gpu(0)}, one[1] = {gpu(0)};
	struct devmap m;
	char why[256], spec[256];
	static const struct {
		const char *spec, *says;
	} bad[] = {
		{"0=1", "GPU 1 of the checkpoint is not mapped"},
		{"0=1,0=0", "GPU 0 of the checkpoint is mapped more than once"},
		{"0=1,1=1", "GPU 1 here is named for GPUs 0 and 1 of the checkpoint"},
		{"0=1,2=0", "pair 2 names a GPU the checkpoint does not have"},
		{"0=1,1=7", "pair 2 names a GPU this machine does not have"},
		{"0=1,1", "pair 2 (\"1\") is not OLD=NEW"},
		{"0=x,1=0", "pair 1 (\"0=x\"): use GPU ordinals or UUIDs"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK_EQ(devmap_parse(bad[i].spec, had, 2, here, 2, &m, why, sizeof(why)), -1);
		if (!strstr(why, bad[i].says))
			test_fail(__FILE__, __LINE__, "%s: \"%s\" lacks \"%s\"", bad[i].spec, why, bad[i].says);
	}
	snprintf(spec, sizeof(spec), "%s=0,1=1", G2);
	CHECK_EQ(devmap_parse(spec, had, 2, here, 2, &m, why, sizeof(why)), -1);
	CHECK(strstr(why, "pair 1 names a GPU the checkpoint does not have") != NULL);
	CHECK_EQ(devmap_parse("auto", had, 2, one, 1, &m, why, sizeof(why)), -1);
	CHECK(strstr(why, "the checkpoint has 2 GPUs, this machine 1") != NULL);
	CHECK_EQ(devmap_parse("auto", NULL, 0, one, 1, &m, why, sizeof(why)), -1);
	CHECK(strstr(why, "records no GPUs") != NULL);
}

int main(void)
{
	test_run("device maps: UUIDs, ordinals, auto; onto themselves is no map", maps);
	test_run("device maps refused: partial, repeated, unknown GPUs, malformed", refused);
	return test_done();
}
