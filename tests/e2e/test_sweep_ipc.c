/* SPDX-License-Identifier: MIT */
/* The countdown fault sweeps over a legacy IPC group's suspend and resume (sweep.h): every driver call
 * each makes, in the creator and in an importer, both content modes; a sample
 * under the sanitizers, all of it in `make sweep`. */
#include "sweep.h"

static void sweeps(void)
{
	sweep_pair(&(struct sweep){.op = SWEEP_SUSPEND, .ipc = true}, SWEEP_RESUME, false, " (legacy IPC)");
}

int main(void)
{
	e2e_init("sweep-ipc");
	test_run("countdown sweeps over every driver call of a legacy IPC group's suspend and resume", sweeps);
	return e2e_done();
}
