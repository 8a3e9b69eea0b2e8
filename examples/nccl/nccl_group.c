/* SPDX-License-Identifier: MIT */
/* nccl_group: N ranks of one NCCL communicator, zdtm-style (DESIGN.md §15).
 *
 *   nccl_group [--ranks N] [--size BYTES] [--timeout S]
 *              [--world W --first F --id-file PATH]
 *
 * The ranks are forked before CUDA is initialised (as vLLM does). Each takes
 * device (its rank in this program) % count, joins the communicator
 * (ncclCommInitRank; rank 0's unique id passed through shared memory),
 * allocates with ncclMemAlloc, registers the buffer (ncclCommRegister, and
 * ncclCommWindowRegister where the communicator supports symmetric windows),
 * enqueues collectives, and fills the
 * buffer with its pattern. Then it writes ready-for-snapshot (rank 0, once every
 * rank is set up) and parks until restore-complete appears in the control
 * directory ($SNAPSHOT_CONTROL_DIR). Each rank also imports its previous
 * neighbour's NCCL buffer through the driver (its POSIX FD sent over a Unix
 * socket, as PyTorch's symmetric memory shares NCCL-allocated memory) and maps
 * it. After release each rank checks its bytes; writes a mark through its
 * import and, once every rank has, finds its next neighbour's mark in its own
 * buffer (the memory is still one, not private copies); splits a new
 * communicator off the old one (ncclCommSplit: NCCL's bootstrap network, its
 * TCP connections, must carry it) and enqueues a collective on both; and tears
 * down through NCCL (deregister, ncclMemFree, ncclCommDestroy of both, or
 * ncclCommAbort where they span nodes: see comm_end); the driver must then
 * hold no live allocation of the rank (cuemu says). Every rank prints "PASS nccl_group rank R" or "FAIL ...".
 * NCCL_GROUP_BUSY=1: a worker that is not parked. From set-up until
 * restore-complete each rank keeps working: collectives on its communicator (a
 * bounded number: kernels never run here, so NCCL's work FIFO is never drained)
 * and its pattern copied in and read back, every round checked; a suspend lands
 * in the middle of that work and must let every call finish as if nothing
 * happened.
 * One share of a communicator over several nodes: --world W ranks in all, this
 * program's N of them ranks F to F + N - 1; the program whose share holds rank
 * 0 writes NCCL's unique id to --id-file (renamed into place), the others read
 * it from there (a file both nodes see). The sharing through imports and the
 * barriers are within a node; the communicator, its split and the collectives
 * span the nodes (NCCL_HOSTID tells NCCL which ranks share a host).
 * Kernels never run on cuemu: results of collectives are not checked here
 * (tests/gpu/run.sh checks them on a GPU). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

struct shared {
	volatile int have_id;
	volatile int set_up;  /* ranks done setting up */
	volatile int checked; /* ranks done checking their bytes after release */
	volatile int marked;  /* ranks that wrote their mark through their import */
	ncclUniqueId id;
};

/* The driver calls the import takes, resolved through the runtime. */
static struct {
	CUresult (*retain)(CUmemGenericAllocationHandle *, void *);
	CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
	CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*free_range)(CUdeviceptr, size_t);
	CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
} drv;
/* Where a mark goes: the last 64 bytes of a buffer (the bytes check covers the rest). */
#define MARK_BYTES 64

/* This program's ranks; of how many in all, the first's global rank. */
static int nranks = 2, world, first, timeout_s = 60;
static size_t size = 4 << 20;
static const char *ctl, *id_file;

#define FAIL(rank, ...)                                             \
	do {                                                        \
		fprintf(stderr, "FAIL nccl_group rank %d: ", rank); \
		fprintf(stderr, __VA_ARGS__);                       \
		fprintf(stderr, "\n");                              \
		return 1;                                           \
	} while (0)
#define RT(rank, call)                                                                                 \
	do {                                                                                           \
		cudaError_t e_ = (call);                                                               \
		if (e_ != cudaSuccess)                                                                 \
			FAIL(rank, "%s: %s (%s:%d)", #call, cudaGetErrorName(e_), __FILE__, __LINE__); \
	} while (0)
#define NC(rank, call)                                                                                   \
	do {                                                                                             \
		ncclResult_t r_ = (call);                                                                \
		if (r_ != ncclSuccess)                                                                   \
			FAIL(rank, "%s: %s (%s:%d)", #call, ncclGetErrorString(r_), __FILE__, __LINE__); \
	} while (0)

static bool control_file(const char *name)
{
	char p[4200];
	snprintf(p, sizeof(p), "%s/%s", ctl, name);
	return access(p, F_OK) == 0;
}

static int wait_for(const char *name)
{
	for (int waited = 0; waited < timeout_s * 100; waited++) {
		if (control_file(name))
			return 0;
		usleep(10000);
	}
	return -1;
}

static void pattern(unsigned char *p, size_t n, int rank, int round);

/* NCCL_GROUP_BUSY=1: work until name appears (see the top). 0, or -1 with the
 * failure said in why. */
static int busy_until(const char *name, int rank, ncclComm_t comm, cudaStream_t s, void *buf, unsigned char *host,
		      unsigned char *back, char *why, size_t whylen)
{
	const char *e = getenv("NCCL_GROUP_BUSY");
	if (!e || strcmp(e, "1") != 0)
		return wait_for(name) < 0 ? (snprintf(why, whylen, "no %s within %d s", name, timeout_s), -1) : 0;
	size_t n = size < 65536 ? size : 65536;
	unsigned long rounds = 0;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;; rounds++) {
		if (control_file(name))
			break;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > timeout_s) {
			snprintf(why, whylen, "no %s within %d s", name, timeout_s);
			return -1;
		}
		cudaError_t ce = cudaSuccess;
		ncclResult_t nr = ncclSuccess;
		if (rounds < 32)
			nr = ncclAllReduce(buf, buf, n / sizeof(float), ncclFloat, ncclSum, comm, s);
		pattern(host, n, rank, (int)(rounds % 200) + 1);
		if (nr == ncclSuccess)
			ce = cudaMemcpyAsync(buf, host, n, cudaMemcpyHostToDevice, s);
		if (nr == ncclSuccess && ce == cudaSuccess)
			ce = cudaStreamSynchronize(s);
		if (nr == ncclSuccess && ce == cudaSuccess)
			ce = cudaMemcpy(back, buf, n, cudaMemcpyDeviceToHost);
		if (nr != ncclSuccess || ce != cudaSuccess) {
			snprintf(why, whylen, "busy round %lu: %s", rounds,
				 nr != ncclSuccess ? ncclGetErrorString(nr) : cudaGetErrorString(ce));
			return -1;
		}
		if (memcmp(back, host, n) != 0) {
			snprintf(why, whylen, "busy round %lu: the bytes read back differ", rounds);
			return -1;
		}
		usleep(500);
	}
	printf("nccl_group rank %d: busy until %s: %lu rounds, none failed\n", rank, name, rounds);
	pattern(host, size, rank, 0); /* (the bytes checked after release) */
	return cudaMemcpy(buf, host, size, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -1;
}

static void pattern(unsigned char *p, size_t n, int rank, int round)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 31 + rank * 7 + round);
}

/* The live allocations cuemu holds for this process (-1 on a real driver). */
static int live_allocations(void)
{
	int (*live)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "cuemu_live_allocations");
	return live ? live() : -1;
}

static int resolve(void **fn, const char *name)
{
	enum cudaDriverEntryPointQueryResult q;
	return cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
			       q == cudaDriverEntryPointSuccess && *fn
		       ? 0
		       : -1;
}

static int driver_calls(void)
{
	return resolve((void **)&drv.retain, "cuMemRetainAllocationHandle") |
	       resolve((void **)&drv.export_fd, "cuMemExportToShareableHandle") |
	       resolve((void **)&drv.import_fd, "cuMemImportFromShareableHandle") |
	       resolve((void **)&drv.release, "cuMemRelease") | resolve((void **)&drv.reserve, "cuMemAddressReserve") |
	       resolve((void **)&drv.map, "cuMemMap") | resolve((void **)&drv.set_access, "cuMemSetAccess") |
	       resolve((void **)&drv.unmap, "cuMemUnmap") | resolve((void **)&drv.free_range, "cuMemAddressFree") |
	       resolve((void **)&drv.range, "cuMemGetAddressRange");
}

static int send_fd(int sock, int fd)
{
	char byte = 'F', cbuf[CMSG_SPACE(sizeof(int))] = {0};
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char byte, cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	int fd = -1;
	struct cmsghdr *c = recvmsg(sock, &m, 0) == 1 ? CMSG_FIRSTHDR(&m) : NULL;
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/* Buffer buf (allocated by NCCL) exported to the next rank over to_next, and
 * the previous rank's imported and mapped at *peer (its size *len). 0, or -1. */
static int share_with_neighbours(int rank, int device, void *buf, int to_next, int from_prev, CUdeviceptr *peer,
				 size_t *len)
{
	CUmemGenericAllocationHandle h, imported;
	CUdeviceptr base;
	int fd = -1;
	if (drv.range(&base, len, (CUdeviceptr)(uintptr_t)buf) || drv.retain(&h, buf) ||
	    drv.export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) || drv.release(h) ||
	    send_fd(to_next, fd) < 0) {
		fprintf(stderr, "nccl_group rank %d: cannot export its NCCL buffer to the next rank\n", rank);
		return -1;
	}
	close(fd);
	int in = recv_fd(from_prev);
	CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
			      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	if (in < 0 || drv.import_fd(&imported, (void *)(uintptr_t)in, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
	    drv.reserve(peer, *len, 0, 0, 0) || drv.map(*peer, *len, 0, imported, 0) ||
	    drv.set_access(*peer, *len, &rw, 1) || drv.release(imported)) {
		fprintf(stderr, "nccl_group rank %d: cannot import the previous rank's NCCL buffer\n", rank);
		return -1;
	}
	close(in);
	return 0;
}

/* A communicator ended. Its ranks on other nodes reach each other over
 * NET/Socket, whose network proxy waits for data that kernels would move: on
 * cuemu they never run, so NCCL's destroy (and finalize) would wait for ever
 * (DESIGN.md §15); such a communicator is aborted, which stops its proxy. */
static ncclResult_t comm_end(ncclComm_t c)
{
	return world > nranks ? ncclCommAbort(c) : ncclCommDestroy(c);
}

/* Every rank past counter c (a barrier over the ranks' shared memory). */
static int all_reach(volatile int *c)
{
	__atomic_add_fetch(c, 1, __ATOMIC_ACQ_REL);
	for (int waited = 0; __atomic_load_n(c, __ATOMIC_ACQUIRE) < nranks; waited++) {
		if (waited > timeout_s * 100)
			return -1;
		usleep(10000);
	}
	return 0;
}

/* NCCL's unique id for this share's first rank into *id: made by the share
 * holding rank 0 (and written to id_file when there is one), else read from
 * id_file once it is there. */
static int unique_id(int rank, ncclUniqueId *id)
{
	if (first == 0) {
		NC(rank, ncclGetUniqueId(id));
		if (!id_file)
			return 0;
		char tmp[4200];
		snprintf(tmp, sizeof(tmp), "%s.tmp", id_file);
		int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, id, sizeof(*id)) != (ssize_t)sizeof(*id) || close(fd) < 0 ||
		    rename(tmp, id_file) < 0)
			FAIL(rank, "cannot write %s: %s", id_file, strerror(errno));
		return 0;
	}
	for (int waited = 0; waited < timeout_s * 100; waited++) {
		int fd = open(id_file, O_RDONLY | O_CLOEXEC);
		ssize_t got = fd < 0 ? -1 : read(fd, id, sizeof(*id));
		if (fd >= 0)
			close(fd);
		if (got == (ssize_t)sizeof(*id))
			return 0;
		usleep(10000);
	}
	FAIL(rank, "no unique id in %s within %d s", id_file, timeout_s);
}

static int rank_main(int local, struct shared *sh, int to_next, int from_prev)
{
	int ndev = 0, rank = first + local;
	RT(rank, cudaGetDeviceCount(&ndev));
	if (ndev < 1)
		FAIL(rank, "no device");
	RT(rank, cudaSetDevice(local % ndev));
	if (local == 0) {
		if (unique_id(rank, &sh->id) != 0)
			return 1;
		__atomic_store_n(&sh->have_id, 1, __ATOMIC_RELEASE);
	}
	for (int waited = 0; !__atomic_load_n(&sh->have_id, __ATOMIC_ACQUIRE); waited++) {
		if (waited > timeout_s * 100)
			FAIL(rank, "no unique id from rank 0");
		usleep(10000);
	}
	ncclComm_t comm;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	NC(rank, ncclCommInitRank(&comm, world, sh->id, rank));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("nccl_group rank %d: ncclCommInitRank %.1f ms\n", rank,
	       (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	cudaStream_t s;
	RT(rank, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	void *buf = NULL;
	NC(rank, ncclMemAlloc(&buf, size));
	void *reg = NULL;
	NC(rank, ncclCommRegister(comm, buf, size, &reg));
	ncclWindow_t win = NULL;
	ncclResult_t wr = ncclCommWindowRegister(comm, buf, size, &win, NCCL_WIN_COLL_SYMMETRIC);
	if (wr != ncclSuccess && wr != ncclInvalidUsage && wr != ncclInvalidArgument)
		FAIL(rank, "ncclCommWindowRegister: %s", ncclGetErrorString(wr));
	unsigned char *host = malloc(size), *back = malloc(size);
	if (!host || !back)
		FAIL(rank, "out of memory");
	CUdeviceptr peer = 0;
	size_t peer_len = 0;
	if (driver_calls() < 0)
		FAIL(rank, "the driver's VMM calls cannot be resolved through the runtime");
	if (nranks > 1 && share_with_neighbours(rank, local % ndev, buf, to_next, from_prev, &peer, &peer_len) < 0)
		FAIL(rank, "sharing with its neighbours failed");
	pattern(host, size, rank, 0);
	RT(rank, cudaMemcpy(buf, host, size, cudaMemcpyHostToDevice));
	/* Collectives enqueued (kernels never run on the emulator: no effect). */
	NC(rank, ncclAllReduce(buf, buf, size / sizeof(float), ncclFloat, ncclSum, comm, s));
	RT(rank, cudaStreamSynchronize(s));
	RT(rank, cudaMemcpy(buf, host, size, cudaMemcpyHostToDevice));
	printf("nccl_group rank %d: set up (device %d, %zu bytes, window %s)\n", rank, local % ndev, size,
	       win ? "registered" : "not supported");
	fflush(stdout);
	__atomic_add_fetch(&sh->set_up, 1, __ATOMIC_ACQ_REL);
	if (local == 0) {
		while (__atomic_load_n(&sh->set_up, __ATOMIC_ACQUIRE) < nranks)
			usleep(10000);
		char p[4200];
		snprintf(p, sizeof(p), "%s/ready-for-snapshot", ctl);
		int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			FAIL(rank, "cannot write %s: %s", p, strerror(errno));
		close(fd);
	}
	char why[200];
	if (busy_until("restore-complete", rank, comm, s, buf, host, back, why, sizeof(why)) < 0)
		FAIL(rank, "%s", why);
	/* After release: the bytes, then NCCL works on. */
	RT(rank, cudaMemcpy(back, buf, size, cudaMemcpyDeviceToHost));
	if (memcmp(back, host, size) != 0)
		FAIL(rank, "the buffer's bytes changed");
	if (nranks > 1) {
		/* A mark through the import of the previous rank's buffer; the next
		 * rank's found in this one's. */
		unsigned char mark[MARK_BYTES], want[MARK_BYTES];
		if (all_reach(&sh->checked) < 0)
			FAIL(rank, "the other ranks did not check their bytes within %d s", timeout_s);
		memset(mark, 0xC0 + local, sizeof(mark));
		memset(want, 0xC0 + (local + 1) % nranks, sizeof(want));
		RT(rank,
		   cudaMemcpy((void *)(uintptr_t)(peer + size - MARK_BYTES), mark, MARK_BYTES, cudaMemcpyHostToDevice));
		if (all_reach(&sh->marked) < 0)
			FAIL(rank, "the other ranks did not write their marks within %d s", timeout_s);
		RT(rank, cudaMemcpy(back, (char *)buf + size - MARK_BYTES, MARK_BYTES, cudaMemcpyDeviceToHost));
		if (memcmp(back, want, MARK_BYTES) != 0)
			FAIL(rank,
			     "rank %d's mark, written through its import, is not in this rank's buffer: the "
			     "memory is no longer shared",
			     first + (local + 1) % nranks);
		if (drv.unmap(peer, peer_len) || drv.free_range(peer, peer_len))
			FAIL(rank, "cannot unmap its import");
	}
	NC(rank, ncclAllReduce(buf, buf, size / sizeof(float), ncclFloat, ncclSum, comm, s));
	RT(rank, cudaStreamSynchronize(s));
	/* NCCL's bootstrap network again: a communicator split off this one. */
	ncclComm_t split;
	NC(rank, ncclCommSplit(comm, 0, rank, &split, NULL));
	int count = 0;
	NC(rank, ncclCommCount(split, &count));
	printf("nccl_group rank %d: split off %d ranks\n", rank, count);
	NC(rank, ncclAllReduce(buf, buf, size / sizeof(float), ncclFloat, ncclSum, split, s));
	RT(rank, cudaStreamSynchronize(s));
	NC(rank, comm_end(split));
	printf("nccl_group rank %d: after release: bytes, marks through imports, ncclCommSplit and collectives on both "
	       "communicators\n",
	       rank);
	if (win)
		NC(rank, ncclCommWindowDeregister(comm, win));
	NC(rank, ncclCommDeregister(comm, reg));
	NC(rank, ncclMemFree(buf));
	NC(rank, comm_end(comm));
	RT(rank, cudaStreamDestroy(s));
	int live = live_allocations();
	if (live > 0)
		FAIL(rank, "%d allocation(s) still live in the driver after teardown", live);
	printf("PASS nccl_group rank %d\n", rank);
	free(host);
	free(back);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"ranks", required_argument, NULL, 'r'},
					     {"size", required_argument, NULL, 's'},
					     {"timeout", required_argument, NULL, 't'},
					     {"world", required_argument, NULL, 'w'},
					     {"first", required_argument, NULL, 'f'},
					     {"id-file", required_argument, NULL, 'i'},
					     {NULL, 0, NULL, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r': nranks = atoi(optarg); break;
		case 's': size = strtoull(optarg, NULL, 0); break;
		case 't': timeout_s = atoi(optarg); break;
		case 'w': world = atoi(optarg); break;
		case 'f': first = atoi(optarg); break;
		case 'i': id_file = optarg; break;
		default:
			fprintf(stderr,
				"usage: nccl_group [--ranks N] [--size BYTES] [--timeout S] [--world W --first F "
				"--id-file PATH]\n");
			return 64;
		}
	}
	if (!world)
		world = nranks;
	ctl = getenv("SNAPSHOT_CONTROL_DIR");
	if (!ctl || !*ctl || nranks < 1 || nranks > 64 || size < 4096 || first < 0 || first + nranks > world ||
	    (world > nranks && !id_file)) {
		fprintf(stderr, "nccl_group: needs SNAPSHOT_CONTROL_DIR, 1 to 64 ranks, a size of 4096 bytes or more, "
				"and a share of the world (ranks F to F + N - 1 of W) with --id-file where it is not "
				"all of it\n");
		return 64;
	}
	mkdir(ctl, 0700);
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	/* links[r]: rank r (end 0) to rank r + 1 (end 1), for the buffer's FD. */
	int links[64][2];
	for (int r = 0; r < nranks; r++)
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, links[r]) < 0)
			return 1;
	pid_t kids[64];
	for (int r = 0; r < nranks; r++) {
		kids[r] = fork();
		if (kids[r] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			int rc = rank_main(r, sh, links[r][0], links[(r + nranks - 1) % nranks][1]);
			fflush(NULL); /* (buffered output goes with _exit otherwise) */
			_exit(rc);
		}
	}
	int failed = 0;
	for (int r = 0; r < nranks; r++) {
		int st;
		if (waitpid(kids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			failed++;
	}
	printf("%s nccl_group: %d of %d ranks passed\n", failed ? "FAIL" : "PASS", nranks - failed, nranks);
	return failed ? 1 : 0;
}
