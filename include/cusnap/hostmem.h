/* SPDX-License-Identifier: MIT */
/* Host buffers for saved device bytes. They are filled at once, so they are
 * populated when made: one system call instead of a page fault per page (page
 * faults are the dominant cost of a large copy into fresh memory, and far more
 * so in virtual machines). */
#ifndef CUSNAP_HOSTMEM_H
#define CUSNAP_HOSTMEM_H

#include <stddef.h>
#include <sys/mman.h>

/* size bytes of private, populated memory, or NULL. Free with hostmem_free. */
static inline void *hostmem_alloc(size_t size)
{
	void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1,
		       0);
	return p == MAP_FAILED ? NULL : p;
}

static inline void hostmem_free(void *p, size_t size)
{
	if (p)
		munmap(p, size ? size : 1);
}

#endif
