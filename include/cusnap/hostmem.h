/* SPDX-License-Identifier: MIT */
/* Host buffers for saved device bytes (the shim's host-content arena, cuemu's
 * checkpoint images). They are filled at once, so they are populated when made
 * (one system call instead of a page fault per page, the dominant cost of a
 * large copy into fresh memory, and far more so in virtual machines), and made
 * of transparent huge pages where the kernel allows (a fault, a TLB entry and
 * a pinned-extent per 2 MiB instead of per 4 KiB); otherwise, silently, of
 * ordinary pages. CUSNAP_HUGEPAGES=0 asks for ordinary pages (to measure). */
#ifndef CUSNAP_HOSTMEM_H
#define CUSNAP_HOSTMEM_H

#include <stddef.h>

/* size bytes of private, populated memory, or NULL; each system call it makes
 * is counted in counter slot (counters.h). Free with hostmem_free. */
void *hostmem_alloc(size_t size, unsigned slot);
void hostmem_free(void *p, size_t size, unsigned slot);

#endif
