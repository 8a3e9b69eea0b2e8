/* SPDX-License-Identifier: MIT */
/* The emulator tests' helpers (tests/emu/emu_util.h), compiled once. */
#include "../emu/emu_util.h"
#include "test.h"

void CUDA_CB gate_fn(void *arg)
{
	struct gate *g = arg;
	pthread_mutex_lock(&g->mu);
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

void gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->mu);
	g->open = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

CUresult emu_use_device(int dev)
{
	CUcontext ctx;
	CUresult rc = cuInit(0);
	if (rc == CUDA_SUCCESS)
		rc = cuDevicePrimaryCtxRetain(&ctx, dev);
	if (rc == CUDA_SUCCESS)
		rc = cuCtxSetCurrent(ctx);
	return rc;
}

CUmemAllocationProp emu_prop(int dev)
{
	CUmemAllocationProp p = {0};
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = dev;
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	return p;
}

CUmemAccessDesc emu_access(int dev, CUmemAccess_flags flags)
{
	CUmemAccessDesc d = {0};
	d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	d.location.id = dev;
	d.flags = flags;
	return d;
}

CUmemAllocationProp emu_host_prop(void)
{
	CUmemAllocationProp p = emu_prop(0);
	p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	p.location.id = 0;
	return p;
}

CUmemAccessDesc emu_host_access(CUmemAccess_flags flags)
{
	CUmemAccessDesc d = {0};
	d.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	d.location.id = 0;
	d.flags = flags;
	return d;
}

void emu_pattern(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 31 + seed * 7 + (i >> 12));
}

int emu_pattern_ok(const unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(i * 31 + seed * 7 + (i >> 12)))
			return 0;
	return 1;
}

size_t emu_granularity(const CUmemAllocationProp *p)
{
	CUmemAllocationProp dev0 = emu_prop(0);
	size_t g = 0;
	CHECK_CU(cuMemGetAllocationGranularity(&g, p ? p : &dev0, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	return g;
}

CUdeviceptr emu_create_reserve(size_t size, size_t range, CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp p = emu_prop(0);
	CUdeviceptr va = 0;
	CHECK_CU(cuMemCreate(h, size, &p, 0));
	CHECK_CU(cuMemAddressReserve(&va, range, 0, 0, 0));
	return va;
}

CUdeviceptr emu_map_new(size_t size, const CUmemAllocationProp *p, CUmemGenericAllocationHandle *h)
{
	CUdeviceptr va = 0;
	CHECK_CU(cuMemCreate(h, size, p, 0));
	CHECK_CU(cuMemAddressReserve(&va, size, 0, 0, 0));
	CHECK_CU(cuMemMap(va, size, 0, *h, 0));
	return va;
}

void emu_unmap_free(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h)
{
	CHECK_CU(cuMemUnmap(va, size));
	CHECK_CU(cuMemRelease(h));
	CHECK_CU(cuMemAddressFree(va, size));
}

CUdeviceptr emu_map_rw(int dev, size_t size, CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp p = emu_prop(dev);
	CUdeviceptr va = emu_map_new(size, &p, h);
	CUmemAccessDesc a = emu_access(dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuMemSetAccess(va, size, &a, 1));
	return va;
}
