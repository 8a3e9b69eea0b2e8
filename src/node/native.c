/* SPDX-License-Identifier: MIT */
/* The native checkpoint API, from libcuda.so.1 loaded at run time: cusnap has no
 * link-time dependency on the driver. */
#include <dlfcn.h>
#include <stdio.h>

#include "internal.h"
#include "cusnap/fdcheck.h"

int native_load(struct native *n, const char *libcuda, char *err, size_t errlen)
{
	/* The driver by path where the library path cannot say (the CRIU plugin,
	 * inside a CRIU run through its own loader). */
	const char *path = libcuda && *libcuda ? libcuda : "libcuda.so.1";
	n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!n->lib) {
		snprintf(err, errlen,
			 "cannot load the CUDA driver (%s): %s; install the NVIDIA driver, or name the driver's "
			 "path in CUSNAP_LIBCUDA (the CRIU plugin: libcuda = PATH in its cusnap.conf, since a CRIU "
			 "run through its own loader ignores LD_LIBRARY_PATH); without a GPU: cuemu, "
			 "build/emu/libcuda.so.1",
			 path, dlerror());
		return -1;
	}
#define SYM(field, name) *(void **)&n->field = dlsym(n->lib, name)
	SYM(init, "cuInit");
	SYM(get_error_name, "cuGetErrorName");
	SYM(restore_tid, "cuCheckpointProcessGetRestoreThreadId");
	SYM(get_state, "cuCheckpointProcessGetState");
	SYM(lock, "cuCheckpointProcessLock");
	SYM(checkpoint, "cuCheckpointProcessCheckpoint");
	SYM(restore, "cuCheckpointProcessRestore");
	SYM(unlock, "cuCheckpointProcessUnlock");
	SYM(device_count, "cuDeviceGetCount");
	SYM(device_get, "cuDeviceGet");
	SYM(device_uuid, "cuDeviceGetUuid_v2");
	SYM(device_name, "cuDeviceGetName");
	SYM(device_memory, "cuDeviceTotalMem_v2");
	SYM(driver_version, "cuDriverGetVersion");
#undef SYM
	if (!n->init || !n->restore_tid || !n->get_state || !n->lock || !n->checkpoint || !n->restore || !n->unlock) {
		snprintf(err, errlen,
			 "libcuda.so.1 has no checkpoint API (cuCheckpointProcess*): a driver of the r570 series or "
			 "newer "
			 "is needed");
		return -1;
	}
	/* No cuInit: the checkpoint API does not need it (NVIDIA's cuda-checkpoint
	 * calls none), and a process that called it holds driver state of its own.
	 * native_devices does, for the device queries alone. */
	fd_check_exempt_open(); /* the driver's own (a real one keeps its device files open) */
	return 0;
}

bool native_devices(const struct native *n)
{
	if (!n->device_count || !n->device_get || !n->device_uuid || n->init(0) != CUDA_SUCCESS)
		return false;
	fd_check_exempt_open();
	return true;
}

const char *native_error(const struct native *n, CUresult r)
{
	const char *s = NULL;
	if (n->get_error_name && n->get_error_name(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "CUDA_ERROR_(unknown)";
}
