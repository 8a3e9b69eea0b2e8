/* SPDX-License-Identifier: MIT */
/* What a step tells its user: progress lines and errors on stderr. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

void progress(const char *step, double ms, const char *fmt, ...)
{
	char extra[512] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(extra, sizeof(extra), fmt, ap);
	va_end(ap);
	fprintf(stderr, "cusnap: %-22s %9.1f ms%s%s\n", step, ms, extra[0] ? "  " : "", extra);
}

void progress_warning(const char *what)
{
	fprintf(stderr, "cusnap: warning: %s\n", what);
}

void progress_stage(const char *stage, double ms, const char *note)
{
	progress(stage, ms, "%s", note);
}

/* What fail() printed last: one command runs per process. */
static char last_error[2600];

const char *report_error(void)
{
	return last_error;
}

int fail(int code, const char *fmt, ...)
{
	char msg[2600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "cusnap: %s\n", msg);
	snprintf(last_error, sizeof(last_error), "%s", msg);
	return code;
}

const char *state_name(int s)
{
	switch (s) {
	case CU_PROCESS_STATE_RUNNING: return "running";
	case CU_PROCESS_STATE_LOCKED: return "locked";
	case CU_PROCESS_STATE_CHECKPOINTED: return "checkpointed";
	case CU_PROCESS_STATE_FAILED: return "failed";
	default: return "-";
	}
}
