/* SPDX-License-Identifier: MIT */
/* The control directory (SYSTEM.md §3): where endpoints and the workload's
 * ready-for-snapshot / snapshot-complete / restore-complete files live. */
#ifndef CUSNAP_CONTROL_H
#define CUSNAP_CONTROL_H

/* $SNAPSHOT_CONTROL_DIR, else the deprecated $DYN_SNAPSHOT_CONTROL_DIR, else
 * /snapshot-control. The string belongs to the environment (or is static). */
const char *control_dir_from_env(void);

#endif
