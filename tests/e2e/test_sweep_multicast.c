/* SPDX-License-Identifier: MIT */
/* The countdown fault sweeps over a multicast group's suspend and resume (sweep.h): every driver call
 * each makes, in the creator and in an importer, both content modes; a sample
 * under the sanitizers, all of it in `make sweep`. */
#include "sweep.h"

static void sweeps(void)
{
	sweep_pair(&(struct sweep){.op = SWEEP_SUSPEND, .multicast = true}, SWEEP_RESUME, false, " (multicast)");
}

int main(void)
{
	e2e_init("sweep-mc");
	test_run("countdown sweeps over every driver call of a multicast group's suspend and resume", sweeps);
	return e2e_done();
}
