/* SPDX-License-Identifier: MIT */
/* The countdown fault sweeps over cusnap checkpoint and restore with CRIU (sweep.h): every driver call
 * each makes, in the creator and in an importer, both content modes; a sample
 * under the sanitizers, all of it in `make sweep`. */
#include "sweep.h"

static char criu[PATH_MAX];

static void sweeps(void)
{
	/* checkpoint's driver calls are suspend's (swept there): one role per mode */
	sweep_pair(&(struct sweep){.op = SWEEP_CHECKPOINT, .criu = criu}, SWEEP_RESTORE, true, "");
}

int main(void)
{
	test_require_criu(criu, sizeof(criu));
	e2e_init("sweep-ckpt");
	test_run("countdown sweeps over every driver call of checkpoint and restore", sweeps);
	e2e_done();
	return test_done();
}
