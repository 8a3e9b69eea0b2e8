/* SPDX-License-Identifier: MIT */
/* Descriptor-leak checks for the tools (CUSNAP_FD_CHECK=1, set by the test
 * suites): every failure path a test drives is then also a leak check. */
#ifndef CUSNAP_FDCHECK_H
#define CUSNAP_FDCHECK_H

/* At the start of main: the descriptors open now are not the tool's. */
void fd_check_start(void);
/* After loading the driver: what it opened for itself is not the tool's either. */
void fd_check_exempt_open(void);
/* At the end of main: every descriptor opened since and still open is named on
 * stderr (prefixed by tool), and the exit code becomes 70; else rc. */
int fd_check_end(const char *tool, int rc);

#endif
