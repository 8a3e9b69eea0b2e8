/* SPDX-License-Identifier: MIT */
/* The control directory (DESIGN.md §3): where endpoints and the workload's
 * ready-for-snapshot / snapshot-complete / restore-complete files live. */
#ifndef CUSNAP_CONTROL_H
#define CUSNAP_CONTROL_H

/* What lives there: each participant's endpoint (CONTROL_ENDPOINT_FMT with its
 * PID in its innermost namespace) and the workload's three control files. */
#define CONTROL_ENDPOINT_FMT "cuda-vmm-%d.sock"
#define CONTROL_READY "ready-for-snapshot"
#define CONTROL_SNAPSHOT_DONE "snapshot-complete"
#define CONTROL_RESTORE_DONE "restore-complete"
#define CONTROL_DIR_DEFAULT "/snapshot-control"
/* Set to 1 by the launcher in the workload's environment (the agent's
 * contract): a CUDA process that carries it but has no endpoint is a partial
 * interposition (fail closed). */
#define INTERPOSE_MARKER "DYN_SNAPSHOT_CUDA_VMM_INTERPOSE"
/* NVIDIA's checkpoint job: the job file a workload in one carries in its environment (driver 590 and later). */
#define CONTROL_JOB_ENV "CUDA_CHECKPOINT_JOB_FILE"

/* $SNAPSHOT_CONTROL_DIR, else the deprecated $DYN_SNAPSHOT_CONTROL_DIR, else
 * /snapshot-control. The string belongs to the environment (or is static). */
const char *control_dir_from_env(void);

#endif
