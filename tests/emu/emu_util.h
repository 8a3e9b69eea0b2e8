/* SPDX-License-Identifier: MIT */
/* Helpers shared by the emulator tests. */
#ifndef CUSNAP_TESTS_EMU_UTIL_H
#define CUSNAP_TESTS_EMU_UTIL_H

#include <pthread.h>
#include <stdbool.h>

#include <cuda.h>

#define MiB ((size_t)1 << 20)

/* A host function (cuLaunchHostFunc) that holds its stream until the gate opens. */
struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool open;
};
#define GATE_INIT                                                          \
	{                                                                  \
		PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false \
	}

void CUDA_CB gate_fn(void *arg);

void gate_open(struct gate *g);

/* cuInit, then device dev's primary context current on this thread. */
CUresult emu_use_device(int dev);

CUmemAllocationProp emu_prop(int dev);

CUmemAccessDesc emu_access(int dev, CUmemAccess_flags flags);

/* Host memory on NUMA node 0, as NCCL allocates its shared host buffers. */
CUmemAllocationProp emu_host_prop(void);

CUmemAccessDesc emu_host_access(CUmemAccess_flags flags);

/* The minimum granularity of allocations with these properties (NULL:
 * device 0's, emu_prop(0)). */
size_t emu_granularity(const CUmemAllocationProp *p);
/* A new allocation of size bytes with properties *p, mapped at a new
 * reservation of its size (no access granted yet): the address, the handle
 * in *h (a failure is a test failure). */
CUdeviceptr emu_map_new(size_t size, const CUmemAllocationProp *p, CUmemGenericAllocationHandle *h);
/* A new allocation of size bytes on device 0 (its handle in *h) and a new
 * reservation of range bytes, nothing mapped: the reservation's address. */
CUdeviceptr emu_create_reserve(size_t size, size_t range, CUmemGenericAllocationHandle *h);
/* Map size bytes of a new allocation on dev at a new reservation, RW for dev. */
CUdeviceptr emu_map_rw(int dev, size_t size, CUmemGenericAllocationHandle *h);
/* Unmap, release the handle, free the reservation. */
void emu_unmap_free(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h);

void emu_pattern(unsigned char *p, size_t n, unsigned seed);

int emu_pattern_ok(const unsigned char *p, size_t n, unsigned seed);

#endif
