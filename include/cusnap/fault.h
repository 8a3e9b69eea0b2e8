/* SPDX-License-Identifier: MIT */
/* Fault injection for the tests: named fault points (faults.def) armed by
 * CUSNAP_FAULT, used by the tools, the coordinator library, the node library
 * and the CRIU plugin. */
#ifndef CUSNAP_FAULT_H
#define CUSNAP_FAULT_H

#include <stdbool.h>
#include <stddef.h>

/* A named fault point (include/cusnap/faults.def): with CUSNAP_FAULT=NAME:PID,
 * reaching NAME sends SIGKILL to PID ("self": to this process; "term": SIGTERM
 * to it; "stop": SIGSTOP to it). FAULT_NONE: none. */
enum fault {
	FAULT_NONE,
#define FAULT(id, name, where) FAULT_##id,
#include "cusnap/faults.def"
#undef FAULT
};
void fault_point(enum fault point);
/* CUSNAP_FAULT=NAME:fail at point: the step there must fail (said on stderr). */
bool fault_fails(enum fault point);
/* The point's name in CUSNAP_FAULT ("kill-after-quiesce"). */
const char *fault_name(enum fault point);
/* CUSNAP_FAULT, when set, names a fault point of faults.def and an action
 * (fail, stop, term, self or a PID): 0, or -1 with why (a misspelt point
 * would otherwise never fire, and the test relying on it pass silently). */
int fault_check(char *why, size_t len);
/* A command-line tool's start: CUSNAP_FAULT checked (refused: said as tool,
 * EX_USAGE returned), then the descriptor check begun (fdcheck.h). 0 or 64. */
int tool_start(const char *tool);
#endif
