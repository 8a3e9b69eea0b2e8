/* SPDX-License-Identifier: MIT */
/* The project's CUDA runtime (build/lib/libcudart.so.13) over cuemu: devices and
 * the thread's device, errors, memory, copies, streams and events, host
 * memory, pointer attributes, pools, capture queries, properties, PCI ids, the
 * driver entry point API. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "../harness/test.h"

#define CHECK_RT(call) CHECK_EQ((int)(call), (int)cudaSuccess)
#define CHECK_RT_EQ(call, want) CHECK_EQ((int)(call), (int)(want))

static void devices_and_errors(void)
{
	int n = 0, dev = -1, v = 0;
	CHECK_RT(cudaGetDeviceCount(&n));
	CHECK_EQ(n, 2);
	CHECK_RT(cudaGetDevice(&dev));
	CHECK_EQ(dev, 0);
	CHECK_RT(cudaSetDevice(1));
	CHECK_RT(cudaGetDevice(&dev));
	CHECK_EQ(dev, 1);
	CHECK_RT_EQ(cudaSetDevice(5), cudaErrorInvalidDevice);
	CHECK_RT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
	CHECK_RT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
	CHECK_RT(cudaGetLastError()); /* read and reset */
	CHECK_RT(cudaGetDevice(&dev));
	CHECK_EQ(dev, 1); /* a failed cudaSetDevice changes nothing */
	CHECK_RT(cudaSetDevice(0));
	CHECK_STR(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
	CHECK_STR(cudaGetErrorString(cudaErrorInvalidValue), "invalid value");
	CHECK_STR(cudaGetErrorString(cudaSuccess), "no error");
	CHECK_RT(cudaRuntimeGetVersion(&v));
	CHECK_EQ(v, 13000);
	CHECK_RT(cudaDriverGetVersion(&v));
	CHECK(v >= 12080);
}

static void memory_and_copies(void)
{
	void *d = NULL;
	CHECK_RT(cudaMalloc(&d, 1 << 20));
	CHECK(d != NULL);
	unsigned char *h = malloc(1 << 20);
	for (int i = 0; i < 1 << 20; i++)
		h[i] = (unsigned char)(i * 7);
	CHECK_RT(cudaMemcpy(d, h, 1 << 20, cudaMemcpyHostToDevice));
	CHECK_RT(cudaMemset((char *)d + 100, 0xab, 10));
	memset(h, 0, 1 << 20);
	CHECK_RT(cudaMemcpy(h, d, 1 << 20, cudaMemcpyDefault));
	CHECK_EQ(h[99], (unsigned char)(99 * 7));
	CHECK_EQ(h[100], 0xab);
	CHECK_EQ(h[110], (unsigned char)(110 * 7));
	CHECK_RT_EQ(cudaMemcpy(h, d, 16, (enum cudaMemcpyKind)9), cudaErrorInvalidMemcpyDirection);
	void *z = h;
	CHECK_RT(cudaMalloc(&z, 0));
	CHECK(z == NULL);
	CHECK_RT(cudaFree(NULL));
	CHECK_RT(cudaFree(d));
	CHECK_RT_EQ(cudaFree(d), cudaErrorInvalidValue);
	cudaGetLastError();
	free(h);
}

static void streams_and_events(void)
{
	cudaStream_t a, b;
	cudaEvent_t e;
	CHECK_RT(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
	CHECK_RT(cudaStreamCreate(&b));
	CHECK_RT(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
	void *d;
	CHECK_RT(cudaMalloc(&d, 4096));
	int in = 42, out = 0;
	CHECK_RT(cudaMemcpyAsync(d, &in, sizeof(in), cudaMemcpyHostToDevice, a));
	CHECK_RT(cudaEventRecord(e, a));
	CHECK_RT(cudaStreamWaitEvent(b, e, 0));
	CHECK_RT(cudaMemcpyAsync(&out, d, sizeof(out), cudaMemcpyDeviceToHost, b));
	CHECK_RT(cudaStreamSynchronize(b));
	CHECK_EQ(out, 42);
	CHECK_RT(cudaEventSynchronize(e));
	CHECK_RT(cudaEventQuery(e));
	CHECK_RT(cudaStreamQuery(a));
	CHECK_RT(cudaMemsetAsync(d, 0, 4096, a));
	CHECK_RT(cudaDeviceSynchronize());
	enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
	CHECK_RT(cudaStreamIsCapturing(a, &st));
	CHECK_EQ(st, cudaStreamCaptureStatusNone);
	unsigned long long id = 5;
	st = cudaStreamCaptureStatusActive;
	CHECK_RT(cudaStreamGetCaptureInfo(a, &st, &id, NULL, NULL, NULL, NULL));
	CHECK_EQ(st, cudaStreamCaptureStatusNone);
	enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
	CHECK_RT(cudaThreadExchangeStreamCaptureMode(&mode));
	CHECK_EQ(mode, cudaStreamCaptureModeGlobal);
	CHECK_RT(cudaThreadExchangeStreamCaptureMode(&mode));
	CHECK_RT_EQ(cudaStreamUpdateCaptureDependencies(a, NULL, NULL, 0, 0), cudaErrorStreamCaptureUnsupported);
	cudaGetLastError();
	CHECK_RT(cudaFree(d));
	CHECK_RT(cudaEventDestroy(e));
	CHECK_RT(cudaStreamDestroy(a));
	CHECK_RT(cudaStreamDestroy(b));
}

static void host_memory_and_pointers(void)
{
	void *h, *dh, *d;
	CHECK_RT(cudaHostAlloc(&h, 8192, cudaHostAllocMapped | cudaHostAllocPortable));
	CHECK_RT(cudaHostGetDevicePointer(&dh, h, 0));
	CHECK(dh == h); /* unified addressing */
	CHECK_RT(cudaMalloc(&d, 4096));
	struct cudaPointerAttributes pa;
	CHECK_RT(cudaPointerGetAttributes(&pa, d));
	CHECK_EQ(pa.type, cudaMemoryTypeDevice);
	CHECK_EQ(pa.device, 0);
	CHECK(pa.devicePointer == d);
	int local = 0;
	CHECK_RT(cudaPointerGetAttributes(&pa, &local));
	CHECK_EQ(pa.type, cudaMemoryTypeUnregistered);
	char *stack = malloc(4096);
	CHECK_RT(cudaHostRegister(stack, 4096, cudaHostRegisterDefault));
	CHECK_RT(cudaHostGetDevicePointer(&dh, stack + 10, 0));
	CHECK(dh == stack + 10);
	CHECK_RT(cudaHostUnregister(stack));
	free(stack);
	cudaIpcMemHandle_t ipc;
	CHECK_RT(cudaIpcGetMemHandle(&ipc, d));
	CHECK_RT(cudaFree(d));
	CHECK_RT(cudaFreeHost(h));
	CHECK_RT_EQ(cudaFreeHost(h), cudaErrorInvalidValue);
	cudaGetLastError();
}

static void pools(void)
{
	struct cudaMemPoolProps props = {0};
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 1;
	cudaMemPool_t pool;
	CHECK_RT(cudaMemPoolCreate(&pool, &props));
	unsigned long long threshold = ~0ull, used = 1;
	CHECK_RT(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
	cudaStream_t s;
	CHECK_RT(cudaStreamCreate(&s));
	void *p;
	CHECK_RT(cudaMallocFromPoolAsync(&p, 65536, pool, s));
	CHECK_RT(cudaMemsetAsync(p, 1, 65536, s));
	CHECK_RT(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
	CHECK_EQ(used, 65536u);
	CHECK_RT(cudaFreeAsync(p, s));
	CHECK_RT(cudaStreamSynchronize(s));
	CHECK_RT(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
	CHECK_EQ(used, 0u);
	CHECK_RT(cudaMallocAsync(&p, 4096, s));
	CHECK_RT(cudaFreeAsync(p, s));
	CHECK_RT(cudaStreamSynchronize(s));
	CHECK_RT(cudaMemPoolDestroy(pool));
	CHECK_RT(cudaStreamDestroy(s));
}

static void properties_and_peers(void)
{
	struct cudaDeviceProp p;
	CHECK_RT(cudaGetDeviceProperties(&p, 1));
	CHECK(strstr(p.name, "cuemu") != NULL); /* never mistaken for a GPU */
	CHECK_EQ(p.major, 9);
	CHECK_EQ(p.sharedMemPerBlockOptin, (size_t)227 * 1024);
	CHECK_EQ(p.maxThreadsPerBlock, 1024);
	CHECK(p.totalGlobalMem > 0);
	char bus[32];
	CHECK_RT(cudaDeviceGetPCIBusId(bus, sizeof(bus), 1));
	int dev = -1;
	CHECK_RT(cudaDeviceGetByPCIBusId(&dev, bus));
	CHECK_EQ(dev, 1);
	CHECK_EQ(p.pciBusID, (int)strtol(bus + 5, NULL, 16));
	int v = 0;
	CHECK_RT(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
	CHECK_EQ(v, 227 * 1024);
	CHECK_RT_EQ(cudaGetDeviceProperties(&p, 9), cudaErrorInvalidDevice);
	int can = 0;
	CHECK_RT(cudaDeviceCanAccessPeer(&can, 0, 1));
	CHECK_EQ(can, 1);
	CHECK_RT(cudaDeviceEnablePeerAccess(1, 0));
	CHECK_RT(cudaDeviceDisablePeerAccess(1));
	size_t free_b = 0, total = 0;
	CHECK_RT(cudaMemGetInfo(&free_b, &total));
	CHECK(total > 0 && free_b <= total);
	cudaGetLastError();
}

/* The driver entry point API: by name at this runtime's version or a given one,
 * with its status; an unknown name is a status, not a crash. */
/* (cudaGetDriverEntryPoint is deprecated in CUDA 13 and still called by clients.) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void driver_entry_points(void)
{
	void *fn = NULL;
	enum cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
	CHECK_RT(cudaGetDriverEntryPoint("cuMemCreate", &fn, cudaEnableDefault, &st));
	CHECK(fn != NULL);
	CHECK_EQ(st, cudaDriverEntryPointSuccess);
	CHECK_RT(cudaGetDriverEntryPoint("cuNoSuchEntryPoint", &fn, cudaEnableDefault, &st));
	CHECK(fn == NULL);
	CHECK_EQ(st, cudaDriverEntryPointSymbolNotFound);
	void *v3 = NULL, *v4 = NULL;
	CHECK_RT(cudaGetDriverEntryPointByVersion("cuCtxCreate", &v3, 11040, cudaEnableDefault, &st));
	CHECK_RT(cudaGetDriverEntryPointByVersion("cuCtxCreate", &v4, 12050, cudaEnableDefault, &st));
	CHECK(v3 && v4 && v3 != v4);
	CHECK_RT_EQ(cudaGetDriverEntryPoint("cuMemCreate", &fn, 7, &st), cudaErrorInvalidValue);
	cudaGetLastError();
}
#pragma GCC diagnostic pop

int main(int argc, char **argv)
{
	(void)argc;
	/* The runtime loads libcuda.so.1 by name: cuemu, from the build tree. */
	if (!getenv("CUDART_TEST_CHILD")) {
		char emu[4200];
		snprintf(emu, sizeof(emu), "%s/../../emu", test_exe_dir());
		setenv("LD_LIBRARY_PATH", emu, 1);
		setenv("CUDART_TEST_CHILD", "1", 1);
		execv("/proc/self/exe", argv);
		SKIP("cannot re-execute with cuemu on the library path");
	}
	test_run("devices, the thread's device, errors, versions", devices_and_errors);
	test_run("memory, copies and sets", memory_and_copies);
	test_run("streams, events, capture queries", streams_and_events);
	test_run("host memory, pointer attributes, legacy IPC", host_memory_and_pointers);
	test_run("memory pools and stream-ordered allocation", pools);
	test_run("device properties, PCI bus ids, peers", properties_and_peers);
	test_run("the driver entry point API", driver_entry_points);
	return test_done();
}
