/* SPDX-License-Identifier: MIT */
/* nccl_group: N ranks of one NCCL communicator, zdtm-style (DESIGN.md §15).
 *
 *   nccl_group [--ranks N] [--size BYTES] [--timeout S]
 *
 * The ranks are forked before CUDA is initialised (as vLLM does). Each takes
 * device rank % count, joins the communicator (ncclCommInitRank; rank 0's
 * unique id passed through shared memory), allocates with ncclMemAlloc,
 * registers the buffer (ncclCommRegister, and ncclCommWindowRegister where the
 * communicator supports symmetric windows), enqueues collectives, and fills the
 * buffer with its pattern. Then it writes ready-for-snapshot (rank 0, once every
 * rank is set up) and parks until restore-complete appears in the control
 * directory ($SNAPSHOT_CONTROL_DIR). After release each rank checks its bytes,
 * enqueues again, and tears down through NCCL (deregister, ncclMemFree,
 * ncclCommDestroy); the driver must then hold no live allocation of the rank
 * (cuemu says). Every rank prints "PASS nccl_group rank R" or "FAIL ...".
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

struct shared {
	volatile int have_id;
	volatile int set_up; /* ranks done setting up */
	ncclUniqueId id;
};

static int nranks = 2, timeout_s = 60;
static size_t size = 4 << 20;
static const char *ctl;

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

static int rank_main(int rank, struct shared *sh)
{
	int ndev = 0;
	RT(rank, cudaGetDeviceCount(&ndev));
	if (ndev < 1)
		FAIL(rank, "no device");
	RT(rank, cudaSetDevice(rank % ndev));
	if (rank == 0) {
		NC(rank, ncclGetUniqueId(&sh->id));
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
	NC(rank, ncclCommInitRank(&comm, nranks, sh->id, rank));
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
	pattern(host, size, rank, 0);
	RT(rank, cudaMemcpy(buf, host, size, cudaMemcpyHostToDevice));
	/* Collectives enqueued (kernels never run on the emulator: no effect). */
	NC(rank, ncclAllReduce(buf, buf, size / sizeof(float), ncclFloat, ncclSum, comm, s));
	RT(rank, cudaStreamSynchronize(s));
	RT(rank, cudaMemcpy(buf, host, size, cudaMemcpyHostToDevice));
	printf("nccl_group rank %d: set up (device %d, %zu bytes, window %s)\n", rank, rank % ndev, size,
	       win ? "registered" : "not supported");
	fflush(stdout);
	__atomic_add_fetch(&sh->set_up, 1, __ATOMIC_ACQ_REL);
	if (rank == 0) {
		while (__atomic_load_n(&sh->set_up, __ATOMIC_ACQUIRE) < nranks)
			usleep(10000);
		char p[4200];
		snprintf(p, sizeof(p), "%s/ready-for-snapshot", ctl);
		int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			FAIL(rank, "cannot write %s: %s", p, strerror(errno));
		close(fd);
	}
	if (wait_for("restore-complete") < 0)
		FAIL(rank, "no restore-complete within %d s", timeout_s);
	/* After release: the bytes, then NCCL works on. */
	RT(rank, cudaMemcpy(back, buf, size, cudaMemcpyDeviceToHost));
	if (memcmp(back, host, size) != 0)
		FAIL(rank, "the buffer's bytes changed");
	NC(rank, ncclAllReduce(buf, buf, size / sizeof(float), ncclFloat, ncclSum, comm, s));
	RT(rank, cudaStreamSynchronize(s));
	if (win)
		NC(rank, ncclCommWindowDeregister(comm, win));
	NC(rank, ncclCommDeregister(comm, reg));
	NC(rank, ncclMemFree(buf));
	NC(rank, ncclCommDestroy(comm));
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
					     {NULL, 0, NULL, 0}};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r': nranks = atoi(optarg); break;
		case 's': size = strtoull(optarg, NULL, 0); break;
		case 't': timeout_s = atoi(optarg); break;
		default: fprintf(stderr, "usage: nccl_group [--ranks N] [--size BYTES] [--timeout S]\n"); return 64;
		}
	}
	ctl = getenv("SNAPSHOT_CONTROL_DIR");
	if (!ctl || !*ctl || nranks < 1 || nranks > 64 || size < 4096) {
		fprintf(stderr,
			"nccl_group: needs SNAPSHOT_CONTROL_DIR, 1 to 64 ranks, a size of 4096 bytes or more\n");
		return 64;
	}
	mkdir(ctl, 0700);
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		return 1;
	pid_t kids[64];
	for (int r = 0; r < nranks; r++) {
		kids[r] = fork();
		if (kids[r] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			int rc = rank_main(r, sh);
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
