/* SPDX-License-Identifier: MIT */
/* Running a test under the shim, and comparing the shim's view with cuemu's. */
#ifndef CUSNAP_TESTS_SHIM_UTIL_H
#define CUSNAP_TESTS_SHIM_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../emu/emu_util.h"
#include "../harness/test.h"
#include "../../src/coordinator/coord.h"

extern char shim_ctl[PATH_MAX];

/* Re-exec this test under snapshot-cuda-vmm-launch with a fresh control directory. */
void shim_reexec(int argc, char **argv);

void shim_endpoint_of(pid_t pid, struct coord_target *t);

/* INSPECT a participant (this process by default). Returns 0 or a proto_status. */
int shim_inspect(pid_t pid, struct topo_participant *p);

/* cuemu's view of this process: live allocations and mapped bytes (its test
 * hooks; the mappings placed at their range are checked against
 * /proc/self/maps on the way). */
int cuemu_live_allocations(void);
unsigned long long cuemu_mapped_bytes(int placed);
int emu_live_allocs(void);

unsigned long long emu_mapped_bytes(void);

unsigned long long topo_mapped_bytes(const struct topo_participant *p);

/* The shim's tables agree with the driver: the same live allocations and mapped bytes. */
#define CHECK_VIEWS_EQUAL()                                                   \
	do {                                                                  \
		struct topo_participant p_;                                   \
		if (shim_inspect(0, &p_) == 0) {                              \
			CHECK_EQ(p_.nallocs, emu_live_allocs());              \
			CHECK_EQ(topo_mapped_bytes(&p_), emu_mapped_bytes()); \
			topo_free(&p_);                                       \
		} else {                                                      \
			CHECK(!"inspect failed");                             \
		}                                                             \
	} while (0)

/* The endpoint closes its side of a connection shortly after the client does:
 * the descriptor count, once it is back at want (or after 5 s). */
int shim_fds_settle(int want);

/* A baseline descriptor count: once it has stopped changing. */
int shim_fds_quiet(void);

/* Remove the control directory when everything passed; the exit status. */
int shim_done(void);

#endif
