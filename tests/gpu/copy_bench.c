/* SPDX-License-Identifier: MIT */
/* copy_bench: the pinned cuMemcpyDtoH rate of this GPU (the baseline host-mode
 * copies are compared with), in GB/s, for SIZE bytes of VMM memory.
 *   copy_bench [BYTES] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda.h>

#define CU(x)                                                            \
	do {                                                             \
		CUresult r_ = (x);                                       \
		if (r_) {                                                \
			fprintf(stderr, "%s failed: %d\n", #x, (int)r_); \
			return 1;                                        \
		}                                                        \
	} while (0)

int main(int argc, char **argv)
{
	size_t size = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)1 << 30;
	CUcontext ctx;
	CU(cuInit(0));
	CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU(cuCtxSetCurrent(ctx));
	CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	size_t gran;
	CU(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	size = (size + gran - 1) / gran * gran;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	CU(cuMemCreate(&h, size, &p, 0));
	CU(cuMemAddressReserve(&va, size, 0, 0, 0));
	CU(cuMemMap(va, size, 0, h, 0));
	CUmemAccessDesc d = {.location = p.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CU(cuMemSetAccess(va, size, &d, 1));
	void *host;
	CU(cuMemHostAlloc(&host, size, 0));
	CU(cuMemcpyDtoH(host, va, size)); /* warm up */
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < 3; i++)
		CU(cuMemcpyDtoH(host, va, size));
	clock_gettime(CLOCK_MONOTONIC, &b);
	double s = (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
	printf("%.2f\n", 3.0 * (double)size / s / 1e9);
	return 0;
}
