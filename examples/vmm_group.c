/* SPDX-License-Identifier: MIT */
/* vmm_group: a zdtm-style workload for cusnap. A parent and N workers (forked
 * before CUDA is initialised, as vLLM does) share VMM memory the way NCCL does:
 * the parent creates K allocations across the devices, exports them, passes the
 * FDs with SCM_RIGHTS; each worker imports and maps them at its own addresses
 * with its own access. Every process also keeps a private allocation.
 *
 * Then: write <control-dir>/ready-for-snapshot, park until
 * <control-dir>/restore-complete exists, and verify: contents, addresses, the
 * application's old handles (properties, map/unmap, retain/release), and live
 * sharing in both directions. Each process prints one PASS or FAIL line; the
 * exit status is 0 only when every process passed.
 *
 *   vmm_group [--workers N] [--allocs K] [--size BYTES] [--timeout SECONDS] [--multicast] [--ipc]
 *             [--release] [--contiguous]
 *
 * --size (or VMM_GROUP_SIZE) is each shared allocation's size, 4 MiB unless
 * told: a multiple of the driver's granularity (2 MiB on a GPU; the sweeps ask
 * cuemu for 64 KiB and use 256 KiB, since they start hundreds of groups).
 *
 * --multicast adds what NVLS collectives do: the parent creates a multicast
 * object over the devices in use, exports it to the workers, the first process
 * on each device adds that device, every process binds memory of its own at
 * offset rank x granularity (even ranks by handle, odd ranks by address) and
 * maps the whole object. After the restore each process checks that its member
 * keeps its bytes and is still reachable through its multicast mapping (as cuemu
 * models it: a process sees there the memory it bound), that a write to the
 * member shows through the mapping, and that the old multicast handle still
 * unbinds and binds. VMM_GROUP_MC_REQUEST=BYTES asks for another capacity;
 * VMM_GROUP_MULTICAST=1 does the same as --multicast; VMM_GROUP_MC_DEFECT=no-add|no-bind leaves the last device of the team
 * unadded (then nobody binds) or unbound, for validation tests.
 *
 * --ipc (or VMM_GROUP_IPC=1) adds what vLLM's custom all-reduce does with
 * legacy CUDA IPC between all processes (vmm_group_ipc.h).
 *
 * --release (or VMM_GROUP_RELEASE=1): once the workers have imported, the parent
 * unmaps and releases every shared allocation, keeping only the exported FDs
 * (the workers carry the memory on, DESIGN.md §6.2). After the restore it
 * imports those cached FDs again: they must still resolve, to the memory the
 * workers share. With --ipc it frees its cuMemAlloc buffers too.
 *
 * --contiguous (or VMM_GROUP_CONTIGUOUS=1): the shared allocations are all on
 * device 0 and each process maps them back to back in one reservation, each
 * readable by every device and writable by its own, as PyTorch's expandable
 * segments lay out a segment's chunks (a restore may grant their access in one
 * call). Not with --release.
 *
 * VMM_GROUP_TCP=listen:PORT|connect:PORT links the parent to another tree's
 * over TCP on the loopback (vmm_group_tcp.h): a token both ways when ready,
 * another after restore-complete; VMM_GROUP_TCP=self, a listener and a
 * connection of its own, as NCCL's bootstrap leaves a rank.
 *
 * VMM_GROUP_CHURN=1: every process allocates, maps and releases VMM memory in a
 * thread of its own from ready until it verifies (vmm_group_churn.h): it is not
 * parked, and none of those calls may fail; =copy: it copies into memory of its
 * own instead.
 *
 * VMM_GROUP_PRIVATE=1: every process also holds private memory as an engine does
 * (vmm_group_private.h): cuMemAlloc'd weights, an expandable segment and a KV
 * cache barely used, checked after the release.
 *
 * VMM_GROUP_FAULT_ROLE=parent|workerN keeps CUEMU_FAULT and CUEMU_TRACE in that process only.
 *
 * Runs under the interposer (snapshot-cuda-vmm-launch or cusnap run) for the
 * shared memory to survive a checkpoint; without it the same program is a plain
 * CUDA workload. Control directory: $SNAPSHOT_CONTROL_DIR or /snapshot-control. */
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#define MAX_ALLOCS 64
#define MAX_WORKERS 32
#define PAGE 4096

static int workers = 2, nallocs = 4, timeout_s = 600;
static bool multicast, release, contiguous;
static CUdeviceptr slab;     /* --contiguous: the reservation of the shared allocations */
static int kept[MAX_ALLOCS]; /* --release: the parent's cached exports */
static size_t size = 4u << 20;
static char control[4096];
static char role[32] = "parent";
static int failures;

struct shared {
	CUmemGenericAllocationHandle handle;
	CUdeviceptr va;
	int device;
};

static struct shared allocs[MAX_ALLOCS];
static struct shared priv;
static int my_device; /* the device of this process's context */

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
	if (ok)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "vmm_group %s[%d]: ", role, getpid());
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	failures++;
}

static const char *cuname(CUresult r)
{
	const char *s = "?";
	cuGetErrorName(r, &s);
	return s;
}

#define CU(call)                                                               \
	do {                                                                   \
		CUresult r_ = (call);                                          \
		check(r_ == CUDA_SUCCESS, "%s failed: %s", #call, cuname(r_)); \
		if (r_ != CUDA_SUCCESS)                                        \
			return -1;                                             \
	} while (0)

static uint8_t pattern(size_t i, int k)
{
	return (uint8_t)(i * 131 + (size_t)k * 17 + (i >> 12));
}

/* Device memory is only touched through the driver (cuMemcpy), as on a GPU. */
static uint32_t rd32(CUdeviceptr at)
{
	uint32_t v = 0xdeadbeef;
	CUresult rc = cuMemcpyDtoH(&v, at, sizeof(v));
	check(rc == CUDA_SUCCESS, "cuMemcpyDtoH(%#llx) failed: %s", (unsigned long long)at, cuname(rc));
	return v;
}

static void wr32(CUdeviceptr at, uint32_t v)
{
	CUresult rc = cuMemcpyHtoD(at, &v, sizeof(v));
	if (rc == CUDA_SUCCESS)
		rc = cuCtxSynchronize(); /* a pageable copy may return before it lands; a peer reads next */
	check(rc == CUDA_SUCCESS, "cuMemcpyHtoD(%#llx) failed: %s", (unsigned long long)at, cuname(rc));
}

/* Slot w (one page per process, after page 0) of allocation k: written by w. */
static CUdeviceptr slot(const struct shared *s, int w)
{
	return s->va + (size_t)(w + 1) * PAGE;
}

/* The page where, after the restore, the parent writes word 0 and worker w word 1 + w. */
static CUdeviceptr mark(const struct shared *s, int word)
{
	return s->va + (size_t)(workers + 2) * PAGE + (size_t)word * 4;
}

static int send_fd(int sock, int fd)
{
	char byte = 'F';
	struct iovec iov = {&byte, 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char byte;
	struct iovec iov = {&byte, 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
	if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	int fd = -1;
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

static int put(int sock, char c)
{
	return write(sock, &c, 1) == 1 ? 0 : -1;
}

static char get(int sock)
{
	char c = 0;
	ssize_t n;
	do
		n = read(sock, &c, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 ? c : 0;
}

static int map_at_new_va(CUmemGenericAllocationHandle h, int device, int other, CUdeviceptr *out)
{
	CU(cuMemAddressReserve(out, size, 0, 0, 0));
	CU(cuMemMap(*out, size, 0, h, 0));
	/* Read-write for our device; read for another one (per-location access). */
	CUmemAccessDesc d[2] = {
		{.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
		 .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
		{.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = other},
		 .flags = CU_MEM_ACCESS_FLAGS_PROT_READ},
	};
	CU(cuMemSetAccess(*out, size, d, device == other ? 1 : 2));
	return 0;
}

/* Shared allocation k mapped where this process keeps it: a reservation of its
 * own, or (--contiguous) its place in the slab, readable by every device. */
static int map_shared(int k, int device, int nd)
{
	if (!contiguous)
		return map_at_new_va(allocs[k].handle, device, allocs[k].device, &allocs[k].va);
	if (!slab)
		CU(cuMemAddressReserve(&slab, size * (size_t)nallocs, 0, 0, 0));
	allocs[k].va = slab + size * (size_t)k;
	CU(cuMemMap(allocs[k].va, size, 0, allocs[k].handle, 0));
	CUmemAccessDesc d[8];
	int n = 0;
	for (int dev = 0; dev < nd && n < 8; dev++)
		d[n++] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
					   .flags = dev == device ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
								  : CU_MEM_ACCESS_FLAGS_PROT_READ};
	CU(cuMemSetAccess(allocs[k].va, size, d, (size_t)n));
	return 0;
}

/* For fault-injection tests: CUEMU_FAULT only in the process named by
 * VMM_GROUP_FAULT_ROLE. Called before this process's first CUDA call (the
 * emulator reads its environment then). */
static void fault_role_filter(void)
{
	const char *only = getenv("VMM_GROUP_FAULT_ROLE");
	if (only && strcmp(only, role) != 0) {
		unsetenv("CUEMU_FAULT");
		unsetenv("CUEMU_TRACE");
	}
}

static int ndevices(void)
{
	int n = 1;
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS)
		n = 1;
	return n > 0 ? n : 1;
}

static int setup_context(int device)
{
	CUcontext ctx;
	my_device = device;
	CU(cuInit(0));
	CU(cuDevicePrimaryCtxRetain(&ctx, device));
	CU(cuCtxSetCurrent(ctx));
	return 0;
}

static int make_private(int device)
{
	CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device}};
	CU(cuMemCreate(&priv.handle, size, &p, 0));
	CU(map_at_new_va(priv.handle, device, device, &priv.va));
	CU(cuMemsetD32(priv.va, 0xc0ffee00u | (unsigned)device, size / 4));
	priv.device = device;
	return 0;
}

/* ---- multicast ---- */

static struct {
	CUmemGenericAllocationHandle mc, member;
	CUdeviceptr mc_va, member_va;
	size_t unit; /* bytes each process binds: the multicast granularity */
	int devices; /* in the team */
	bool bound;
	bool modelled; /* cuemu: plain copies through the multicast VA show our member */
} mc;

/* On a GPU, a multicast VA is for multimem instructions in kernels, not for
 * cuMemcpy; cuemu models what a process reads there (its own binding). */
static bool multicast_reads_modelled(void)
{
	char name[64] = "";
	CUdevice d;
	return cuDeviceGet(&d, 0) == CUDA_SUCCESS && cuDeviceGetName(name, sizeof(name), d) == CUDA_SUCCESS &&
	       !strncmp(name, "cuemu", 5);
}

static int team_size(int processes)
{
	int nd = ndevices();
	return processes < nd ? processes : nd;
}

static uint32_t member_word(int rank)
{
	return 0x3c000000u | (unsigned)rank;
}

/* The parent's part before the others join: the object, exported as an FD. */
static int mc_create(int processes, int *fd)
{
	CUmulticastObjectProp p = {.numDevices = (unsigned)team_size(processes),
				   .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	CU(cuMulticastGetGranularity(&mc.unit, &p, CU_MULTICAST_GRANULARITY_MINIMUM));
	const char *req = getenv("VMM_GROUP_MC_REQUEST");
	p.size = req && *req ? strtoull(req, NULL, 0) : mc.unit * (size_t)processes;
	CU(cuMulticastCreate(&mc.mc, &p));
	CU(cuMemExportToShareableHandle(fd, mc.mc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	return 0;
}

/* Every process: add our device (first process on it), bind our member, map
 * the whole object. */
static int mc_join(int rank, int processes)
{
	const char *defect = getenv("VMM_GROUP_MC_DEFECT");
	defect = defect ? defect : "";
	mc.devices = team_size(processes);
	mc.modelled = multicast_reads_modelled();
	if (!mc.unit) {
		CUmulticastObjectProp p = {.numDevices = (unsigned)mc.devices,
					   .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
		CU(cuMulticastGetGranularity(&mc.unit, &p, CU_MULTICAST_GRANULARITY_MINIMUM));
	}
	bool last = rank == mc.devices - 1;
	if (rank < mc.devices && !(last && !strcmp(defect, "no-add")))
		CU(cuMulticastAddDevice(mc.mc, my_device));
	CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = my_device},
				 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	CU(cuMemCreate(&mc.member, mc.unit, &p, 0));
	CU(cuMemAddressReserve(&mc.member_va, mc.unit, 0, 0, 0));
	CU(cuMemMap(mc.member_va, mc.unit, 0, mc.member, 0));
	CUmemAccessDesc d = {.location = p.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CU(cuMemSetAccess(mc.member_va, mc.unit, &d, 1));
	CU(cuMemsetD32(mc.member_va, member_word(rank), mc.unit / 4));
	mc.bound = strcmp(defect, "no-add") != 0 && !(last && !strcmp(defect, "no-bind"));
	size_t at = (size_t)rank * mc.unit;
	if (mc.bound && rank % 2 == 0)
		CU(cuMulticastBindMem(mc.mc, at, mc.member, 0, mc.unit, 0));
	else if (mc.bound)
		CU(cuMulticastBindAddr(mc.mc, at, mc.member_va, mc.unit, 0));
	size_t span = mc.unit * (size_t)processes;
	CU(cuMemAddressReserve(&mc.mc_va, span, 0, 0, 0));
	/* With a device never added the team is incomplete and a mapping would
	 * wait for it forever (cuda.h): that defect leaves the object unmapped. */
	if (strcmp(defect, "no-add") != 0) {
		CU(cuMemMap(mc.mc_va, span, 0, mc.mc, 0));
		CU(cuMemSetAccess(mc.mc_va, span, &d, 1));
	}
	if (mc.bound && mc.modelled)
		check(rd32(mc.mc_va + at) == member_word(rank),
		      "our member is not visible through the multicast mapping");
	return 0;
}

static int mc_verify(int rank)
{
	size_t at = (size_t)rank * mc.unit;
	check(rd32(mc.member_va) == member_word(rank) && rd32(mc.member_va + mc.unit - 4) == member_word(rank),
	      "multicast member lost its bytes");
	if (!mc.bound)
		return 0;
	if (mc.modelled) {
		check(rd32(mc.mc_va + at) == member_word(rank),
		      "member not reachable through the multicast mapping after restore");
		wr32(mc.member_va + 8, 0x77000000u | (unsigned)rank);
		check(rd32(mc.mc_va + at + 8) == (0x77000000u | (unsigned)rank),
		      "a write to the member does not show through the multicast mapping");
	}
	/* The application's old multicast handle still works. */
	CU(cuMulticastUnbind(mc.mc, my_device, at, mc.unit));
	CU(cuMulticastBindMem(mc.mc, at, mc.member, 0, mc.unit, 0));
	if (mc.modelled)
		check(rd32(mc.mc_va + at) == member_word(rank),
		      "rebinding with the old handle does not show the member");
	return 0;
}

#include "vmm_group_ipc.h"
#include "vmm_group_tcp.h"
#include "vmm_group_churn.h"

static size_t round_up_to(size_t v, size_t to)
{
	return (v + to - 1) / to * to;
}

#include "vmm_group_private.h"

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

/* After the restore: bytes, old handles, and our private allocation. */
static int verify_local(int me, bool parent)
{
	uint8_t *buf = malloc(size);
	for (int k = 0; k < nallocs && buf; k++) {
		struct shared *s = &allocs[k];
		CU(cuMemcpyDtoH(buf, s->va, size));
		int bad = 0;
		for (size_t i = 0; i < PAGE; i++)
			bad += buf[i] != pattern(i, k);
		for (size_t i = (size_t)(workers + 3) * PAGE; i < size; i++)
			bad += buf[i] != pattern(i, k);
		check(!bad, "allocation %d: %d bytes differ from the pattern", k, bad);
		for (int w = 0; w <= workers; w++) {
			uint32_t v = rd32(slot(s, w));
			check(v == 0x5100u + (unsigned)w, "allocation %d: slot %d holds %#x, want %#x", k, w, v,
			      0x5100u + (unsigned)w);
		}
		/* The application's old handle still works. */
		CUmemAllocationProp p;
		CU(cuMemGetAllocationPropertiesFromHandle(&p, s->handle));
		check(p.location.id == s->device, "allocation %d: device %d, want %d", k, p.location.id, s->device);
		CUdeviceptr extra;
		CU(map_at_new_va(s->handle, my_device, s->device, &extra));
		check((rd32(extra) & 0xff) == pattern(0, k),
		      "allocation %d: a new mapping of the old handle shows other bytes", k);
		CU(cuMemUnmap(extra, size));
		CU(cuMemAddressFree(extra, size));
		CUmemGenericAllocationHandle again;
		CU(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)s->va));
		CU(cuMemRelease(again));
	}
	free(buf);
	check(rd32(priv.va) == (0xc0ffee00u | (unsigned)priv.device) && rd32(priv.va + size - 4) == rd32(priv.va),
	      "private allocation lost its bytes");
	(void)me;
	(void)parent;
	return 0;
}

static int worker_main(int w, int sock)
{
	snprintf(role, sizeof(role), "worker%d", w);
	fault_role_filter();
	int nd = ndevices();
	int device = (w + 1) % nd;
	if (setup_context(device) < 0)
		return 1;
	for (int k = 0; k < nallocs; k++) {
		int fd = recv_fd(sock);
		check(fd >= 0, "no FD for allocation %d", k);
		if (fd < 0)
			return 1;
		CUresult rc = cuMemImportFromShareableHandle(&allocs[k].handle, (void *)(intptr_t)fd,
							     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		close(fd);
		check(rc == CUDA_SUCCESS, "import of allocation %d failed: %s", k, cuname(rc));
		if (rc)
			return 1;
		allocs[k].device = contiguous ? 0 : k % nd;
		if (map_shared(k, device, nd) < 0)
			return 1;
		check((rd32(allocs[k].va) & 0xff) == pattern(0, k), "allocation %d: wrong bytes after import", k);
		wr32(slot(&allocs[k], w + 1), 0x5100u + (unsigned)(w + 1));
	}
	if (multicast) {
		int fd = recv_fd(sock);
		CUresult rc = fd < 0 ? CUDA_ERROR_INVALID_VALUE
				     : cuMemImportFromShareableHandle(&mc.mc, (void *)(intptr_t)fd,
								      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		if (fd >= 0)
			close(fd);
		check(rc == CUDA_SUCCESS, "import of the multicast object failed: %s", cuname(rc));
		if (rc || mc_join(w + 1, workers + 1) < 0)
			return 1;
	}
	if (ipc.on && ipc_setup(w + 1, NULL, sock) < 0)
		return 1;
	if (make_private(device) < 0 || private_setup(device) < 0)
		return 1;
	churn_start(device);
	put(sock, 'R');
	/* Parked (or churning): the parent waits for restore-complete and says when to verify. */
	if (get(sock) != 'V')
		return 1;
	churn_stop();
	verify_local(w + 1, false);
	private_verify();
	if (multicast)
		mc_verify(w + 1);
	if (ipc.on) {
		ipc_verify(w + 1);
		ipc_finish(w + 1, 0, 1); /* the parent's write; the workers' are the parent's to check */
	}
	/* Live sharing, both directions: the parent wrote 0xA0+k; we answer 0xB0+k. */
	for (int k = 0; k < nallocs; k++) {
		uint32_t v = rd32(mark(&allocs[k], 0));
		check(v == 0xA000u + (unsigned)k,
		      "allocation %d: the parent's write after restore is not visible (%#x)", k, v);
		wr32(mark(&allocs[k], 1 + w), 0xB000u + (unsigned)k);
	}
	put(sock, failures ? 'F' : 'P');
	if (ipc.on && get(sock) != 'X') /* the others may still open our handles */
		check(0, "the parent did not say when to exit");
	printf("%s vmm_group %s pid %d\n", failures ? "FAIL" : "PASS", role, getpid());
	fflush(stdout);
	return failures ? 1 : 0;
}

/* --release: the parent lets go of every shared allocation; the workers hold them. */
static int let_go(void)
{
	if (ipc.on && ipc_let_go() < 0)
		return -1;
	for (int k = 0; k < nallocs; k++) {
		CU(cuMemUnmap(allocs[k].va, size));
		CU(cuMemAddressFree(allocs[k].va, size));
		CU(cuMemRelease(allocs[k].handle));
	}
	return 0;
}

/* After the restore: the cached exports still resolve, to the memory the workers carried. */
static int import_kept(void)
{
	for (int k = 0; k < nallocs; k++) {
		CUresult rc = cuMemImportFromShareableHandle(&allocs[k].handle, (void *)(intptr_t)kept[k],
							     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
		check(rc == CUDA_SUCCESS, "allocation %d: the export cached before the checkpoint does not resolve: %s",
		      k, cuname(rc));
		if (rc)
			return -1;
		close(kept[k]);
		if (map_at_new_va(allocs[k].handle, 0, allocs[k].device, &allocs[k].va) < 0)
			return -1;
	}
	return 0;
}

static int parent_main(int *socks, pid_t *pids)
{
	fault_role_filter();
	int nd = ndevices();
	if (setup_context(0) < 0)
		return 1;
	for (int k = 0; k < nallocs; k++) {
		int dev = contiguous ? 0 : k % nd; /* --contiguous: one segment's chunks */
		CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
					 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev},
					 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
		allocs[k].device = dev;
		CU(cuMemCreate(&allocs[k].handle, size, &p, 0));
		if (map_shared(k, 0, nd) < 0)
			return 1;
		uint8_t *buf = malloc(size);
		for (size_t i = 0; i < size; i++)
			buf[i] = pattern(i, k);
		CU(cuMemcpyHtoD(allocs[k].va, buf, size));
		CU(cuCtxSynchronize());
		free(buf);
		wr32(slot(&allocs[k], 0), 0x5100u);
		int fd = -1;
		CU(cuMemExportToShareableHandle(&fd, allocs[k].handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		for (int w = 0; w < workers; w++)
			check(send_fd(socks[w], fd) == 0, "sending allocation %d to worker %d failed", k, w);
		if (release)
			kept[k] = fd;
		else
			close(fd);
	}
	if (multicast) {
		int fd = -1;
		if (mc_create(workers + 1, &fd) < 0)
			return 1;
		for (int w = 0; w < workers; w++)
			check(send_fd(socks[w], fd) == 0, "sending the multicast object to worker %d failed", w);
		close(fd);
		if (mc_join(0, workers + 1) < 0)
			return 1;
	}
	if (ipc.on && ipc_setup(0, socks, -1) < 0)
		return 1;
	if (make_private(0) < 0 || private_setup(0) < 0)
		return 1;
	for (int w = 0; w < workers; w++)
		check(get(socks[w]) == 'R', "worker %d did not get ready", w);
	if (release && let_go() < 0)
		return 1;
	if (tcp_open() < 0 || tcp_exchange("ready") < 0)
		return 1;
	if (failures)
		return 1;
	churn_start(0);
	char path[4200];
	snprintf(path, sizeof(path), "%s/ready-for-snapshot", control);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0)
		close(fd);
	printf("vmm_group: %d processes ready (%d allocations of %zu bytes shared), parked until restore-complete\n",
	       workers + 1, nallocs, size);
	fflush(stdout);
	if (wait_file("restore-complete") < 0)
		return 1;
	churn_stop();
	/* Under a fault sweep (CUEMU_FAULT_ARM: faults count while that file
	 * exists), the swept command ends before this group's own checks run. */
	const char *arm = getenv("CUEMU_FAULT_ARM");
	for (int waited = 0; arm && *arm && access(arm, F_OK) == 0 && waited < 60000; waited++)
		usleep(1000);
	if (release && import_kept() < 0)
		return 1;
	check(tcp_exchange("restored") == 0, "the link to the other tree does not carry a token any more");
	tcp_stream_report();
	check(tcp_accepts() == 0, "the restored listener does not accept");
	verify_local(0, true);
	private_verify();
	if (multicast)
		mc_verify(0);
	if (ipc.on)
		ipc_verify(0);
	for (int k = 0; k < nallocs; k++) {
		wr32(mark(&allocs[k], 0), 0xA000u + (unsigned)k);
	}
	for (int w = 0; w < workers; w++)
		put(socks[w], 'V');
	for (int w = 0; w < workers; w++)
		check(get(socks[w]) == 'P', "worker %d failed its checks", w);
	if (ipc.on) {
		ipc_finish(0, 1, workers + 1);
		for (int w = 0; w < workers; w++)
			put(socks[w], 'X');
	}
	for (int k = 0; k < nallocs; k++) {
		for (int w = 0; w < workers; w++) {
			uint32_t v = rd32(mark(&allocs[k], 1 + w));
			check(v == 0xB000u + (unsigned)k,
			      "allocation %d: worker %d's write after restore is not visible (%#x)", k, w, v);
		}
	}
	int status_all = 0;
	for (int w = 0; w < workers; w++) {
		int status;
		waitpid(pids[w], &status, 0);
		status_all |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	printf("%s vmm_group parent pid %d\n", failures ? "FAIL" : "PASS", getpid());
	fflush(stdout);
	return failures || status_all ? 1 : 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--workers") && i + 1 < argc)
			workers = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--allocs") && i + 1 < argc)
			nallocs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
			timeout_s = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--multicast"))
			multicast = true;
		else if (!strcmp(argv[i], "--ipc"))
			ipc.on = true;
		else if (!strcmp(argv[i], "--release"))
			release = true;
		else if (!strcmp(argv[i], "--contiguous"))
			contiguous = true;
		else {
			fprintf(stderr,
				"usage: vmm_group [--workers N] [--allocs K] [--size BYTES] [--timeout SECONDS] "
				"[--multicast] [--ipc] [--release] [--contiguous]\n");
			return 64;
		}
	}
	const char *sizeenv = getenv("VMM_GROUP_SIZE"); /* (the sweeps and the sanitizer passes: small) */
	if (sizeenv && *sizeenv)
		size = strtoull(sizeenv, NULL, 0);
	if (workers < 0 || workers > MAX_WORKERS || nallocs < 1 || nallocs > MAX_ALLOCS ||
	    size < (size_t)(workers + 4) * PAGE || size % (64u << 10)) {
		fprintf(stderr,
			"vmm_group: 0..%d workers, 1..%d allocations, a size that is a multiple of 64 KiB (and of "
			"the driver's granularity, 2 MiB on a GPU) and holds a page per process\n",
			MAX_WORKERS, MAX_ALLOCS);
		return 64;
	}
	const char *mcenv = getenv("VMM_GROUP_MULTICAST");
	multicast = multicast || (mcenv && !strcmp(mcenv, "1"));
	const char *ipcenv = getenv("VMM_GROUP_IPC");
	ipc.on = ipc.on || (ipcenv && !strcmp(ipcenv, "1"));
	const char *relenv = getenv("VMM_GROUP_RELEASE");
	release = release || (relenv && !strcmp(relenv, "1"));
	const char *contenv = getenv("VMM_GROUP_CONTIGUOUS");
	contiguous = contiguous || (contenv && !strcmp(contenv, "1"));
	if (contiguous && release) {
		fprintf(stderr,
			"vmm_group: --contiguous and --release do not go together (the parent would free part of "
			"a reservation)\n");
		return 64;
	}
	const char *c = getenv("SNAPSHOT_CONTROL_DIR");
	snprintf(control, sizeof(control), "%s", c && *c ? c : "/snapshot-control");
	mkdir(control, 0700);
	int socks[MAX_WORKERS];
	pid_t pids[MAX_WORKERS];
	/* Fork every worker before CUDA is initialised. */
	for (int w = 0; w < workers; w++) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
			return 1;
		pid_t pid = fork();
		if (pid == 0) {
			close(sv[0]);
			for (int j = 0; j < w; j++)
				close(socks[j]);
			_exit(worker_main(w, sv[1]));
		}
		close(sv[1]);
		socks[w] = sv[0];
		pids[w] = pid;
	}
	return parent_main(socks, pids);
}
