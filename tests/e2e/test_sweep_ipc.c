/* SPDX-License-Identifier: MIT */
/* The countdown fault sweeps over a legacy IPC group's suspend and resume (sweep.h): every driver call
 * each makes, in the creator and in an importer, both content modes; a sample
 * under the sanitizers, all of it in `make sweep`. */
#include "sweep.h"

int main(void)
{
	return sweep_suspend_resume_main("sweep-ipc", &(struct sweep){.op = SWEEP_SUSPEND, .ipc = true},
					 " (legacy IPC)",
					 "countdown sweeps over every driver call of a legacy IPC group's suspend and "
					 "resume");
}
