/* SPDX-License-Identifier: MIT */
/* vmm_group --ipc (part of vmm_group.c, included there after its helpers):
 * what vLLM's custom all-reduce does with legacy CUDA IPC. Every process
 * allocates a buffer and a small signal area with cuMemAlloc, gets their IPC
 * handles, and sends them to the parent, which gives every process the whole
 * table; each process opens every peer's buffer and signal area, checks the
 * peer's bytes and writes a flag into the peer's signal area at its own rank.
 * After the restore: own bytes and flags kept, peers' bytes still visible at
 * the addresses opened before, live writes both ways, and every handle closed
 * and opened again from the same bytes.
 * VMM_GROUP_IPC_EVENT=1 also makes an interprocess event and gets its handle
 * (event IPC, which cusnap refuses). With --release, rank 0 frees its buffer and
 * signal area once the others opened them (ipc_let_go): the peers keep them
 * through the checkpoint (one of them carries them). */
#ifndef VMM_GROUP_IPC_H
#define VMM_GROUP_IPC_H

enum { IPC_BUF = 1 << 20, IPC_SIG = 4096, IPC_MAX = MAX_WORKERS + 1 };

static struct {
	bool on;
	int ranks;
	CUdeviceptr buf, sig;                             /* ours */
	CUipcMemHandle handles[IPC_MAX][2];               /* every rank's buffer and signal area */
	CUdeviceptr peer_buf[IPC_MAX], peer_sig[IPC_MAX]; /* opened (0 for ourselves) */
} ipc;

static uint32_t ipc_word(int rank, size_t i)
{
	return 0x10000000u + (uint32_t)rank * 0x100000u + (uint32_t)i;
}

/* Our buffer (a pattern of our rank) and signal area (zero), and their handles. */
static int ipc_make(int rank)
{
	CU(cuMemAlloc(&ipc.buf, IPC_BUF));
	CU(cuMemAlloc(&ipc.sig, IPC_SIG));
	check(ipc.buf % 256 == 0 && ipc.sig % 256 == 0, "cuMemAlloc pointers are not 256-byte aligned");
	uint32_t *words = malloc(IPC_BUF);
	if (!words)
		return -1;
	for (size_t i = 0; i < IPC_BUF / 4; i++)
		words[i] = ipc_word(rank, i);
	CU(cuMemcpyHtoD(ipc.buf, words, IPC_BUF));
	free(words);
	CU(cuMemsetD8(ipc.sig, 0, IPC_SIG));
	CUdeviceptr base;
	size_t len;
	CU(cuMemGetAddressRange(&base, &len, ipc.buf + 100));
	check(base == ipc.buf && len == IPC_BUF, "cuMemGetAddressRange of the buffer: %#llx+%zu",
	      (unsigned long long)base, len);
	CU(cuIpcGetMemHandle(&ipc.handles[rank][0], ipc.buf));
	CU(cuIpcGetMemHandle(&ipc.handles[rank][1], ipc.sig));
	const char *ev = getenv("VMM_GROUP_IPC_EVENT");
	if (ev && !strcmp(ev, "1") && rank == 0) {
		CUevent e;
		CUipcEventHandle eh;
		CU(cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
		CU(cuIpcGetEventHandle(&eh, e));
	}
	return 0;
}

/* Open every peer's handles (but rank 0's when skip0). */
static int ipc_open_peers(int rank, bool skip0)
{
	for (int p = 0; p < ipc.ranks; p++) {
		if (p == rank || (skip0 && p == 0))
			continue;
		CU(cuIpcOpenMemHandle(&ipc.peer_buf[p], ipc.handles[p][0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
		CU(cuIpcOpenMemHandle(&ipc.peer_sig[p], ipc.handles[p][1], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	}
	return 0;
}

/* The peers' bytes at the addresses we opened them at; our flags into their signals. */
static void ipc_exchange(int rank, size_t flag_slot, uint32_t flag)
{
	for (int p = 0; p < ipc.ranks; p++) {
		if (p == rank)
			continue;
		uint32_t first = rd32(ipc.peer_buf[p]), last = rd32(ipc.peer_buf[p] + IPC_BUF - 4);
		check(first == ipc_word(p, 0) && last == ipc_word(p, IPC_BUF / 4 - 1),
		      "rank %d's buffer through IPC holds %#x..%#x", p, first, last);
		wr32(ipc.peer_sig[p] + (flag_slot + (size_t)rank) * 4, flag + (uint32_t)rank);
	}
}

static bool read_all(int sock, void *to, size_t want)
{
	for (size_t got = 0; got < want;) {
		ssize_t n = read(sock, (char *)to + got, want - got);
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return true;
}

/* Rank 0 gathers every rank's handles and gives every rank the table. */
static int ipc_share(int rank, const int *socks, int sock)
{
	size_t one = sizeof(ipc.handles[0]), all = one * (size_t)ipc.ranks;
	bool ok = true;
	for (int w = 0; rank == 0 && ok && w < workers; w++)
		ok = read_all(socks[w], ipc.handles[w + 1], one);
	for (int w = 0; rank == 0 && ok && w < workers; w++)
		ok = write(socks[w], ipc.handles, all) == (ssize_t)all;
	if (rank != 0)
		ok = write(sock, ipc.handles[rank], one) == (ssize_t)one && read_all(sock, ipc.handles, all);
	check(ok, "exchanging the IPC handles failed");
	return ok ? 0 : -1;
}

static int ipc_setup(int rank, const int *socks, int sock)
{
	ipc.ranks = workers + 1;
	if (ipc_make(rank) < 0 || ipc_share(rank, socks, sock) < 0 || ipc_open_peers(rank, false) < 0)
		return -1;
	ipc_exchange(rank, 0, 0x1100u);
	return 0;
}

/* --release: our buffer and signal area freed; the peers that opened them keep them. */
static int ipc_let_go(void)
{
	CU(cuMemFree(ipc.buf));
	CU(cuMemFree(ipc.sig));
	ipc.buf = ipc.sig = 0;
	return 0;
}

/* After the restore, before the live writes: ours (unless freed) and the
 * peers' as before, the peers' flags from before the checkpoint in our signal
 * area. */
static int ipc_verify(int rank)
{
	if (ipc.buf)
		check(rd32(ipc.buf) == ipc_word(rank, 0) &&
			      rd32(ipc.buf + IPC_BUF - 4) == ipc_word(rank, IPC_BUF / 4 - 1),
		      "our buffer lost its bytes");
	for (int p = 0; ipc.sig && p < ipc.ranks; p++) {
		uint32_t v = rd32(ipc.sig + (size_t)p * 4);
		if (p != rank)
			check(v == 0x1100u + (unsigned)p, "rank %d's flag before the checkpoint: %#x", p, v);
	}
	ipc_exchange(rank, (size_t)ipc.ranks, 0x2200u);
	return 0;
}

/* The live writes of the ranks in [from, to) arrived; then every handle is
 * closed and opened again from the same bytes, and the peers' bytes are there. */
static int ipc_finish(int rank, int from, int to)
{
	for (int p = from; ipc.sig && p < to; p++) {
		uint32_t v = rd32(ipc.sig + (size_t)(ipc.ranks + p) * 4);
		if (p != rank)
			check(v == 0x2200u + (unsigned)p, "rank %d's write after the restore is not visible (%#x)", p,
			      v);
	}
	for (int p = 0; p < ipc.ranks; p++) {
		if (p == rank)
			continue;
		CU(cuIpcCloseMemHandle(ipc.peer_buf[p]));
		CU(cuIpcCloseMemHandle(ipc.peer_sig[p]));
	}
	/* Rank 0's handles, once it freed the memory, resolve only while a peer
	 * holds it (as its creator's would): they are not opened again. */
	if (ipc_open_peers(rank, release) < 0)
		return -1;
	for (int p = 0; p < ipc.ranks; p++) {
		if (p == rank || (release && p == 0))
			continue;
		check(rd32(ipc.peer_buf[p] + 4) == ipc_word(p, 1), "rank %d's buffer opened again holds other bytes",
		      p);
		CU(cuIpcCloseMemHandle(ipc.peer_buf[p]));
		CU(cuIpcCloseMemHandle(ipc.peer_sig[p]));
	}
	return 0;
}

#endif
