/* SPDX-License-Identifier: MIT */
/* The countdown fault sweeps over cusnap checkpoint and restore with CRIU (sweep.h): the driver calls
 * each makes (one in ten in `make test`), in the creator and in an importer,
 * both content modes; a sample under the sanitizers, all of it in `make sweep`. */
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
	/* One fault case in ten in `make test` (each case is a CRIU dump and
	 * restore); `make sweep` takes them all. */
	setenv("CUSNAP_SWEEP_STRIDE", "10", 0);
	test_run("countdown sweeps over every driver call of checkpoint and restore", sweeps);
	return e2e_done();
}
