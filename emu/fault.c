/* SPDX-License-Identifier: MIT */
/* CUEMU_FAULT=<call>[:<nth>][:<CUresult>][:after][,...]: the nth call (default
 * 1st) of <call> in this process fails with <CUresult> (a name such as
 * CUDA_ERROR_OUT_OF_MEMORY or a number; default CUDA_ERROR_UNKNOWN) before it
 * does anything; with "after", once it has done everything (a driver that
 * reports an error for a transition it made: the caller must read the state
 * back). <call> is the exported symbol or its cuGetProcAddress name.
 * <CUresult> "stall=MS" instead: the call waits MS milliseconds, then does its
 * work and succeeds (a driver slow on a busy machine).
 *
 * CUEMU_FAULT_REPORT=<file>: each fault that fires appends one line
 * "<pid> <call> <nth> <CUresult name>" to file, so that a countdown sweep knows
 * when an operation ran to the end with no fault fired.
 *
 * CUEMU_FAULT_ARM=<file>: calls are counted only once file exists, so that a
 * sweep injects its faults into one operation (created by the test at the
 * operation's start) and never into the workload's own set-up.
 *
 * CUEMU_TRACE=<file>: once armed, each call of an entry point appends its
 * symbol to file: the census of the calls an operation makes and how many
 * times it makes each, from which a sweep takes the cases it counts down. */
#include <sys/stat.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/atomicfile.h"
#include "cusnap/log.h"
#include "emu.h"

#define MAX_FAULTS 16

static const char *const fn_symbol[EMU_FN_COUNT] = {
#define X(sym, name, ver, flags) [EMU_FN_##sym] = #sym,
#include "api.def"
#undef X
};

static const char *const fn_base[EMU_FN_COUNT] = {
#define X(sym, name, ver, flags) [EMU_FN_##sym] = #name,
#include "api.def"
#undef X
};

static struct fault {
	const char *name; /* matches symbol or base name */
	size_t name_len;
	unsigned nth;
	CUresult result;
	bool after;        /* fail once the call has taken effect */
	unsigned stall_ms; /* wait this long, then succeed (no failure) */
	atomic_uint calls;
} faults[MAX_FAULTS];
static __thread CUresult after_result; /* an "after" fault of the call in progress */
static int nfaults;
static char *spec_copy;

const char *emu_fn_name(enum emu_fn fn)
{
	return fn < EMU_FN_COUNT ? fn_symbol[fn] : "?";
}

static CUresult parse_result(const char *s)
{
	char *end;
	long v = strtol(s, &end, 0);
	if (end != s && !*end)
		return (CUresult)v;
	for (int r = 0; r < 1000; r++) {
		const char *n = emu_result_name((CUresult)r);
		if (n && strcmp(n, s) == 0)
			return (CUresult)r;
	}
	LOG_AT(LOG_WARN, "CUEMU_FAULT: unknown result '%s'; using CUDA_ERROR_UNKNOWN", s);
	return CUDA_ERROR_UNKNOWN;
}

static bool tracing;

void emu_fault_parse(const char *spec)
{
	const char *t = getenv("CUEMU_TRACE");
	tracing = t && *t;
	if (!spec || !*spec)
		return;
	spec_copy = strdup(spec);
	if (!spec_copy)
		return;
	char *save = NULL;
	for (char *item = strtok_r(spec_copy, ",", &save); item && nfaults < MAX_FAULTS;
	     item = strtok_r(NULL, ",", &save)) {
		struct fault *f = &faults[nfaults];
		char *nth = strchr(item, ':');
		char *res = NULL, *when = NULL;
		if (nth) {
			*nth++ = '\0';
			res = strchr(nth, ':');
			if (res)
				*res++ = '\0';
			when = res ? strchr(res, ':') : NULL;
			if (when)
				*when++ = '\0';
		}
		f->after = when && !strcmp(when, "after");
		f->name = item;
		f->name_len = strlen(item);
		f->nth = nth && *nth ? (unsigned)strtoul(nth, NULL, 0) : 1;
		if (res && !strncmp(res, "stall=", 6))
			f->stall_ms = (unsigned)strtoul(res + 6, NULL, 0);
		f->result = f->stall_ms ? CUDA_ERROR_UNKNOWN : res && *res ? parse_result(res) : CUDA_ERROR_UNKNOWN;
		if (f->nth == 0 || f->result == CUDA_SUCCESS) {
			LOG_AT(LOG_WARN, "CUEMU_FAULT: ignoring '%s' (nth must be >= 1, result non-zero)", item);
			continue;
		}
		bool known = false;
		for (int i = 0; i < EMU_FN_COUNT; i++)
			known |= strcmp(fn_symbol[i], item) == 0 || strcmp(fn_base[i], item) == 0;
		if (!known)
			LOG_AT(LOG_WARN, "CUEMU_FAULT: '%s' is not a call cuemu implements", item);
		nfaults++;
	}
}

/* Append one line to the file named by environment variable env (unset or
 * empty: nothing), in one O_APPEND write so that processes writing the same
 * file at once do not interleave; best effort. */
void emu_record(const char *env, const char *fmt, ...)
{
	const char *path = getenv(env);
	if (!path || !*path)
		return;
	char line[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	int fd = n > 0 ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
	if (fd < 0)
		return;
	io_write_all(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
	close(fd);
}

static void report(enum emu_fn fn, const struct fault *f)
{
	LOG_AT(LOG_INFO, "CUEMU_FAULT: call %u of %s fails with %s", f->nth, fn_symbol[fn], emu_result_name(f->result));
	/* (the sweep stops at the first N for which nothing is recorded) */
	const char *rn = emu_result_name(f->result);
	emu_record("CUEMU_FAULT_REPORT", "%d %s %u %s\n", (int)getpid(), fn_symbol[fn], f->nth, rn ? rn : "?");
}

/* Faults and the census count while the arming file exists (always, without
 * CUEMU_FAULT_ARM): a test arms one operation and disarms after it. */
static bool armed(void)
{
	struct stat st;
	return !emu.fault_arm[0] || stat(emu.fault_arm, &st) == 0;
}

static void trace(enum emu_fn fn)
{
	emu_record("CUEMU_TRACE", "%s\n", fn_symbol[fn]);
}

CUresult emu_fault_check(enum emu_fn fn)
{
	if (!nfaults && !tracing)
		return CUDA_SUCCESS;
	if (!armed())
		return CUDA_SUCCESS;
	if (tracing)
		trace(fn);
	for (int i = 0; i < nfaults; i++) {
		struct fault *f = &faults[i];
		if (strcmp(f->name, fn_symbol[fn]) != 0 && strcmp(f->name, fn_base[fn]) != 0)
			continue;
		if (atomic_fetch_add(&f->calls, 1) + 1 != f->nth)
			continue;
		if (f->stall_ms) {
			LOG_AT(LOG_INFO, "CUEMU_FAULT: call %u of %s stalls %u ms", f->nth, fn_symbol[fn], f->stall_ms);
			usleep(f->stall_ms * 1000u);
			continue;
		}
		report(fn, f);
		if (!f->after)
			return f->result;
		after_result = f->result;
	}
	return CUDA_SUCCESS;
}

CUresult emu_fault_after(CUresult rc)
{
	CUresult f = after_result;
	after_result = CUDA_SUCCESS;
	return f != CUDA_SUCCESS && rc == CUDA_SUCCESS ? f : rc;
}
