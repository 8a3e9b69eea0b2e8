/* SPDX-License-Identifier: MIT */
/* What /proc says about a process, read in one place (src/common/proc.c). */
#ifndef CUSNAP_PROC_H
#define CUSNAP_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Field (Tgid, PPid, ...) of PROC/PID/status as a number (proc: the proc
 * mount, "/proc"), or -1. */
long proc_status_field(const char *proc, pid_t pid, const char *field);
/* A field with one value per PID namespace (NSpid, NSsid): the value in the
 * process's own, innermost one (0: not visible there), or -1. */
long proc_status_inner(const char *proc, pid_t pid, const char *field);
/* pid's state letter (R, S, D, T, t, Z, X, ...), 0 when there is none, with
 * its parent into *parent and the kernel's flags (PF_*) into *flags (either
 * NULL). */
char proc_stat(pid_t pid, pid_t *parent, unsigned long *flags);
char proc_state(pid_t pid, pid_t *parent);
/* The one "is it gone" question: no such process, or a zombie. */
bool proc_gone(pid_t pid);
/* The wait status of pid while it is a zombie (its parent has not reaped it),
 * else -1. */
int proc_exit_status(pid_t pid);
/* Is pid a process (not a thread of one) under the proc mount proc? */
bool proc_is_process(const char *proc, pid_t pid);
/* The value of NAME in process pid's environment (as it started, or as it has
 * overwritten it since: absent proves nothing) into out: true when present. */
bool proc_environ_get(pid_t pid, const char *name, char *out, size_t len);
/* Process pid's command name (/proc/PID/comm) into out, "?" when unreadable. */
void proc_comm(pid_t pid, char *out, size_t len);
/* pid's resident memory in bytes (0 when unreadable). */
uint64_t proc_resident_bytes(pid_t pid);
/* Does a mapping of pid name a file whose path holds name? */
bool proc_maps_has(pid_t pid, const char *name);
/* This process's effective capabilities (CapEff). */
unsigned long long proc_self_capabilities(void);

#endif
