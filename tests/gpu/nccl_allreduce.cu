// SPDX-License-Identifier: MIT
// On a GPU host only (tests/gpu/run.sh G11): the host's own NCCL (libnccl.so.2)
// and CUDA runtime, one rank per GPU, an all-reduce whose result the kernels
// check, before a suspend and after each restore (the workload parks on the
// control files between). Never built against or run on cuemu.
//
//   nccl_allreduce RANKS    (SNAPSHOT_CONTROL_DIR: the control directory)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <csignal>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

__global__ void fill(float *p, size_t n, float v)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = v;
}

__global__ void count_wrong(const float *p, size_t n, float want, unsigned long long *wrong)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		if (p[i] != want)
			atomicAdd(wrong, 1ull);
}

struct shared {
	volatile int have_id, set_up;
	ncclUniqueId id;
};

static const char *ctl;
static int nranks;

#define TRY(cond, ...)                                                \
	do {                                                          \
		if (!(cond)) {                                        \
			std::fprintf(stderr, "FAIL rank %d: ", rank); \
			std::fprintf(stderr, __VA_ARGS__);            \
			std::fprintf(stderr, "\n");                   \
			return 1;                                     \
		}                                                     \
	} while (0)

static bool exists(const char *name)
{
	char p[4200];
	std::snprintf(p, sizeof(p), "%s/%s", ctl, name);
	return access(p, F_OK) == 0;
}

// One all-reduce of rank+1 from every rank, checked by a kernel: the number of wrong elements.
static long long round_trip(ncclComm_t comm, float *buf, size_t n, int rank, cudaStream_t s, unsigned long long *wrong)
{
	fill<<<64, 256, 0, s>>>(buf, n, (float)(rank + 1));
	if (ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, s) != ncclSuccess)
		return -1;
	cudaMemsetAsync(wrong, 0, sizeof(*wrong), s);
	count_wrong<<<64, 256, 0, s>>>(buf, n, (float)(nranks * (nranks + 1) / 2), wrong);
	unsigned long long h = 0;
	cudaMemcpyAsync(&h, wrong, sizeof(h), cudaMemcpyDeviceToHost, s);
	if (cudaStreamSynchronize(s) != cudaSuccess)
		return -1;
	return (long long)h;
}

static int rank_main(int rank, shared *sh)
{
	TRY(cudaSetDevice(rank) == cudaSuccess, "cudaSetDevice(%d)", rank);
	if (rank == 0) {
		TRY(ncclGetUniqueId(&sh->id) == ncclSuccess, "ncclGetUniqueId");
		__atomic_store_n(&sh->have_id, 1, __ATOMIC_RELEASE);
	}
	while (!__atomic_load_n(&sh->have_id, __ATOMIC_ACQUIRE))
		usleep(1000);
	ncclComm_t comm;
	TRY(ncclCommInitRank(&comm, nranks, sh->id, rank) == ncclSuccess, "ncclCommInitRank");
	size_t n = 1 << 22;
	float *buf = nullptr;
	unsigned long long *wrong = nullptr;
	TRY(ncclMemAlloc((void **)&buf, n * sizeof(float)) == ncclSuccess, "ncclMemAlloc");
	TRY(cudaMalloc(&wrong, sizeof(*wrong)) == cudaSuccess, "cudaMalloc");
	cudaStream_t s;
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	long long w = round_trip(comm, buf, n, rank, s, wrong);
	TRY(w == 0, "all-reduce before the suspend: %lld wrong elements", w);
	__atomic_add_fetch(&sh->set_up, 1, __ATOMIC_ACQ_REL);
	if (rank == 0) {
		while (__atomic_load_n(&sh->set_up, __ATOMIC_ACQUIRE) < nranks)
			usleep(1000);
		char p[4200];
		std::snprintf(p, sizeof(p), "%s/ready-for-snapshot", ctl);
		close(open(p, O_WRONLY | O_CREAT, 0600));
	}
	while (!exists("restore-complete"))
		usleep(10000);
	w = round_trip(comm, buf, n, rank, s, wrong);
	TRY(w == 0, "all-reduce after the restore: %lld wrong elements", w);
	/* NCCL's bootstrap network (restored TCP connections after a CRIU restore):
	 * a communicator split off this one, and an all-reduce over it. */
	ncclComm_t split;
	TRY(ncclCommSplit(comm, 0, rank, &split, nullptr) == ncclSuccess, "ncclCommSplit after the restore");
	w = round_trip(split, buf, n, rank, s, wrong);
	TRY(w == 0, "all-reduce on the split communicator: %lld wrong elements", w);
	/* Ended as a real job ends them, finalized first (on cuemu a communicator
	 * over NET/Socket never finalizes: its proxy waits for what kernels move). */
	TRY(ncclCommFinalize(split) == ncclSuccess, "ncclCommFinalize of the split communicator");
	ncclCommDestroy(split);
	ncclMemFree(buf);
	cudaFree(wrong);
	TRY(ncclCommFinalize(comm) == ncclSuccess, "ncclCommFinalize after the restore");
	ncclCommDestroy(comm);
	std::printf("PASS nccl_allreduce rank %d\n", rank);
	return 0;
}

int main(int argc, char **argv)
{
	ctl = std::getenv("SNAPSHOT_CONTROL_DIR");
	nranks = argc > 1 ? std::atoi(argv[1]) : 0;
	if (!ctl || nranks < 1 || nranks > 64) {
		std::fprintf(stderr, "usage: SNAPSHOT_CONTROL_DIR=DIR nccl_allreduce RANKS\n");
		return 64;
	}
	shared *sh = (shared *)mmap(nullptr, sizeof(shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t kids[64];
	for (int r = 0; r < nranks; r++)
		if ((kids[r] = fork()) == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			int rc = rank_main(r, sh);
			std::fflush(nullptr);
			_exit(rc);
		}
	int failed = 0;
	for (int r = 0; r < nranks; r++) {
		int st;
		failed += waitpid(kids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	return failed ? 1 : 0;
}
