/* SPDX-License-Identifier: MIT */
/* cuInit, configuration from the environment, devices, errors, logging, fork. */
#include <dlfcn.h>
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cusnap/ids.h"
#include "cusnap/log.h"
#include "emu.h"

struct emu_state emu = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.next_handle = 0x1000,
};
__thread struct emu_ctx *emu_current;

static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* "16G", "512M", "4096": bytes; 0 on a malformed value. */
static size_t parse_size(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s)
		return 0;
	switch (toupper((unsigned char)*end)) {
	case 'K':
		v <<= 10;
		end++;
		break;
	case 'M':
		v <<= 20;
		end++;
		break;
	case 'G':
		v <<= 30;
		end++;
		break;
	case 'T':
		v <<= 40;
		end++;
		break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')
		end++;
	if (*end == 'B')
		end++;
	return *end ? 0 : (size_t)v;
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static void derive_uuid(const char *seed, int index, CUuuid *out)
{
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a of the seed */
	for (const char *p = seed; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	uint64_t a = mix64(h + (uint64_t)index), b = mix64(a ^ 0x5bd1e995u);
	for (int i = 0; i < 8; i++) {
		out->bytes[i] = (char)(a >> (8 * i));
		out->bytes[8 + i] = (char)(b >> (8 * i));
	}
}

static void atfork_prepare(void)
{
	pthread_mutex_lock(&emu.lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&emu.lock);
}

static void atfork_child(void)
{
	/* Like the real driver, a child forked after cuInit cannot use CUDA: its
	 * parent's contexts and streams did not survive the fork. */
	if (emu.initialized) {
		emu.forked_after_init = true;
		emu.has_context = false;
	}
	pthread_mutex_unlock(&emu.lock);
}

/* CUEMU_MODEL=NAME[,NAME...]: each device's model (cuDeviceGetName; the last
 * name goes on for the devices after it), CUEMU_DRIVER_VERSION=N: what
 * cuDriverGetVersion answers (a restore on another machine is gated on both). */
static void read_env_identity(void)
{
	const char *v = getenv("CUEMU_MODEL"), *p = v && *v ? v : "cuemu";
	for (int i = 0; i < emu.ndev; i++) {
		size_t len = strcspn(p, ",");
		snprintf(emu.dev[i].model, sizeof(emu.dev[i].model), "%.*s", (int)len, p);
		if (p[len] == ',' && p[len + 1])
			p += len + 1;
	}
	emu.driver_version = EMU_DRIVER_VERSION;
	if ((v = getenv("CUEMU_DRIVER_VERSION")) && *v) {
		int n = atoi(v);
		if (n > 0)
			emu.driver_version = n;
		else
			LOG_AT(LOG_WARN, "CUEMU_DRIVER_VERSION=%s is not a version (13000: CUDA 13.0); using %d", v,
			       EMU_DRIVER_VERSION);
	}
}

/* Read CUEMU_* once per process. Invalid values fall back to defaults with a warning. */
static void read_env(void)
{
	const char *v;
	/* The project's one logger (log.h), in this library's own copy. */
	log_init("cuemu", (v = getenv("CUEMU_LOG")) && *v ? atoi(v) : LOG_WARN, STDERR_FILENO);
	emu.profile = EMU_PROFILE_R580;
	if ((v = getenv("CUEMU_PROFILE")) && *v) {
		if (strcmp(v, "r615") == 0)
			emu.profile = EMU_PROFILE_R615;
		else if (strcmp(v, "r610") == 0)
			emu.profile = EMU_PROFILE_R610;
		else if (strcmp(v, "r580") != 0)
			LOG_AT(LOG_WARN, "CUEMU_PROFILE=%s unknown (r580, r610, r615); using r580", v);
	}
	emu.ndev = 2;
	if ((v = getenv("CUEMU_DEVICES")) && *v) {
		int n = atoi(v);
		if (n >= 0 && n <= EMU_MAX_DEVICES)
			emu.ndev = n;
		else
			LOG_AT(LOG_WARN, "CUEMU_DEVICES=%s out of range 0..%d; using 2", v, EMU_MAX_DEVICES);
	}
	emu.granularity = 2u << 20;
	if ((v = getenv("CUEMU_GRANULARITY")) && *v) {
		size_t g = parse_size(v);
		if (g >= 4096 && (g & (g - 1)) == 0)
			emu.granularity = g;
		else
			LOG_AT(LOG_WARN, "CUEMU_GRANULARITY=%s is not a power of two >= 4096; using 2 MiB", v);
	}
	size_t capacity = (size_t)16 << 30;
	if ((v = getenv("CUEMU_MEMORY")) && *v) {
		size_t c = parse_size(v);
		if (c)
			capacity = c;
		else
			LOG_AT(LOG_WARN, "CUEMU_MEMORY=%s is not a size; using 16 GiB", v);
	}
	emu.mc_timeout_ms = 10000;
	if ((v = getenv("CUEMU_REQUIRE_CONTEXT")) && *v == '1')
		emu.require_context = true;
	if ((v = getenv("CUEMU_KERNELS")) && *v) {
		if (strcmp(v, "refuse") == 0)
			emu.kernels_refused = true;
		else if (strcmp(v, "accept") != 0)
			LOG_AT(LOG_WARN, "CUEMU_KERNELS=%s unknown (accept, refuse); accepting launches", v);
	}
	if ((v = getenv("CUEMU_MULTICAST_TIMEOUT_MS")) && *v)
		emu.mc_timeout_ms = (unsigned)atoi(v);
	if ((v = getenv("CUEMU_CKPT_STALL_MS")) && *v)
		emu.ckpt_stall_ms = (unsigned)atoi(v);
	snprintf(emu.run_dir, sizeof(emu.run_dir), "%s", (v = getenv("CUEMU_RUN_DIR")) ? v : "");
	snprintf(emu.fault_arm, sizeof(emu.fault_arm), "%s", (v = getenv("CUEMU_FAULT_ARM")) ? v : "");
	const char *seed = getenv("CUEMU_UUID_SEED");
	if (!seed || !*seed)
		seed = "cuemu";
	const char *list = getenv("CUEMU_UUIDS");
	for (int i = 0; i < emu.ndev; i++) {
		emu.dev[i].capacity = capacity;
		derive_uuid(seed, i, &emu.dev[i].uuid);
	}
	if (list && *list) {
		const char *p = list;
		for (int i = 0; i < emu.ndev && *p; i++) {
			size_t len = strcspn(p, ",");
			if (id_parse_uuid(p, len, (uint8_t *)emu.dev[i].uuid.bytes) < 0)
				LOG_AT(LOG_WARN, "CUEMU_UUIDS entry %d is not a UUID; derived one kept", i);
			p += len;
			if (*p == ',')
				p++;
		}
	}
	read_env_identity();
	emu_fault_parse(getenv("CUEMU_FAULT"));
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

void emu_config(void)
{
	pthread_once(&env_once, read_env);
}

/* NVIDIA's CUDA runtime must never run on the emulator (its licence forbids
 * answering what it asks of a driver, DESIGN.md §15): a libcudart mapped in this
 * process that is not the project's own (which exports cusnap_cudart_runtime)
 * makes cuInit fail, saying why. */
static bool foreign_runtime(char *path, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[4400];
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *p = strchr(line, '/');
		char *base = p ? strrchr(p, '/') + 1 : NULL;
		if (!base || strncmp(base, "libcudart.so", 12) != 0)
			continue;
		/* Loaded already (RTLD_NOLOAD): ours carries the mark, in whatever scope. */
		void *h = dlopen(p, RTLD_NOW | RTLD_NOLOAD);
		found = !h || !dlsym(h, "cusnap_cudart_runtime");
		if (h)
			dlclose(h);
		if (found)
			snprintf(path, len, "%s", p);
	}
	if (f)
		fclose(f);
	return found;
}

static CUresult emu_init(unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	char runtime[4400];
	if (foreign_runtime(runtime, sizeof(runtime))) {
		LOG_AT(LOG_ERROR,
		       "%s is loaded: cuemu hosts only the project's own CUDA runtime (build/lib/libcudart.so.13), "
		       "never NVIDIA's; refusing cuInit",
		       runtime);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	pthread_mutex_lock(&emu.lock);
	CUresult rc = CUDA_SUCCESS;
	if (emu.forked_after_init) {
		LOG_AT(LOG_WARN, "cuInit in a child forked after CUDA was initialised in its parent");
		rc = CUDA_ERROR_NOT_INITIALIZED;
	} else if (!__atomic_load_n(&emu.initialized, __ATOMIC_RELAXED)) {
		/* Written once: other threads read it without the lock. */
		__atomic_store_n(&emu.initialized, true, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&emu.lock);
	return rc;
}

EMU_API CUresult cuInit(unsigned int flags)
{
	EMU_CALL(cuInit, emu_init(flags));
}

EMU_ANSWER(cuDriverGetVersion, int, emu.driver_version)

/* ---- errors ---- */

struct emu_error {
	CUresult code;
	const char *name;
};

static const struct emu_error errors[] = {
#define E(name) {name, #name},
#include "emu_errors.h"
#undef E
};

const char *emu_result_name(CUresult r)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == r)
			return errors[i].name;
	return NULL;
}

/* The description of each error: its name in lower case after the prefix
 * ("CUDA_ERROR_OUT_OF_MEMORY" -> "out of memory"), built once. */
static char *descriptions[sizeof(errors) / sizeof(errors[0])];
static pthread_once_t descriptions_once = PTHREAD_ONCE_INIT;

static void build_descriptions(void)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
		const char *n = errors[i].name;
		if (strncmp(n, "CUDA_ERROR_", 11) == 0)
			n += 11;
		else if (strcmp(n, "CUDA_SUCCESS") == 0)
			n = "no error";
		char *d = strdup(n);
		if (!d)
			continue;
		for (char *p = d; *p; p++)
			*p = *p == '_' ? ' ' : (char)tolower((unsigned char)*p);
		descriptions[i] = d;
	}
}

static CUresult error_text(CUresult r, const char **out, bool name)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_once(&descriptions_once, build_descriptions);
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
		if (errors[i].code == r) {
			*out = name ? errors[i].name : descriptions[i];
			return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	*out = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	EMU_CALL(cuGetErrorName, error_text(error, pStr, true));
}

EMU_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	EMU_CALL(cuGetErrorString, error_text(error, pStr, false));
}
