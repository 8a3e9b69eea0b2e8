// SPDX-License-Identifier: MIT
// A CUDA program as nvcc compiles it, linked with the project's runtime (never
// the toolkit's), on cuemu: its host stubs register the fat binary and its
// kernels, <<<...>>> launches go through the call configuration and the
// runtime's launch entry points, kernel attributes are read and set, a kernel
// is found by its host symbol. Kernels never run on the emulator (a documented
// limit): a launch is accepted and ordered on its stream, and changes no
// memory; with CUEMU_KERNELS=refuse it fails.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#include <cuda_runtime_api.h>

__global__ void add_one(int *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] += 1;
}

__global__ void uses_shared(int *p)
{
	extern __shared__ int buf[];
	buf[threadIdx.x] = p[threadIdx.x];
	__syncthreads();
	p[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

__device__ int device_counter;

static int failures;

#define CHECK(cond)                                                                            \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			std::printf("  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
			failures++;                                                            \
		}                                                                              \
	} while (0)
#define CHECK_RT(call) CHECK_IS(call, cudaSuccess)
#define CHECK_IS(call, want)                                                                                       \
	do {                                                                                                       \
		cudaError_t e_ = (call);                                                                           \
		if (e_ != (want)) {                                                                                \
			std::printf("  %s:%d: %s: %s, want %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_), \
				    cudaGetErrorName(want));                                                       \
			failures++;                                                                                \
		}                                                                                                  \
	} while (0)

static void test(const char *name, void (*fn)())
{
	int before = failures;
	fn();
	std::printf("%s %s\n", failures == before ? "ok  " : "FAIL", name);
}

static void launches()
{
	int *d = nullptr, h[256];
	for (int i = 0; i < 256; i++)
		h[i] = i;
	CHECK_RT(cudaMalloc(&d, sizeof(h)));
	CHECK_RT(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
	cudaStream_t s;
	cudaEvent_t e;
	CHECK_RT(cudaStreamCreate(&s));
	CHECK_RT(cudaEventCreate(&e));
	add_one<<<2, 128, 0, s>>>(d, 256);
	CHECK_RT(cudaGetLastError());
	CHECK_RT(cudaEventRecord(e, s));
	CHECK_RT(cudaStreamSynchronize(s));
	CHECK_RT(cudaEventQuery(e));
	int n = 256;
	void *args[] = {&d, &n};
	CHECK_RT(cudaLaunchKernel((const void *)add_one, dim3(1), dim3(256), args, 0, s));
	CHECK_RT(cudaDeviceSynchronize());
	CHECK_RT(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
	CHECK(h[0] == 0 && h[255] == 255); /* kernels never run on cuemu */
	// A launch the driver refuses: too many threads per block.
	add_one<<<1, 2048, 0, s>>>(d, 256);
	CHECK_IS(cudaGetLastError(), cudaErrorInvalidValue);
	// A pointer that is no kernel.
	CHECK_IS(cudaLaunchKernel((const void *)&failures, dim3(1), dim3(1), args, 0, s),
		 cudaErrorInvalidDeviceFunction);
	cudaGetLastError();
	CHECK_RT(cudaEventDestroy(e));
	CHECK_RT(cudaStreamDestroy(s));
	CHECK_RT(cudaFree(d));
}

static void attributes()
{
	cudaFuncAttributes a;
	CHECK_RT(cudaFuncGetAttributes(&a, uses_shared));
	CHECK(a.maxThreadsPerBlock == 1024);
	CHECK(a.maxDynamicSharedSizeBytes == 48 * 1024);
	int optin = 0;
	CHECK_RT(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
	int *d = nullptr;
	CHECK_RT(cudaMalloc(&d, 4096));
	uses_shared<<<1, 32, 100 * 1024>>>(d); // more than the default: refused
	CHECK_IS(cudaGetLastError(), cudaErrorInvalidValue);
	CHECK_RT(cudaFuncSetAttribute(uses_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
	CHECK_RT(cudaFuncGetAttributes(&a, uses_shared));
	CHECK(a.maxDynamicSharedSizeBytes == 100 * 1024);
	uses_shared<<<1, 32, 100 * 1024>>>(d);
	CHECK_RT(cudaGetLastError());
	CHECK_IS(cudaFuncSetAttribute(uses_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, optin + 1),
		 cudaErrorInvalidValue);
	cudaGetLastError();
	cudaFunction_t f = nullptr, g = nullptr;
	CHECK_RT(cudaGetFuncBySymbol(&f, (const void *)add_one));
	CHECK_RT(cudaGetFuncBySymbol(&g, (const void *)uses_shared));
	CHECK(f && g && f != g);
	CHECK_RT(cudaDeviceSynchronize());
	CHECK_RT(cudaFree(d));
}

// On another device: the kernel is found again in that device's context.
static void other_device()
{
	CHECK_RT(cudaSetDevice(1));
	int *d = nullptr;
	CHECK_RT(cudaMalloc(&d, 1024));
	add_one<<<1, 256>>>(d, 256);
	CHECK_RT(cudaGetLastError());
	CHECK_RT(cudaDeviceSynchronize());
	CHECK_RT(cudaFree(d));
	CHECK_RT(cudaSetDevice(0));
}

static int refused_child()
{
	int *d = nullptr;
	if (cudaMalloc(&d, 1024) != cudaSuccess)
		return 2;
	add_one<<<1, 32>>>(d, 32);
	return cudaGetLastError() == cudaErrorNotSupported ? 0 : 3;
}

int main(int argc, char **argv)
{
	// The runtime loads libcuda.so.1 by name: cuemu, from the build tree.
	if (!std::getenv("CUDART_TEST_CHILD")) {
		char self[4096], emu[4200];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		self[n > 0 ? n : 0] = '\0';
		*std::strrchr(self, '/') = '\0';
		std::snprintf(emu, sizeof(emu), "%s/../../emu", self);
		setenv("LD_LIBRARY_PATH", emu, 1);
		setenv("CUDART_TEST_CHILD", "1", 1);
		execv("/proc/self/exe", argv);
		std::printf("SKIP: cannot re-execute with cuemu on the library path\n");
		return 77;
	}
	if (argc > 1 && !std::strcmp(argv[1], "refused"))
		return refused_child();
	test("<<<...>>> and cudaLaunchKernel through the registered stubs, in stream order", launches);
	test("kernel attributes read and set, kernels found by host symbol", attributes);
	test("a kernel launched on another device", other_device);
	// CUEMU_KERNELS=refuse (read by cuemu at start: a child).
	setenv("CUEMU_KERNELS", "refuse", 1);
	char cmd[4200];
	std::snprintf(cmd, sizeof(cmd), "/proc/%d/exe refused", (int)getpid());
	int rc = std::system(cmd);
	CHECK(rc == 0);
	std::printf("%s CUEMU_KERNELS=refuse: a launch fails\n", rc == 0 ? "ok  " : "FAIL");
	std::printf("%d failed\n", failures);
	return failures ? 1 : 0;
}
