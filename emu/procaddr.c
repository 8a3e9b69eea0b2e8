/* SPDX-License-Identifier: MIT */
/* cuGetProcAddress: the driver's name -> entry point resolver, by CUDA version
 * and stream flags.
 *
 * Like NVIDIA's driver, it hands out internal entry points, not the exported
 * symbols: a pointer from cuGetProcAddress is not the pointer dlsym returns, so
 * an interposer that recognises functions by comparing pointers misses them (the
 * shim must substitute by name). The emulator is linked -Bsymbolic-functions, so
 * these entry points reach cuemu's own functions even when a preloaded library
 * exports the same names. With CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
 * stream-ordered calls (EMU_PTDS in api.def) get a second, distinct entry point,
 * as the driver's _ptsz/_ptds variants; cuemu's default stream is the same for
 * every thread, so both behave alike. */
#include <string.h>

#include "emu.h"

/* cuda.h maps these names to their newest ABI; the table needs the real symbols. */
#undef cuGetProcAddress
#undef cuDeviceGetUuid
#undef cuStreamGetCaptureInfo
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out);

#if defined(__x86_64__)
/* Two trampolines per entry point: emu_ep_<sym> (legacy stream) and
 * emu_pt_<sym> (per-thread stream), each a tail jump to the function. */
#define TRAMPOLINE(prefix, sym)                                                              \
	".globl " prefix #sym "\n.hidden " prefix #sym "\n.type " prefix #sym ",@function\n" \
	".p2align 4\n" prefix #sym ":\n\tjmp " #sym "\n.size " prefix #sym ",.-" prefix #sym "\n"
#define X(sym, name, ver, fl) __asm__(".text\n" TRAMPOLINE("emu_ep_", sym) TRAMPOLINE("emu_pt_", sym));
#include "api.def"
#undef X
/* The per-thread ABIs as the driver exports them (<symbol>_ptds, _ptsz): the
 * same functions here, cuemu's default stream being one for every thread. */
#define EXPORTED(name, sym) \
	".globl " name "\n.type " name ",@function\n.p2align 4\n" name ":\n\tjmp " #sym "\n.size " name ",.-" name "\n"
__asm__(".set EMU_NOINIT, 1\n.set EMU_NOGATE, 2\n.set EMU_PTDS, 4\n.set EMU_NEEDCTX, 8\n.set EMU_NOREVOKE, 16\n"
	".set EMU_PTSZ, 32\n"); /* (api.def's flags, for the assembler: emu.h's values) */
_Static_assert(EMU_NOINIT == 1 && EMU_NOGATE == 2 && EMU_PTDS == 4 && EMU_NEEDCTX == 8 && EMU_NOREVOKE == 16 &&
		       EMU_PTSZ == 32,
	       "the assembler's copy of api.def's flags");
#define X(sym, name, ver, fl)                                                                          \
	__asm__(".text\n.if ((" #fl                                                                    \
		") & EMU_PTDS)\n" EXPORTED(#sym "_ptds", sym) ".endif\n"                               \
							      ".if ((" #fl                             \
							      ") & EMU_PTSZ)\n" EXPORTED(#sym "_ptsz", \
											 sym) ".endif\n");
#include "api.def"
#undef X
#define X(sym, name, ver, fl)                                          \
	__attribute__((visibility("hidden"))) void emu_ep_##sym(void); \
	__attribute__((visibility("hidden"))) void emu_pt_##sym(void);
#include "api.def"
#undef X
#define ENTRY(sym) (void *)emu_ep_##sym
#define ENTRY_PTDS(sym) (void *)emu_pt_##sym
#else
/* Elsewhere the functions themselves (-Bsymbolic-functions still keeps them cuemu's). */
#define ENTRY(sym) (void *)sym
#define ENTRY_PTDS(sym) (void *)sym
#endif

struct entry {
	const char *name;
	int version;
	unsigned flags;
	void *fn, *fn_ptds;
};

static const struct entry table[] = {
#define X(sym, name, ver, fl) {#name, ver, fl, ENTRY(sym), ENTRY_PTDS(sym)},
#include "api.def"
#undef X
};

/* The entry for symbol with the newest ABI not newer than version. */
static CUresult resolve(const char *symbol, void **pfn, int version, cuuint64_t flags,
			CUdriverProcAddressQueryResult *status)
{
	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	/* DEFAULT (0), LEGACY_STREAM or PER_THREAD_DEFAULT_STREAM: one mode at a time. */
	if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ||
	    flags == (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
		return CUDA_ERROR_INVALID_VALUE;
	const struct entry *best = NULL;
	bool known = false;
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		if (strcmp(table[i].name, symbol) != 0)
			continue;
		known = true;
		if (table[i].version <= version && (!best || table[i].version > best->version))
			best = &table[i];
	}
	bool ptds = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	*pfn = !best ? NULL : ptds && (best->flags & (EMU_PTDS | EMU_PTSZ)) ? best->fn_ptds : best->fn;
	if (status)
		*status = best    ? CU_GET_PROC_ADDRESS_SUCCESS
			  : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
				  : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EMU_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				     CUdriverProcAddressQueryResult *symbolStatus)
{
	EMU_CALL(cuGetProcAddress_v2, resolve(symbol, pfn, cudaVersion, flags, symbolStatus));
}

EMU_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	EMU_CALL(cuGetProcAddress, resolve(symbol, pfn, cudaVersion, flags, NULL));
}
