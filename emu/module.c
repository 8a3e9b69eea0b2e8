/* SPDX-License-Identifier: MIT */
/* Modules, libraries, kernels and launches, as far as a client's host code
 * needs them (NCCL's, through a runtime): images are accepted and their
 * functions looked up and given attributes; a launch is checked and queued on
 * its stream in order, and has no effect on memory. Kernels never run on the
 * emulator (a documented limit); CUEMU_KERNELS=refuse makes every launch fail
 * instead, for clients that must not believe their kernels ran.
 *
 * The functions of an image are known when it is an ELF cubin (its global
 * function symbols) or PTX text (its .entry directives); for any other image
 * (a fat binary, whose container format is not public) every name resolves. */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

#define FUNC_NAME_MAX 512
/* What cuemu reports of every function: no static shared, local or constant
 * memory; a dynamic shared-memory size of up to the device's default limit
 * until raised to its opt-in maximum (device.c). */
#define SHARED_DEFAULT (48 * 1024)

struct emu_function {
	struct emu_image *image;
	char name[FUNC_NAME_MAX];
	int max_dynamic_shared;
	int carveout;
	int attrs_set; /* cluster attributes set, as given (no effect) */
	int cluster[4];
	struct emu_function *next;
};

struct emu_image {
	bool library; /* cuLibraryLoadData (else cuModuleLoadData) */
	char **names; /* the functions it defines; NULL: unknown (any name) */
	size_t nnames;
	struct emu_function *fns; /* looked up so far (one object per name) */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct hmap images;    /* pointer -> image (modules and libraries) */
static struct hmap functions; /* pointer -> function (CUfunction and CUkernel alike) */

static int add_name(struct emu_image *im, const char *name, size_t len)
{
	if (len == 0 || len >= FUNC_NAME_MAX)
		return 0;
	char **grown = realloc(im->names, (im->nnames + 1) * sizeof(*grown));
	if (!grown)
		return -1;
	im->names = grown;
	if (!(im->names[im->nnames] = strndup(name, len)))
		return -1;
	im->nnames++;
	return 0;
}

/* The global functions of an ELF64 cubin (bounds checked: the image is the
 * client's). 0, or -1 when the image is not a well-formed ELF64. */
static int elf_names(struct emu_image *im, const unsigned char *p)
{
	Elf64_Ehdr eh;
	memcpy(&eh, p, sizeof(eh));
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum > 4096)
		return -1;
	/* The section headers lie at the end of a cubin; its size is where they end. */
	size_t size = eh.e_shoff + (size_t)eh.e_shnum * sizeof(Elf64_Shdr);
	for (unsigned i = 0; i < eh.e_shnum; i++) {
		Elf64_Shdr sh;
		memcpy(&sh, p + eh.e_shoff + i * sizeof(sh), sizeof(sh));
		if (sh.sh_type != SHT_SYMTAB || sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= eh.e_shnum)
			continue;
		Elf64_Shdr strs;
		memcpy(&strs, p + eh.e_shoff + sh.sh_link * sizeof(strs), sizeof(strs));
		if (sh.sh_offset + sh.sh_size > size || strs.sh_offset + strs.sh_size > size)
			return -1;
		for (size_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); k++) {
			Elf64_Sym sym;
			memcpy(&sym, p + sh.sh_offset + k * sizeof(sym), sizeof(sym));
			if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || ELF64_ST_BIND(sym.st_info) != STB_GLOBAL ||
			    sym.st_name >= strs.sh_size)
				continue;
			const char *name = (const char *)p + strs.sh_offset + sym.st_name;
			if (add_name(im, name, strnlen(name, strs.sh_size - sym.st_name)) < 0)
				return -1;
		}
	}
	return 0;
}

/* The .entry directives of PTX text. */
static int ptx_names(struct emu_image *im, const char *text)
{
	for (const char *p = strstr(text, ".entry"); p; p = strstr(p + 6, ".entry")) {
		const char *n = p + 6;
		while (*n == ' ' || *n == '\t')
			n++;
		size_t len = strcspn(n, " \t\r\n(");
		if (add_name(im, n, len) < 0)
			return -1;
	}
	return 0;
}

static CUresult image_load(void **out, const void *code, bool library)
{
	if (!out || !code)
		return CUDA_ERROR_INVALID_VALUE;
	/* A module loads into the current context; a library is context-independent. */
	if (!library && (!emu_current || !emu_current->active))
		return CUDA_ERROR_INVALID_CONTEXT;
	struct emu_image *im = calloc(1, sizeof(*im));
	if (!im)
		return CUDA_ERROR_OUT_OF_MEMORY;
	im->library = library;
	const unsigned char *p = code;
	int rc = 0;
	if (!memcmp(p, ELFMAG, SELFMAG)) {
		im->names = calloc(1, sizeof(*im->names));
		rc = !im->names || elf_names(im, p) < 0 ? -1 : 0;
	} else if (!strncmp(code, "//", 2) || !strncmp(code, ".version", 8)) {
		im->names = calloc(1, sizeof(*im->names));
		rc = !im->names || ptx_names(im, code) < 0 ? -1 : 0;
	}
	pthread_mutex_lock(&mu);
	if (rc == 0)
		rc = hmap_put(&images, (uint64_t)(uintptr_t)im, im);
	pthread_mutex_unlock(&mu);
	if (rc < 0) {
		for (size_t i = 0; i < im->nnames; i++)
			free(im->names[i]);
		free(im->names);
		free(im);
		return p[0] == 0x7f ? CUDA_ERROR_INVALID_IMAGE : CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = im;
	return CUDA_SUCCESS;
}

static CUresult image_unload(void *h, bool library)
{
	pthread_mutex_lock(&mu);
	struct emu_image *im = hmap_get(&images, (uint64_t)(uintptr_t)h);
	if (!im || im->library != library) {
		pthread_mutex_unlock(&mu);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	hmap_del(&images, (uint64_t)(uintptr_t)h);
	for (struct emu_function *f = im->fns, *next; f; f = next) {
		next = f->next;
		hmap_del(&functions, (uint64_t)(uintptr_t)f);
		free(f);
	}
	pthread_mutex_unlock(&mu);
	for (size_t i = 0; i < im->nnames; i++)
		free(im->names[i]);
	free(im->names);
	free(im);
	return CUDA_SUCCESS;
}

/* The function name of image h (one object per name). */
static CUresult image_function(void **out, void *h, const char *name, bool library)
{
	if (!out || !name)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	struct emu_image *im = hmap_get(&images, (uint64_t)(uintptr_t)h);
	CUresult rc = !im || im->library != library ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
	bool known = !rc && !im->names;
	for (size_t i = 0; !rc && !known && i < im->nnames; i++)
		known = !strcmp(im->names[i], name);
	if (!rc && !known)
		rc = CUDA_ERROR_NOT_FOUND;
	struct emu_function *f = NULL;
	for (f = rc ? NULL : im->fns; f && strcmp(f->name, name); f = f->next)
		;
	if (!rc && !f) {
		f = calloc(1, sizeof(*f));
		if (!f || strlen(name) >= sizeof(f->name) || hmap_put(&functions, (uint64_t)(uintptr_t)f, f) < 0) {
			free(f);
			rc = f ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
			f = NULL;
		} else {
			f->image = im;
			snprintf(f->name, sizeof(f->name), "%s", name);
			f->max_dynamic_shared = SHARED_DEFAULT;
			f->carveout = -1;
			f->next = im->fns;
			im->fns = f;
		}
	}
	pthread_mutex_unlock(&mu);
	if (!rc)
		*out = f;
	return rc;
}

static struct emu_function *function_get(const void *h)
{
	pthread_mutex_lock(&mu);
	struct emu_function *f = hmap_get(&functions, (uint64_t)(uintptr_t)h);
	pthread_mutex_unlock(&mu);
	return f;
}

static CUresult func_get_attribute(int *pi, CUfunction_attribute attrib, const void *h)
{
	struct emu_function *f = function_get(h);
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	CUresult rc = CUDA_SUCCESS;
	switch (attrib) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
	case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
	case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
	case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
	case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
	case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
	case CU_FUNC_ATTRIBUTE_PTX_VERSION:
	case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break; /* the devices' compute capability 9.0 */
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dynamic_shared; break;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout; break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = 0; break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
		*pi = f->cluster[attrib - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH];
		break;
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = f->cluster[3]; break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = 0; break;
	default: rc = CUDA_ERROR_INVALID_VALUE; break;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

/* cuda.h: the dynamic shared memory may be raised to the device's opt-in
 * maximum less the function's static shared memory (none here); the carveout
 * is -1 (no preference) or a percentage; the read-only attributes cannot be set. */
static CUresult func_set_attribute(const void *h, CUfunction_attribute attrib, int value)
{
	struct emu_function *f = function_get(h);
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&mu);
	switch (attrib) {
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		if (value < 0 || value > EMU_SHARED_OPTIN)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			f->max_dynamic_shared = value;
		break;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		if (value < -1 || value > 100)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			f->carveout = value;
		break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
		if (value < 0 || value > 8)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			f->cluster[attrib - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = value;
		break;
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: f->cluster[3] = value != 0; break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		if (value < 0 || value > 2)
			rc = CUDA_ERROR_INVALID_VALUE;
		break;
	default: rc = CUDA_ERROR_INVALID_VALUE; break;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

/* A launch: the configuration checked as the driver checks it, then an empty
 * step queued on the stream (stream order holds; no memory changes). */
static CUresult launch(const void *h, const unsigned grid[3], const unsigned block[3], unsigned shared, CUstream stream,
		       void **params, void **extra)
{
	struct emu_function *f = function_get(h);
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (params && extra)
		return CUDA_ERROR_INVALID_VALUE; /* one way of passing arguments */
	unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
	if (!grid[0] || !grid[1] || !grid[2] || !threads || grid[1] > 65535 || grid[2] > 65535)
		return CUDA_ERROR_INVALID_VALUE;
	if (threads > 1024 || block[0] > 1024 || block[1] > 1024 || block[2] > 64)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&mu);
	int max_shared = f->max_dynamic_shared;
	pthread_mutex_unlock(&mu);
	if ((int)shared > max_shared || shared > EMU_SHARED_OPTIN)
		return CUDA_ERROR_INVALID_VALUE;
	if (emu.kernels_refused)
		return CUDA_ERROR_NOT_SUPPORTED; /* CUEMU_KERNELS=refuse */
	return emu_stream_enqueue_nothing(stream);
}

/* ---- entry points ---- */

EMU_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	EMU_CALL(cuModuleLoadData, image_load((void **)module, image, false));
}

EMU_API CUresult cuModuleUnload(CUmodule hmod)
{
	EMU_CALL(cuModuleUnload, image_unload(hmod, false));
}

EMU_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	EMU_CALL(cuModuleGetFunction, image_function((void **)hfunc, hmod, name, false));
}

/* Lazy: the driver's default since CUDA 12.2. */
EMU_ANSWER(cuModuleGetLoadingMode, CUmoduleLoadingMode, CU_MODULE_LAZY_LOADING)

/* JIT and library options are accepted (nothing is compiled), when well formed. */
static CUresult library_load(CUlibrary *library, const void *code, const CUjit_option *jit, unsigned njit,
			     const CUlibraryOption *opts, unsigned nopts)
{
	if ((njit && !jit) || (nopts && !opts))
		return CUDA_ERROR_INVALID_VALUE;
	return image_load((void **)library, code, true);
}

EMU_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
				   void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
				   void **libraryOptionValues, unsigned int numLibraryOptions)
{
	(void)jitOptionsValues, (void)libraryOptionValues;
	EMU_CALL(cuLibraryLoadData,
		 library_load(library, code, jitOptions, numJitOptions, libraryOptions, numLibraryOptions));
}

EMU_API CUresult cuLibraryUnload(CUlibrary library)
{
	EMU_CALL(cuLibraryUnload, image_unload(library, true));
}

EMU_API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	EMU_CALL(cuLibraryGetKernel, image_function((void **)pKernel, library, name, true));
}

/* A kernel's function: the same object in cuemu (one context per device). */
static CUresult kernel_function(CUfunction *out, CUkernel k)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	if (!function_get(k))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!emu_current || !emu_current->active)
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = (CUfunction)(void *)k;
	return CUDA_SUCCESS;
}

EMU_API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	EMU_CALL(cuKernelGetFunction, kernel_function(pFunc, kernel));
}

static CUresult kernel_device(CUdevice dev)
{
	return dev < 0 || dev >= emu.ndev ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

EMU_API CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
	EMU_CALL(cuKernelGetAttribute,
		 kernel_device(dev) ? kernel_device(dev) : func_get_attribute(pi, attrib, kernel));
}

EMU_API CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
	EMU_CALL(cuKernelSetAttribute,
		 kernel_device(dev) ? kernel_device(dev) : func_set_attribute(kernel, attrib, val));
}

EMU_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
	EMU_CALL(cuFuncGetAttribute, func_get_attribute(pi, attrib, hfunc));
}

EMU_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	EMU_CALL(cuFuncSetAttribute, func_set_attribute(hfunc, attrib, value));
}

EMU_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
				unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
				unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	unsigned grid[3] = {gridDimX, gridDimY, gridDimZ}, block[3] = {blockDimX, blockDimY, blockDimZ};
	EMU_CALL(cuLaunchKernel, launch(f, grid, block, sharedMemBytes, hStream, kernelParams, extra));
}

/* The attributes a launch may carry: known ids only, cluster dimensions sane. */
static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	if (!c || (c->numAttrs && !c->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < c->numAttrs; i++) {
		const CUlaunchAttribute *a = &c->attrs[i];
		if ((int)a->id < 0 || a->id > CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING)
			return CUDA_ERROR_INVALID_VALUE;
		if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION &&
		    (!a->value.clusterDim.x || !a->value.clusterDim.y || !a->value.clusterDim.z ||
		     c->gridDimX % a->value.clusterDim.x || c->gridDimY % a->value.clusterDim.y ||
		     c->gridDimZ % a->value.clusterDim.z))
			return CUDA_ERROR_INVALID_CLUSTER_SIZE;
	}
	unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ},
		 block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
	return launch(f, grid, block, c->sharedMemBytes, c->hStream, params, extra);
}

EMU_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	EMU_CALL(cuLaunchKernelEx, launch_ex(config, f, kernelParams, extra));
}
