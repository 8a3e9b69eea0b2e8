/* SPDX-License-Identifier: MIT */
/* Who the coordinator sends the multicast steps to: only shims that set
 * PROTO_CAP_MULTICAST, never when no participant holds a multicast object, and
 * a refusal naming the participant and its protocol when one holds multicast
 * objects but does not serve the steps. */
#include <string.h>

#include "../../src/coordinator/fanout.h"
#include "../harness/test.h"

static void selection(void)
{
	struct topo_participant p[3];
	struct coord_target t[3];
	memset(p, 0, sizeof(p));
	for (int i = 0; i < 3; i++) {
		t[i].obs = t[i].ns = 100 + i;
		p[i].major_max = 1;
		p[i].minor = i == 2 ? 1 : PROTO_MINOR;
		p[i].caps = i == 2 ? 0 : PROTO_CAP_MULTICAST;
	}
	struct coord_report r = {0};
	bool out[3];
	/* No multicast object anywhere: nobody is sent the steps. */
	CHECK_EQ(mc_select(p, t, 3, NULL, out, &r), 0);
	/* Objects held by capable shims: those that serve the steps get them. */
	p[0].nmcs = 1;
	CHECK_EQ(mc_select(p, t, 3, NULL, out, &r), 2);
	CHECK(out[0] && out[1] && !out[2]);
	/* Only among the selected. */
	bool sel[3] = {true, false, true};
	CHECK_EQ(mc_select(p, t, 3, sel, out, &r), 1);
	CHECK(out[0] && !out[1] && !out[2]);
	/* An object held where the shim does not serve the steps: refused, named. */
	p[2].nmcs = 1;
	CHECK_EQ(mc_select(p, t, 3, NULL, out, &r), -1);
	CHECK(strstr(r.error, "participant 102") != NULL);
	CHECK(strstr(r.error, "protocol 1.1") != NULL);
}

int main(void)
{
	test_run("multicast steps only to the shims that serve them", selection);
	return test_done();
}
