/* SPDX-License-Identifier: MIT */
/* clients: zdtm-style replays of how the real clients of the VMM API use it,
 * written from their public behaviour, for cusnap to suspend and restore:
 *
 *   clients --mode nccl [--front]   NCCL: driver functions obtained as static cudart does
 *        (dlopen libcuda.so.1, dlsym cuGetProcAddress_v2, each name at its ABI's version,
 *        copies with the per-thread stream flag); a device buffer and a HOST_NUMA host
 *        buffer shared with a worker through exported FDs; NCCL's free path (retain
 *        from the pointer, release, unmap, release the same value). --front adds a
 *        process that only holds a context (a front-end, a DataLoader).
 *   clients --mode expandable       PyTorch expandable segments: one reservation grown
 *        and shrunk a granularity chunk at a time, handles released while mapped.
 *   clients --mode symmetric        PyTorch symmetric memory: the peer fetches the
 *        exported FD with pidfd_getfd instead of receiving it by SCM_RIGHTS.
 *   clients --mode sleep            vLLM sleep mode (CuMemAllocator): unmap and release
 *        everything, later create and map again at the same addresses.
 *
 * Each sets up, writes <control-dir>/ready-for-snapshot, parks until
 * <control-dir>/restore-complete exists, verifies bytes, addresses, handles and
 * live sharing, and prints one "PASS clients <mode> <role>" or FAIL line per
 * process; exit 0 only when every process passed. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>

static char mode[32], role[16] = "parent", control[4096];
static int failures, timeout_s = 60;
static size_t gran;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
	if (ok)
		return;
	failures++;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "clients %s %s[%d]: ", mode, role, (int)getpid());
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ---- the driver, reached as static cudart reaches it ---- */

#define DRIVER_FUNCTIONS(F)                                                                           \
	F(cuInit, "cuInit", 2000, 0)                                                                  \
	F(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0)                              \
	F(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0)                                                \
	F(cuDeviceGetCount, "cuDeviceGetCount", 2000, 0)                                              \
	F(cuGetErrorName, "cuGetErrorName", 6000, 0)                                                  \
	F(cuMemCreate, "cuMemCreate", 10020, 0)                                                       \
	F(cuMemRelease, "cuMemRelease", 10020, 0)                                                     \
	F(cuMemMap, "cuMemMap", 10020, 0)                                                             \
	F(cuMemUnmap, "cuMemUnmap", 10020, 0)                                                         \
	F(cuMemSetAccess, "cuMemSetAccess", 10020, 0)                                                 \
	F(cuMemAddressReserve, "cuMemAddressReserve", 10020, 0)                                       \
	F(cuMemAddressFree, "cuMemAddressFree", 10020, 0)                                             \
	F(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000, 0)                       \
	F(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 10020, 0)                     \
	F(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 10020, 0)                 \
	F(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 10020, 0)                   \
	F(cuMemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle", 10020, 0) \
	F(cuMemGetInfo, "cuMemGetInfo", 3020, 0)                                                      \
	F(cuCtxSynchronize, "cuCtxSynchronize", 2000, 0)                                              \
	F(cuMemcpyHtoD, "cuMemcpyHtoD", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)          \
	F(cuMemcpyDtoH, "cuMemcpyDtoH", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)

static struct {
#define FIELD(fn, name, ver, flags) __typeof__(&fn) fn;
	DRIVER_FUNCTIONS(FIELD)
#undef FIELD
} drv;

static int load_driver(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = NULL;
	if (lib)
		*(void **)&gpa = dlsym(lib, "cuGetProcAddress_v2");
	if (!gpa) {
		check(0, "no cuGetProcAddress_v2 in libcuda.so.1");
		return -1;
	}
	CUdriverProcAddressQueryResult st;
#define RESOLVE(fn, name, ver, flags)                                                           \
	if (gpa(name, (void **)&drv.fn, ver, flags, &st) != CUDA_SUCCESS || !drv.fn) {          \
		check(0, "cuGetProcAddress_v2(%s, %d) failed (status %d)", name, ver, (int)st); \
		return -1;                                                                      \
	}
	DRIVER_FUNCTIONS(RESOLVE)
#undef RESOLVE
	return 0;
}

static const char *cuname(CUresult r)
{
	const char *s = "?";
	if (drv.cuGetErrorName)
		drv.cuGetErrorName(r, &s);
	return s;
}

#define CU(call)                                                       \
	do {                                                           \
		CUresult rc_ = (call);                                 \
		if (rc_ != CUDA_SUCCESS) {                             \
			check(0, "%s failed: %s", #call, cuname(rc_)); \
			return -1;                                     \
		}                                                      \
	} while (0)

static int use_device(int dev)
{
	CUcontext ctx;
	CU(drv.cuInit(0));
	int n = 1;
	CU(drv.cuDeviceGetCount(&n));
	if (dev >= n)
		dev = n - 1;
	CU(drv.cuDevicePrimaryCtxRetain(&ctx, dev));
	CU(drv.cuCtxSetCurrent(ctx));
	CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
				 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	CU(drv.cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	return dev;
}

static CUmemAllocationProp device_prop(int dev)
{
	CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
				 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	return p;
}

static CUmemAccessDesc device_rw(int dev)
{
	CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
			     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	return d;
}

static CUmemAccessDesc host_rw(void)
{
	CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_HOST_NUMA, .id = 0},
			     .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	return d;
}

/* Map h at a new reservation of size bytes with the given access. */
static int map_new(CUmemGenericAllocationHandle h, size_t size, const CUmemAccessDesc *acc, size_t nacc,
		   CUdeviceptr *va)
{
	CU(drv.cuMemAddressReserve(va, size, 0, 0, 0));
	CU(drv.cuMemMap(*va, size, 0, h, 0));
	CU(drv.cuMemSetAccess(*va, size, acc, nacc));
	return 0;
}

/* Device bytes through the driver (no CPU access to device memory). */
static int fill(CUdeviceptr va, size_t n, unsigned seed)
{
	uint8_t *buf = malloc(n);
	for (size_t i = 0; buf && i < n; i++)
		buf[i] = (uint8_t)(i * 13 + seed);
	CUresult rc = buf ? drv.cuMemcpyHtoD(va, buf, n) : CUDA_ERROR_OUT_OF_MEMORY;
	if (rc == CUDA_SUCCESS)
		rc = drv.cuCtxSynchronize(); /* landed before another process looks */
	free(buf);
	check(rc == CUDA_SUCCESS, "cuMemcpyHtoD(%#llx) failed: %s", (unsigned long long)va, cuname(rc));
	return rc ? -1 : 0;
}

static bool holds(CUdeviceptr va, size_t n, unsigned seed)
{
	uint8_t *buf = malloc(n);
	bool ok = buf && drv.cuMemcpyDtoH(buf, va, n) == CUDA_SUCCESS;
	for (size_t i = 0; ok && i < n; i++)
		ok = buf[i] == (uint8_t)(i * 13 + seed);
	free(buf);
	return ok;
}

static uint32_t rd32(CUdeviceptr at)
{
	uint32_t v = 0;
	drv.cuMemcpyDtoH(&v, at, sizeof(v));
	return v;
}

/* A copy from pageable memory may return before its DMA lands (cuda.h's
 * memcpy sync notes; seen on an H200: a peer read the old word): synchronised,
 * as another process reads it next. */
static void wr32(CUdeviceptr at, uint32_t v)
{
	CUresult rc = drv.cuMemcpyHtoD(at, &v, sizeof(v));
	if (rc == CUDA_SUCCESS)
		rc = drv.cuCtxSynchronize();
	check(rc == CUDA_SUCCESS, "writing %#llx failed: %s", (unsigned long long)at, cuname(rc));
}

/* NCCL's free path (ncclCuMemFree): the handle retained from the pointer, released,
 * the range unmapped, the same value released again, the reservation freed. */
static int nccl_free(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle expected)
{
	CUmemGenericAllocationHandle h = 0;
	CU(drv.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)va));
	check(h == expected, "cuMemRetainAllocationHandle gave %#llx, not the mapped handle %#llx",
	      (unsigned long long)h, (unsigned long long)expected);
	CU(drv.cuMemRelease(h));
	CU(drv.cuMemUnmap(va, size));
	CU(drv.cuMemRelease(h));
	CU(drv.cuMemAddressFree(va, size));
	return 0;
}

static size_t free_bytes(void)
{
	size_t f = 0, t = 0;
	drv.cuMemGetInfo(&f, &t);
	return f;
}

/* ---- files and sockets ---- */

static int wait_file(const char *name)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/%s", control, name);
	for (long waited = 0; waited < (long)timeout_s * 1000; waited += 10) {
		if (access(path, F_OK) == 0)
			return 0;
		usleep(10000);
	}
	check(0, "%s did not appear within %d s", path, timeout_s);
	return -1;
}

static void ready(void)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/ready-for-snapshot", control);
	FILE *f = fopen(path, "w");
	if (f)
		fclose(f);
}

static int send_fds(int sock, const int *fds, int n)
{
	char byte = 'F';
	struct iovec iov = {&byte, 1};
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr msg = {.msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = u.buf,
			     .msg_controllen = CMSG_SPACE((size_t)n * sizeof(int))};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN((size_t)n * sizeof(int));
	memcpy(CMSG_DATA(c), fds, (size_t)n * sizeof(int));
	return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

static int recv_fds(int sock, int *fds, int n)
{
	char byte;
	struct iovec iov = {&byte, 1};
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN((size_t)n * sizeof(int)))
		return -1;
	memcpy(fds, CMSG_DATA(c), (size_t)n * sizeof(int));
	return 0;
}

static int say(int sock, const char *text)
{
	return write(sock, text, strlen(text) + 1) == (ssize_t)strlen(text) + 1 ? 0 : -1;
}

/* One NUL-ended message into buf. */
static int hear(int sock, char *buf, size_t len)
{
	size_t n = 0;
	while (n + 1 < len) {
		ssize_t r = read(sock, buf + n, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r != 1)
			return -1;
		if (buf[n++] == '\0')
			return 0;
	}
	return -1;
}

static int expect(int sock, const char *what)
{
	char buf[64];
	if (hear(sock, buf, sizeof(buf)) < 0 || strcmp(buf, what) != 0) {
		check(0, "expected '%s' from the peer", what);
		return -1;
	}
	return 0;
}

/* ---- nccl ---- */

static struct {
	CUmemGenericAllocationHandle dev, host;
	CUdeviceptr dev_va, host_va;
	size_t base_free;
} nc;

static int nccl_parent(int sock)
{
	int dev = use_device(0);
	if (dev < 0)
		return -1;
	nc.base_free = free_bytes();
	/* A temporary buffer through the whole alloc/free cycle first: nothing leaks. */
	CUmemAllocationProp p = device_prop(dev);
	CUmemAccessDesc d = device_rw(dev);
	CUmemGenericAllocationHandle t;
	CUdeviceptr tva;
	CU(drv.cuMemCreate(&t, gran, &p, 0));
	if (map_new(t, gran, &d, 1, &tva) < 0 || nccl_free(tva, gran, t) < 0)
		return -1;
	check(free_bytes() == nc.base_free, "the NCCL free path leaked device memory");
	/* The communicator's buffers: one on the device, one in host memory. */
	CU(drv.cuMemCreate(&nc.dev, 2 * gran, &p, 0));
	if (map_new(nc.dev, 2 * gran, &d, 1, &nc.dev_va) < 0 || fill(nc.dev_va, 2 * gran, 1) < 0)
		return -1;
	CUmemAllocationProp hp = p;
	hp.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
	hp.location.id = 0;
	CUmemAccessDesc hd[2] = {host_rw(), d};
	CU(drv.cuMemCreate(&nc.host, gran, &hp, 0));
	if (map_new(nc.host, gran, hd, 2, &nc.host_va) < 0)
		return -1;
	memset((void *)(uintptr_t)nc.host_va, 0x3c, gran);
	int fds[2] = {-1, -1};
	CU(drv.cuMemExportToShareableHandle(&fds[0], nc.dev, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CU(drv.cuMemExportToShareableHandle(&fds[1], nc.host, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	check(send_fds(sock, fds, 2) == 0, "sending the FDs failed");
	close(fds[0]);
	close(fds[1]);
	if (expect(sock, "mapped") < 0)
		return -1;
	ready();
	if (wait_file("restore-complete") < 0)
		return -1;
	/* After the restore: bytes, then live sharing in both directions. */
	check(holds(nc.dev_va, 2 * gran, 1), "device buffer lost its bytes");
	check(((uint8_t *)(uintptr_t)nc.host_va)[gran - 1] == 0x3c, "host buffer lost its bytes");
	say(sock, "check");
	if (expect(sock, "written") < 0)
		return -1;
	check(rd32(nc.dev_va) == 0xabcd0001u, "the worker's write to the device buffer is not seen");
	check(((volatile uint32_t *)(uintptr_t)nc.host_va)[0] == 0xabcd0002u,
	      "the worker's write to the host buffer is not seen");
	wr32(nc.dev_va + 8, 0x5a5a0003u);
	say(sock, "yours");
	if (expect(sock, "freed") < 0)
		return -1;
	/* Measured across the free path only: a native restore may leave the
	 * driver holding a little more of its own (an H200: 1.9 MiB). */
	size_t before = free_bytes();
	if (nccl_free(nc.dev_va, 2 * gran, nc.dev) < 0 || nccl_free(nc.host_va, gran, nc.host) < 0)
		return -1;
	check(free_bytes() == before + 2 * gran, "device memory not back after NCCL's free path (%zu != %zu)",
	      free_bytes(), before + 2 * gran);
	return 0;
}

static int nccl_worker(int sock)
{
	int dev = use_device(1);
	if (dev < 0)
		return -1;
	int fds[2];
	if (recv_fds(sock, fds, 2) < 0) {
		check(0, "no FDs from the parent");
		return -1;
	}
	CUmemGenericAllocationHandle dh, hh;
	CU(drv.cuMemImportFromShareableHandle(&dh, (void *)(intptr_t)fds[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CU(drv.cuMemImportFromShareableHandle(&hh, (void *)(intptr_t)fds[1], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fds[0]);
	close(fds[1]);
	CUmemAllocationProp got;
	CU(drv.cuMemGetAllocationPropertiesFromHandle(&got, hh));
	check(got.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA, "the imported host buffer is not host memory");
	CUmemAccessDesc d = device_rw(dev), h = host_rw();
	CUdeviceptr dva, hva;
	if (map_new(dh, 2 * gran, &d, 1, &dva) < 0 || map_new(hh, gran, &h, 1, &hva) < 0)
		return -1;
	check(holds(dva, 2 * gran, 1), "device buffer not shared");
	check(((uint8_t *)(uintptr_t)hva)[5] == 0x3c, "host buffer not shared");
	say(sock, "mapped");
	if (wait_file("restore-complete") < 0 || expect(sock, "check") < 0)
		return -1;
	check(holds(dva + 4096, 2 * gran - 4096, 1), "device buffer lost its bytes");
	check(((uint8_t *)(uintptr_t)hva)[gran - 1] == 0x3c, "host buffer lost its bytes");
	wr32(dva, 0xabcd0001u);
	((volatile uint32_t *)(uintptr_t)hva)[0] = 0xabcd0002u;
	say(sock, "written");
	if (expect(sock, "yours") < 0)
		return -1;
	check(rd32(dva + 8) == 0x5a5a0003u, "the parent's write is not seen");
	int rc = nccl_free(dva, 2 * gran, dh) < 0 || nccl_free(hva, gran, hh) < 0 ? -1 : 0;
	say(sock, "freed");
	return rc;
}

/* A process that only holds a context: a participant with nothing shared. It
 * says so on up (a byte) once it has one, before the parent may say the group
 * is ready. */
static int front_end(int up)
{
	if (use_device(0) < 0)
		return -1;
	if (write(up, "c", 1) != 1)
		return -1;
	close(up);
	return wait_file("restore-complete");
}

/* ---- expandable segments ---- */

static int expandable(void)
{
	int dev = use_device(0);
	if (dev < 0)
		return -1;
	size_t base_free = free_bytes();
	enum { CHUNKS = 8 };
	CUdeviceptr seg;
	CU(drv.cuMemAddressReserve(&seg, CHUNKS * gran, 0, 0, 0));
	CUmemGenericAllocationHandle h[CHUNKS] = {0};
	CUmemAllocationProp p = device_prop(dev);
	CUmemAccessDesc d = device_rw(dev);
	/* grow to 6 chunks, one at a time */
	for (int i = 0; i < 6; i++) {
		CU(drv.cuMemCreate(&h[i], gran, &p, 0));
		CU(drv.cuMemMap(seg + (size_t)i * gran, gran, 0, h[i], 0));
		CU(drv.cuMemSetAccess(seg + (size_t)i * gran, gran, &d, 1));
		if (fill(seg + (size_t)i * gran, gran, (unsigned)i + 10) < 0)
			return -1;
	}
	/* shared with another process (IPC of the segment) */
	int cap = -1;
	CU(drv.cuMemExportToShareableHandle(&cap, h[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	close(cap);
	/* shrink by two chunks: unmap, release */
	for (int i = 5; i >= 4; i--) {
		CU(drv.cuMemUnmap(seg + (size_t)i * gran, gran));
		CU(drv.cuMemRelease(h[i]));
		h[i] = 0;
	}
	/* chunks 1..3: their handles released while they stay mapped */
	for (int i = 1; i <= 3; i++)
		CU(drv.cuMemRelease(h[i]));
	ready();
	if (wait_file("restore-complete") < 0)
		return -1;
	for (int i = 0; i < 4; i++)
		check(holds(seg + (size_t)i * gran, gran, (unsigned)i + 10), "chunk %d lost its bytes", i);
	/* From here on (a native restore may leave the driver a little of its own):
	 * the 4 chunks mapped now come back at the teardown. */
	base_free = free_bytes() + 4 * gran;
	/* grow again into the space given back */
	for (int i = 4; i < CHUNKS; i++) {
		CU(drv.cuMemCreate(&h[i], gran, &p, 0));
		CU(drv.cuMemMap(seg + (size_t)i * gran, gran, 0, h[i], 0));
		CU(drv.cuMemSetAccess(seg + (size_t)i * gran, gran, &d, 1));
		if (fill(seg + (size_t)i * gran, gran, (unsigned)i + 20) < 0)
			return -1;
	}
	for (int i = 4; i < CHUNKS; i++)
		check(holds(seg + (size_t)i * gran, gran, (unsigned)i + 20), "regrown chunk %d is wrong", i);
	/* a handle of a released-while-mapped chunk, from its address */
	CUmemGenericAllocationHandle r;
	CU(drv.cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(seg + 2 * gran + 64)));
	CU(drv.cuMemRelease(r));
	/* tear it all down */
	CU(drv.cuMemUnmap(seg, CHUNKS * gran));
	CU(drv.cuMemRelease(h[0]));
	for (int i = 4; i < CHUNKS; i++)
		CU(drv.cuMemRelease(h[i]));
	CU(drv.cuMemAddressFree(seg, CHUNKS * gran));
	check(free_bytes() == base_free, "device memory not back after the teardown");
	return 0;
}

/* ---- symmetric memory (pidfd_getfd) ---- */

static int sym_owner(int sock)
{
	int dev = use_device(0);
	if (dev < 0)
		return -1;
	CUmemAllocationProp p = device_prop(dev);
	CUmemAccessDesc d = device_rw(dev);
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	CU(drv.cuMemCreate(&h, gran, &p, 0));
	if (map_new(h, gran, &d, 1, &va) < 0 || fill(va, gran, 7) < 0)
		return -1;
	int cap = -1;
	CU(drv.cuMemExportToShareableHandle(&cap, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	char msg[64];
	snprintf(msg, sizeof(msg), "%d %d", (int)getpid(), cap); /* the FD stays open: the peer takes a copy */
	say(sock, msg);
	if (wait_file("restore-complete") < 0 || expect(sock, "written") < 0)
		return -1;
	check(rd32(va + 16) == 0x600d0001u, "the peer's write is not seen");
	check(holds(va + 4096, gran - 4096, 7), "the buffer lost its bytes");
	say(sock, "seen");
	if (expect(sock, "done") < 0)
		return -1;
	close(cap);
	CU(drv.cuMemUnmap(va, gran));
	CU(drv.cuMemRelease(h));
	CU(drv.cuMemAddressFree(va, gran));
	return 0;
}

static int fetch_peer_fd(int pid, int fd)
{
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	int got = pidfd >= 0 ? (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0) : -1;
	check(got >= 0, "pidfd_getfd(%d, %d) failed: %s", pid, fd, strerror(errno));
	if (pidfd >= 0)
		close(pidfd);
	return got;
}

static int sym_peer(int sock)
{
	int dev = use_device(1);
	if (dev < 0)
		return -1;
	char msg[64];
	int pid = 0, fd = -1;
	if (hear(sock, msg, sizeof(msg)) < 0 || sscanf(msg, "%d %d", &pid, &fd) != 2) {
		check(0, "no pid and FD number from the owner");
		return -1;
	}
	int cap = fetch_peer_fd(pid, fd);
	if (cap < 0)
		return -1;
	CUmemGenericAllocationHandle h;
	CU(drv.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)cap, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(cap);
	CUmemAccessDesc d = device_rw(dev);
	CUdeviceptr va;
	if (map_new(h, gran, &d, 1, &va) < 0)
		return -1;
	check(holds(va, gran, 7), "not shared");
	ready();
	if (wait_file("restore-complete") < 0)
		return -1;
	check(holds(va + 4096, gran - 4096, 7), "the mapping lost its bytes");
	wr32(va + 16, 0x600d0001u);
	say(sock, "written");
	if (expect(sock, "seen") < 0)
		return -1;
	/* The capability the owner still holds, fetched again after the restore. */
	cap = fetch_peer_fd(pid, fd);
	CUmemGenericAllocationHandle h2;
	CU(drv.cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)cap, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(cap);
	CUdeviceptr va2;
	if (map_new(h2, gran, &d, 1, &va2) < 0)
		return -1;
	check(rd32(va2 + 16) == 0x600d0001u, "a capability fetched after the restore maps other bytes");
	CU(drv.cuMemUnmap(va2, gran));
	CU(drv.cuMemRelease(h2));
	CU(drv.cuMemAddressFree(va2, gran));
	CU(drv.cuMemUnmap(va, gran));
	CU(drv.cuMemRelease(h));
	CU(drv.cuMemAddressFree(va, gran));
	say(sock, "done");
	return 0;
}

/* ---- vLLM sleep mode ---- */

enum { SLEEPERS = 3 };
static struct {
	CUmemGenericAllocationHandle h[SLEEPERS];
	CUdeviceptr va[SLEEPERS];
	void *backup[SLEEPERS];
} sl;

/* Offload every buffer's bytes, unmap and release it; the reservation stays. */
static int sleep_all(void)
{
	for (int i = 0; i < SLEEPERS; i++) {
		sl.backup[i] = malloc(gran);
		if (!sl.backup[i])
			return -1;
		CU(drv.cuMemcpyDtoH(sl.backup[i], sl.va[i], gran));
		CU(drv.cuMemUnmap(sl.va[i], gran));
		CU(drv.cuMemRelease(sl.h[i]));
	}
	/* Nothing is mapped there any more. */
	CUmemGenericAllocationHandle r;
	check(drv.cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)sl.va[0]) != CUDA_SUCCESS,
	      "a released and unmapped buffer can still be retained");
	return 0;
}

/* Create each buffer anew at its old address and bring its bytes back. */
static int wake_all(int dev)
{
	CUmemAllocationProp p = device_prop(dev);
	CUmemAccessDesc d = device_rw(dev);
	for (int i = 0; i < SLEEPERS; i++) {
		CU(drv.cuMemCreate(&sl.h[i], gran, &p, 0));
		CU(drv.cuMemMap(sl.va[i], gran, 0, sl.h[i], 0));
		CU(drv.cuMemSetAccess(sl.va[i], gran, &d, 1));
		CU(drv.cuMemcpyHtoD(sl.va[i], sl.backup[i], gran));
		free(sl.backup[i]);
		sl.backup[i] = NULL;
		CUmemGenericAllocationHandle r;
		CU(drv.cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)sl.va[i]));
		check(r == sl.h[i], "after waking, buffer %d's address retains %#llx, not %#llx", i,
		      (unsigned long long)r, (unsigned long long)sl.h[i]);
		CU(drv.cuMemRelease(r));
	}
	return 0;
}

static int sleep_mode(void)
{
	int dev = use_device(0);
	if (dev < 0)
		return -1;
	size_t base_free = free_bytes();
	CUmemAllocationProp p = device_prop(dev);
	CUmemAccessDesc d = device_rw(dev);
	for (int i = 0; i < SLEEPERS; i++) {
		CU(drv.cuMemCreate(&sl.h[i], gran, &p, 0));
		if (map_new(sl.h[i], gran, &d, 1, &sl.va[i]) < 0 || fill(sl.va[i], gran, (unsigned)i + 30) < 0)
			return -1;
	}
	int cap = -1; /* the weights are shared with a peer: the checkpoint must save them */
	CU(drv.cuMemExportToShareableHandle(&cap, sl.h[0], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	close(cap);
	if (sleep_all() < 0)
		return -1;
	check(free_bytes() == base_free, "asleep, the buffers still hold device memory");
	if (wake_all(dev) < 0)
		return -1;
	CU(drv.cuMemExportToShareableHandle(&cap, sl.h[1], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	close(cap);
	ready();
	if (wait_file("restore-complete") < 0)
		return -1;
	for (int i = 0; i < SLEEPERS; i++)
		check(holds(sl.va[i], gran, (unsigned)i + 30), "buffer %d lost its bytes", i);
	base_free = free_bytes() + SLEEPERS * gran; /* (as in expandable) */
	/* and sleep and wake once more after the restore */
	if (sleep_all() < 0 || wake_all(dev) < 0)
		return -1;
	for (int i = 0; i < SLEEPERS; i++) {
		check(holds(sl.va[i], gran, (unsigned)i + 30), "buffer %d wrong after a second sleep", i);
		CU(drv.cuMemUnmap(sl.va[i], gran));
		CU(drv.cuMemRelease(sl.h[i]));
		CU(drv.cuMemAddressFree(sl.va[i], gran));
	}
	check(free_bytes() == base_free, "device memory not back");
	return 0;
}

/* ---- processes ---- */

static int report(int rc)
{
	if (rc < 0 && !failures)
		failures++;
	printf("%s clients %s %s pid %d\n", failures ? "FAIL" : "PASS", mode, role, (int)getpid());
	fflush(stdout);
	return failures ? 1 : 0;
}

/* Parent and one worker forked before CUDA init, joined by a socket pair. */
static int pair(int (*parent)(int), int (*worker)(int), bool front)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return 1;
	pid_t w = fork();
	if (w == 0) {
		close(sv[0]);
		snprintf(role, sizeof(role), "worker");
		int rc = load_driver() < 0 ? -1 : worker(sv[1]);
		_exit(report(rc));
	}
	pid_t f = -1;
	int up[2] = {-1, -1};
	if (front && pipe2(up, O_CLOEXEC) < 0)
		return 1;
	if (front && (f = fork()) == 0) {
		close(sv[0]);
		close(sv[1]);
		close(up[0]);
		snprintf(role, sizeof(role), "front");
		_exit(report(load_driver() < 0 ? -1 : front_end(up[1])));
	}
	close(sv[1]);
	if (front) { /* (the front end's context first: the group is ready only with it) */
		char c;
		close(up[1]);
		if (read(up[0], &c, 1) != 1)
			check(0, "the front-end process did not make its context");
		close(up[0]);
	}
	int rc = load_driver() < 0 ? -1 : parent(sv[0]);
	int status = 0;
	if (waitpid(w, &status, 0) != w || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		check(0, "the worker failed");
	if (f > 0 && (waitpid(f, &status, 0) != f || !WIFEXITED(status) || WEXITSTATUS(status) != 0))
		check(0, "the front-end process failed");
	return report(rc);
}

/* symmetric: the peer (parent) takes the owner's (worker's) FD with pidfd_getfd,
 * which an ancestor may do; the parent writes ready-for-snapshot once mapped. */
int main(int argc, char **argv)
{
	bool front = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mode") && i + 1 < argc)
			snprintf(mode, sizeof(mode), "%s", argv[++i]);
		else if (!strcmp(argv[i], "--front"))
			front = true;
		else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
			timeout_s = atoi(argv[++i]);
		else if (!strncmp(argv[i], "--timeout=", 10))
			timeout_s = atoi(argv[i] + 10);
		else
			mode[0] = '\0', i = argc;
	}
	const char *c = getenv("SNAPSHOT_CONTROL_DIR");
	snprintf(control, sizeof(control), "%s", c && *c ? c : "/snapshot-control");
	mkdir(control, 0700);
	if (!strcmp(mode, "nccl"))
		return pair(nccl_parent, nccl_worker, front);
	if (!strcmp(mode, "symmetric"))
		return pair(sym_peer, sym_owner, false);
	if (!strcmp(mode, "expandable"))
		return report(load_driver() < 0 ? -1 : expandable());
	if (!strcmp(mode, "sleep"))
		return report(load_driver() < 0 ? -1 : sleep_mode());
	fprintf(stderr, "usage: clients --mode nccl|expandable|symmetric|sleep [--front] [--timeout SECONDS]\n");
	return 64;
}
