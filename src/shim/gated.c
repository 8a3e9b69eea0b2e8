/* SPDX-License-Identifier: MIT */
/* The calls that can touch memory a lifecycle step takes down: copies, sets,
 * kernel and graph launches, stream memory operations (wrapped.def GATED).
 * Each is passed to the driver unchanged, its arguments untranslated (they name
 * addresses, never handles), but it waits at the gate while the process is not
 * ACTIVE and is counted in flight meanwhile, so that QUIESCE drains it before
 * anything is unmapped (DESIGN.md §6.1). A driver without the function
 * answers CUDA_ERROR_NOT_FOUND, as a resolver would. */
#include "shim.h"

#define DRV(sym, name, since)
#define RT(sym)
#define GATED(sym, name, since, params, args)                                                \
	SHIM_API CUresult sym params                                                         \
	{                                                                                    \
		if (__builtin_expect(!real.sym, 0) && (!shim_resolve_driver() || !real.sym)) \
			return CUDA_ERROR_NOT_FOUND;                                         \
		CUresult rc_ = CUDA_SUCCESS;                                                 \
		struct work_slot *slot_ = shim_work_begin(&rc_);                             \
		if (!slot_)                                                                  \
			return rc_;                                                          \
		rc_ = real.sym args;                                                         \
		shim_work_end(slot_);                                                        \
		return rc_;                                                                  \
	}
#define GATED_PTDS GATED
#include "wrapped.def"
#undef DRV
#undef RT
