/* SPDX-License-Identifier: MIT */
/* Fault injection for the tests (DESIGN.md §12): the named points of
 * faults.def, armed by CUSNAP_FAULT. The one voice of its own in the
 * libraries: a fault that fires says so on stderr, so that a test's log shows
 * where it was made to fail. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/exitcodes.h"
#include "cusnap/fault.h"
#include "cusnap/fdcheck.h"
#include "cusnap/proc.h"

static const char *const fault_names[] = {
	[FAULT_NONE] = NULL,
#define FAULT(id, name, where) [FAULT_##id] = name,
#include "cusnap/faults.def"
#undef FAULT
};

const char *fault_name(enum fault point)
{
	return fault_names[point];
}

bool fault_fails(enum fault point)
{
	const char *spec = getenv("CUSNAP_FAULT"), *name = fault_names[point];
	size_t len = name ? strlen(name) : 0;
	bool fails = spec && name && !strncmp(spec, name, len) && !strcmp(spec + len, ":fail");
	if (fails)
		fprintf(stderr, "CUSNAP_FAULT: %s fails\n", name);
	return fails;
}

int tool_start(const char *tool)
{
	char why[512];
	if (fault_check(why, sizeof(why)) < 0) {
		fprintf(stderr, "%s: %s\n", tool, why);
		return EX_USAGE;
	}
	fd_check_start();
	return 0;
}

int fault_check(char *why, size_t len)
{
	const char *spec = getenv("CUSNAP_FAULT");
	if (!spec || !*spec)
		return 0;
	const char *colon = strchr(spec, ':');
	size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
	bool known = false;
	for (size_t i = 1; i < sizeof(fault_names) / sizeof(fault_names[0]) && !known; i++)
		known = strlen(fault_names[i]) == n && !strncmp(spec, fault_names[i], n);
	if (!known)
		return snprintf(why, len,
				"CUSNAP_FAULT=%s: no fault point \"%.*s\" (include/cusnap/faults.def lists them)", spec,
				(int)n, spec),
		       -1;
	const char *act = colon ? colon + 1 : "";
	if (strcmp(act, "fail") && strcmp(act, "stop") && strcmp(act, "term") && strcmp(act, "self") &&
	    !(*act && strspn(act, "0123456789") == strlen(act)))
		return snprintf(why, len, "CUSNAP_FAULT=%s: the action after ':' is fail, stop, term, self or a PID",
				spec),
		       -1;
	return 0;
}

void fault_point(enum fault point)
{
	const char *spec = getenv("CUSNAP_FAULT"), *name = fault_names[point];
	size_t len = name ? strlen(name) : 0;
	if (!spec || !name || strncmp(spec, name, len) != 0 || spec[len] != ':')
		return;
	const char *who = spec + len + 1;
	if (strcmp(who, "stop") == 0) {
		/* SIGSTOP to ourselves: a command held there, until SIGCONT */
		fprintf(stderr, "CUSNAP_FAULT: stopped at %s\n", name);
		raise(SIGSTOP);
		return;
	}
	if (strcmp(who, "term") == 0) {
		/* SIGTERM to ourselves: the command's signal path runs */
		fprintf(stderr, "CUSNAP_FAULT: SIGTERM to ourselves at %s\n", name);
		raise(SIGTERM);
		return;
	}
	int pid = strcmp(who, "self") == 0 ? getpid() : atoi(who);
	if (pid > 0) {
		fprintf(stderr, "CUSNAP_FAULT: SIGKILL to %s%d at %s\n",
			pid == getpid() ? "ourselves, " : "participant ", pid, name);
		kill(pid, SIGKILL);
		/* Dead before the command goes on (a process with much memory, under a
		 * sanitizer on a busy machine, takes more than the 50 ms once allowed
		 * here to die, and the command saw it still alive). */
		for (int waited = 0; pid != getpid() && !proc_gone(pid) && waited < 10000; waited += 10)
			usleep(10000);
	}
}
