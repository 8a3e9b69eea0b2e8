/* SPDX-License-Identifier: MIT */
/* The project's CUDA runtime (libcudart.so.13; DESIGN.md §15): the runtime API
 * that clients' host code calls (NCCL's), over the driver API, and the
 * registration entry points nvcc's host stubs call (crt/host_runtime.h).
 * Nothing private: no export tables; the driver is reached through
 * cuGetProcAddress by name and version, as documented. */
#ifndef CUSNAP_CUDART_RT_H
#define CUSNAP_CUDART_RT_H

#include <stdbool.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#define RT_API __attribute__((visibility("default")))
#define RT_VERSION 13000 /* the CUDA version this runtime implements */

/* The driver, one pointer per entry point of driver.def (its ABI at that version). */
struct rt_driver {
#define D(sym, name, ver) PFN_##name##_v##ver sym;
#include "driver.def"
#undef D
};
extern struct rt_driver drv;

/* driver.c */
/* Load the driver and cuInit it (once): cudaSuccess, or the error every call
 * then returns (no driver: cudaErrorInsufficientDriver). */
cudaError_t rt_init(void);
/* The same for a call that answers into out: cudaErrorInvalidValue without it.
 * Either error is recorded (rt_result). */
cudaError_t rt_init_for(const void *out);
/* A call's result: err recorded as the thread's last error when it is one. */
cudaError_t rt_result(cudaError_t err);
/* The same for a driver result (CUresult values and cudaError_t values agree
 * where both name the same condition). */
cudaError_t rt_cu(CUresult rc);

/* Return the error from a function when no context can be made current. */
#define CTX_OR_RETURN()                        \
	do {                                   \
		cudaError_t e_ = rt_context(); \
		if (e_)                        \
			return e_;             \
	} while (0)

/* The same for a call that answers into out: cudaErrorInvalidValue without it. */
#define CTX_FOR_OR_RETURN(out)                                   \
	do {                                                     \
		if (!(out))                                      \
			return rt_result(cudaErrorInvalidValue); \
		CTX_OR_RETURN();                                 \
	} while (0)

/* A runtime call that is its driver call on its one argument, in the thread's
 * context. */
#define RT_FORWARD(name, type, call)                \
	RT_API cudaError_t CUDARTAPI name(type arg) \
	{                                           \
		CTX_OR_RETURN();                    \
		return rt_cu(drv.call(arg));        \
	}

/* device.c */
/* The context calls of this thread run in: the current driver context if the
 * application made one current, else the primary context of the thread's
 * device (retained, made current). cudaSuccess or the error. */
cudaError_t rt_context(void);
/* The thread's device (after rt_context: the current context's). */
int rt_device(void);

/* launch.c */
/* The driver function of a registered host stub in the current context. */
cudaError_t rt_function(const void *host_fun, CUfunction *out, CUkernel *kernel);

#endif
