/* SPDX-License-Identifier: MIT */
/* What costs on a GPU node, counted (DESIGN.md §11): with CUSNAP_COUNT=FILE,
 * every process of a run adds to one table of 64-bit counters in FILE (shared
 * memory, atomic adds), so that a benchmark reads them between stages. Without
 * it, count_add does nothing. cuemu counts its driver calls (one slot per entry
 * point, in emu/api.def's order) and the mapping syscalls its modelling makes;
 * the shim counts its own mapping syscalls and the requests it sends to other
 * shims' endpoints; the coordinator its requests. */
#ifndef CUSNAP_COUNTERS_H
#define CUSNAP_COUNTERS_H

enum count_slot {
	COUNT_EMU_MMAP, /* cuemu's mmap, munmap, mprotect, madvise */
	COUNT_EMU_MUNMAP,
	COUNT_EMU_MPROTECT,
	COUNT_EMU_MADVISE,
	COUNT_SHIM_MAP,         /* the shim's own mapping syscalls (its host arena) */
	COUNT_SHIM_REQUESTS,    /* requests a shim sent to another shim (EXPORT), pipelined or not */
	COUNT_SHIM_CONNECTIONS, /* connections a shim opened to another shim */
	COUNT_COORD_REQUESTS,   /* coordinator requests: one connection, request and reply each */
	COUNT_CALLS,            /* + an entry point's index in emu/api.def */
	COUNT_MAX_CALLS = 256,
	COUNT_SLOTS = COUNT_CALLS + COUNT_MAX_CALLS,
	COUNT_NONE = COUNT_SLOTS, /* what is not counted */
};

void count_add(unsigned slot);

#endif
