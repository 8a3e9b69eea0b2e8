/* SPDX-License-Identifier: MIT */
/* The countdown fault sweeps over a multicast group's suspend and resume (sweep.h): every driver call
 * each makes, in the creator and in an importer, both content modes; a sample
 * under the sanitizers, all of it in `make sweep`. */
#include "sweep.h"

int main(void)
{
	return sweep_suspend_resume_main("sweep-mc", &(struct sweep){.op = SWEEP_SUSPEND, .multicast = true},
					 " (multicast)",
					 "countdown sweeps over every driver call of a multicast group's suspend and "
					 "resume");
}
