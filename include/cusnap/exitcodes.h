/* SPDX-License-Identifier: MIT */
/* Exit codes of cusnap, snapshot-cuda-vmm and snapshot-cuda-vmm-launch
 * (DESIGN.md §9, §10). Scripts and the agent act on these numbers. */
#ifndef CUSNAP_EXITCODES_H
#define CUSNAP_EXITCODES_H

#define EX_OK 0
#define EX_LEFT_RUNNING 1 /* failed; the workload runs as before */
#define EX_TERMINATED 2   /* failed; the workload was terminated or its state is unknown */
#define EX_USAGE 64       /* bad arguments (sysexits) */
#define EX_BUSY 75        /* another command holds the tree; nothing changed (sysexits' EX_TEMPFAIL) */
#define EX_UNAVAILABLE 69 /* a required component is missing (sysexits) */
#define EX_SOFTWARE 70    /* CUSNAP_FD_CHECK found a descriptor left open (sysexits) */

#endif
