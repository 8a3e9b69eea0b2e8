/* SPDX-License-Identifier: MIT */
/* rt_clients: the real libcudart and libnccl reaching the VMM calls, for
 * tests/gpu/run.sh (built here, run on the GPU host; both libraries are loaded
 * with dlopen, so nothing is needed at build time).
 *
 *   rt_clients cudart SECONDS   cudaGetDriverEntryPointByVersion("cuMemCreate", 12000) from the
 *                               real libcudart, one POSIX-shareable allocation through it,
 *                               "tracked yes|no" (a logical handle), then park SECONDS so that
 *                               the caller can INSPECT it
 *   rt_clients nccl             ncclMemAlloc + ncclMemFree through the real libnccl.so.2
 *                               (exit 77 when there is none) */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

static void *open_first(const char *const *names)
{
	for (int i = 0; names[i]; i++) {
		void *h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
		if (h)
			return h;
	}
	return NULL;
}

static int cudart(int seconds)
{
	static const char *const libs[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so", NULL};
	void *rt = open_first(libs);
	if (!rt) {
		printf("skip no libcudart\n");
		return 77;
	}
	int (*by_version)(const char *, void **, unsigned, unsigned long long, int *) = NULL;
	int (*set_device)(int) = NULL;
	*(void **)&by_version = dlsym(rt, "cudaGetDriverEntryPointByVersion");
	*(void **)&set_device = dlsym(rt, "cudaSetDevice");
	if (!by_version || !set_device || set_device(0) != 0) {
		printf("error libcudart without cudaGetDriverEntryPointByVersion or no device\n");
		return 1;
	}
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			   unsigned long long) = NULL;
	CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags) = NULL;
	int st = -1;
	if (by_version("cuMemCreate", (void **)&create, 12000, 0, &st) != 0 ||
	    by_version("cuMemGetAllocationGranularity", (void **)&granularity, 12000, 0, &st) != 0) {
		printf("error cudaGetDriverEntryPointByVersion failed (%d)\n", st);
		return 1;
	}
	CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
				 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	size_t g = 0;
	CUmemGenericAllocationHandle h = 0;
	if (granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) || create(&h, g, &p, 0)) {
		printf("error cuMemCreate through the runtime failed\n");
		return 1;
	}
	printf("tracked %s\nready\n", h >> 48 == 0x5ea1 ? "yes" : "no");
	fflush(stdout);
	sleep((unsigned)seconds);
	return 0;
}

static int nccl(void)
{
	static const char *const libs[] = {"libnccl.so.2", "libnccl.so", NULL};
	void *lib = open_first(libs);
	if (!lib) {
		printf("skip no libnccl.so.2\n");
		return 77;
	}
	int (*alloc)(void **, size_t) = NULL, (*release)(void *) = NULL;
	*(void **)&alloc = dlsym(lib, "ncclMemAlloc");
	*(void **)&release = dlsym(lib, "ncclMemFree");
	if (!alloc || !release) {
		printf("skip libnccl without ncclMemAlloc\n");
		return 77;
	}
	void *p = NULL;
	int a = alloc(&p, 8u << 20);
	int f = a == 0 ? release(p) : -1;
	printf("ncclMemAlloc %d ncclMemFree %d\n", a, f);
	return a == 0 && f == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "cudart"))
		return cudart(argc >= 3 ? atoi(argv[2]) : 10);
	if (argc >= 2 && !strcmp(argv[1], "nccl"))
		return nccl();
	fprintf(stderr, "usage: rt_clients cudart [SECONDS] | nccl\n");
	return 64;
}
