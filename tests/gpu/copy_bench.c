/* SPDX-License-Identifier: MIT */
/* copy_bench: this GPU's cuMemcpy rates in GB/s for SIZE bytes of VMM memory,
 * one line each: device to host and host to device, into pinned memory
 * (cuMemHostAlloc; dtoh_pinned is the baseline host-mode copies are compared
 * with) and into pageable memory (what a copy gets when the arena cannot be
 * registered).
 *   copy_bench [BYTES] */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* GB/s of three copies of SIZE bytes one way, after one to warm up (0 on an error). */
static double rate(CUdeviceptr va, void *host, size_t size, bool to_device)
{
	struct timespec a, b;
	for (int i = 0; i < 4; i++) {
		if (i == 1)
			clock_gettime(CLOCK_MONOTONIC, &a);
		CUresult rc = to_device ? cuMemcpyHtoD(va, host, size) : cuMemcpyDtoH(host, va, size);
		if (rc) {
			fprintf(stderr, "copy_bench: cuMemcpy%s failed: %d\n", to_device ? "HtoD" : "DtoH", (int)rc);
			return 0;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	return 3.0 * (double)size / s / 1e9;
}

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
	void *pinned, *pageable = aligned_alloc(4096, size);
	CU(cuMemHostAlloc(&pinned, size, 0));
	if (!pageable) {
		fprintf(stderr, "copy_bench: no %zu bytes of host memory\n", size);
		return 1;
	}
	memset(pageable, 1, size); /* fault it in: the rate is the copy's, not the first touch's */
	static const char *name[] = {"dtoh_pinned", "htod_pinned", "dtoh_pageable", "htod_pageable"};
	int failed = 0;
	for (int i = 0; i < 4; i++) {
		double r = rate(va, i < 2 ? pinned : pageable, size, i % 2);
		printf("%s %.2f\n", name[i], r);
		failed |= r == 0;
	}
	/* The host-mode arena's way: pageable memory registered (PORTABLE), timed apart. */
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	CU(cuMemHostRegister(pageable, size, CU_MEMHOSTREGISTER_PORTABLE));
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("register_ms %.1f\n", (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
	clock_gettime(CLOCK_MONOTONIC, &a); /* the first copy into it, as a suspend makes it */
	CU(cuMemcpyDtoH(pageable, va, size));
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("dtoh_registered_first %.2f\n",
	       (double)size / ((double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9) / 1e9);
	printf("dtoh_registered %.2f\n", rate(va, pageable, size, false));
	CU(cuMemHostUnregister(pageable));
	return failed;
}
