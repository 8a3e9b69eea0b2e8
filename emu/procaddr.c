/* cuGetProcAddress: the driver's name -> entry point resolver, by CUDA version. */
#include <string.h>

#include "emu.h"

/* cuda.h maps these names to their newest ABI; the table needs the real symbols. */
#undef cuGetProcAddress
#undef cuDeviceGetUuid
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);

struct entry {
	const char *name;
	int version;
	void *fn;
};

static const struct entry table[] = {
#define X(sym, name, ver, flags) {#name, ver, (void *)sym},
#include "api.def"
#undef X
};

/* The entry for symbol with the newest ABI not newer than version. */
static CUresult resolve(const char *symbol, void **pfn, int version, CUdriverProcAddressQueryResult *status)
{
	if (!symbol || !pfn)
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
	*pfn = best ? best->fn : NULL;
	if (status)
		*status = best ? CU_GET_PROC_ADDRESS_SUCCESS
			       : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

EMU_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				     CUdriverProcAddressQueryResult *symbolStatus)
{
	/* Per-thread default stream variants resolve to the same functions: the
	 * emulator's default stream is the same for every thread. */
	(void)flags;
	EMU_CALL(cuGetProcAddress_v2, resolve(symbol, pfn, cudaVersion, symbolStatus));
}

EMU_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	(void)flags;
	EMU_CALL(cuGetProcAddress, resolve(symbol, pfn, cudaVersion, NULL));
}
