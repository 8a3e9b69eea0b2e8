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

/* The one rule for a workload's control directory, wherever its environment
 * is read (the shim and the tool in their own, the CRIU plugin in the
 * workload's): SNAPSHOT_CONTROL_DIR, else the deprecated
 * DYN_SNAPSHOT_CONTROL_DIR, else /snapshot-control; a value that is not an
 * absolute path counts as unset. The values given (NULL: unset); the one
 * chosen is one of them or static. */
#define CONTROL_DIR_VAR "SNAPSHOT_CONTROL_DIR"
#define CONTROL_DIR_VAR_DEPRECATED "DYN_SNAPSHOT_CONTROL_DIR"
const char *control_dir_named(const char *current, const char *deprecated);
/* The same over this process's environment. */
const char *control_dir_from_env(void);

#endif
