/* SPDX-License-Identifier: MIT */
/* cusnap inspect: a tree's CUDA processes, what they share, a command working
 * on it or what an interrupted one left; or a checkpoint directory. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/json.h"
#include "cusnap/layout.h"
#include "cusnap/manifest.h"
#include "cusnap/request.h"
#include "cusnap/state.h"

/* The network lock the checkpoint in dir left, said (and removed with
 * --unlock-network): 0, or the exit code. */
static int inspect_lock(const char *dir, const struct args *a)
{
	struct manifest m;
	char err[512];
	if (manifest_load(dir, &m, err, sizeof(err)) < 0)
		return a->unlock_network ? fail(EX_USAGE, "--unlock-network: %s", err) : 0;
	int rc = network_lock_inspect(&m, a->unlock_network, a->json ? stderr : stdout);
	manifest_free(&m);
	return rc;
}

/* --verify: every byte of dir's images and file content's files against the
 * manifest's digests: 0, or the exit code (said). */
static int inspect_verify(const char *dir)
{
	struct manifest m;
	char err[PATH_MAX + 600], images[PATH_MAX + 16];
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* (read only: a link to it is fine) */
	if (dfd < 0)
		return fail(EX_USAGE, "--verify: %s: %s", dir, strerror(errno));
	if (manifest_load_at(dfd, dir, &m, err, sizeof(err)) < 0) {
		close(dfd);
		return fail(EX_USAGE, "--verify: %s", err);
	}
	snprintf(images, sizeof(images), "%s/" LAYOUT_IMAGES, dir);
	double t0 = now_ms();
	int rc = 0;
	if (!m.image_files)
		rc = fail(EX_LEFT_RUNNING, "--verify: the manifest of %s has no digests of its images", dir);
	else if (images_verify(dfd, LAYOUT_IMAGES, images, m.image_files, err, sizeof(err)) < 0)
		rc = fail(EX_LEFT_RUNNING, "%s: the checkpoint is damaged", err);
	else if (m.content_files && content_verify(dfd, ".", dir, m.content_files, true, err, sizeof(err)) < 0)
		rc = fail(EX_LEFT_RUNNING, "%s: the checkpoint is damaged", err);
	if (!rc)
		progress("verify", now_ms() - t0, "every byte of %zu images and %zu files of file content as written",
			 m.image_files->n, m.content_files ? m.content_files->n : 0);
	manifest_free(&m);
	close(dfd);
	return rc;
}

/* What else dir holds that a restore of it would meet, said (text output). */
static void inspect_leftovers(const char *dir)
{
	char path[PATH_MAX + 64], err[512];
	struct manifest m;
	if (manifest_load(dir, &m, err, sizeof(err)) == 0) {
		if (!m.image_files)
			printf("digests: none recorded (an older cusnap, or rewriting the manifest after the dump "
			       "failed): a restore cannot verify the images, and says so\n");
		manifest_free(&m);
	}
	snprintf(path, sizeof(path), "%s/" LAYOUT_PARTIAL, dir);
	if (access(path, F_OK) == 0)
		printf("%s: an attempt cut short; the next checkpoint or restore on %s puts it in place if its "
		       "dump finished, else removes it\n",
		       path, dir);
	snprintf(path, sizeof(path), "%s/" LAYOUT_FAILED_LOG, dir);
	if (access(path, F_OK) == 0)
		printf("%s: CRIU's log of the last attempt, whose dump failed (a checkpoint here is an earlier "
		       "one)\n",
		       path);
}

int cmd_inspect(const struct args *a)
{
	pid_t pid = a->pid;
	const char *dir = a->dir;
	if (!pid == !dir)
		return fail(EX_USAGE, "inspect needs --pid PID or --dir DIR");
	if (a->verify && !dir)
		return fail(EX_USAGE, "--verify goes with --dir DIR (a checkpoint's bytes)");
	if (dir) {
		if (!a->json && manifest_print(dir) == -2)
			return EX_LEFT_RUNNING;
		if (!a->json)
			inspect_leftovers(dir);
		int lock_rc = inspect_lock(dir, a);
		if (lock_rc)
			return lock_rc;
		if (a->verify && (lock_rc = inspect_verify(dir)) != 0)
			return lock_rc;
		json_t *verdict = restore_verdict_print(a->s, dir, a->json);
		char path[PATH_MAX + 32], err[1200];
		snprintf(path, sizeof(path), "%s/" STATE_FILE, dir);
		struct state st;
		if (state_read(path, &st, err, sizeof(err)) < 0) {
			json_decref(verdict);
			return fail(EX_LEFT_RUNNING, "%s", err);
		}
		struct coord_target *t;
		struct topo_participant *p;
		if (coord_state_view(&st, &t, &p) < 0) {
			json_decref(verdict);
			state_free(&st);
			return fail(EX_LEFT_RUNNING, "out of memory");
		}
		if (a->json) {
			json_t *out = coord_topology_json(t, p, st.n);
			if (json_is_object(out) && verdict)
				json_object_set_new(out, "restorable",
						    json_pack("{s:b, s:O}", "here", json_array_size(verdict) == 0,
							      "reasons", verdict));
			json_emit(stdout, out);
		} else {
			printf("state %s: content %s, %zu participant(s)\n", path,
			       proto_content_name(st.content) ? proto_content_name(st.content) : "?", st.n);
			coord_print_text(stdout, t, p, st.n);
		}
		json_decref(verdict);
		free(t);
		free(p);
		state_free(&st);
		return EX_OK;
	}
	struct tree t;
	int rc = tree_view(pid, a->s, &t);
	if (rc)
		return rc;
	if (t.job_error[0])
		voice(VOICE_WARN, "%s (no command will act on this tree until it is)", t.job_error);
	json_t *out = a->json ? json_pack("{s:i, s:[]}", "pid", (int)pid, "processes") : NULL;
	if (!a->json)
		printf("%-8s %-8s %-5s %-13s %s\n", "PID", "NSPID", "CUDA", "STATE", "INTERPOSED");
	for (size_t i = 0; i < t.nprocs; i++) {
		const struct proc *p = &t.procs[i];
		if (a->json)
			json_array_append_new(json_object_get(out, "processes"),
					      json_pack("{s:i, s:i, s:b, s:s, s:b}", "pid", (int)p->pid, "nspid",
							(int)p->nspid, "cuda", p->cuda, "state", state_name(p->state),
							"interposed", p->shim));
		else
			printf("%-8d %-8d %-5s %-13s %s\n", (int)p->pid, (int)p->nspid, p->cuda ? "yes" : "no",
			       state_name(p->state), p->cuda ? (p->shim ? "yes" : "no") : "-");
	}
	size_t unsettled = 0, ok_shims = 0, failed = 0;
	if (t.nshim) {
		struct topo_participant *parts = calloc(t.ncuda, sizeof(*parts));
		size_t ok = 0;
		for (size_t i = 0; parts && i < t.ncuda; i++) {
			char err[1200];
			if (!t.procs[t.cuda_index[i]].shim)
				continue;
			if (coord_inspect(&t.targets[i], a->s->timeout_ms, &parts[ok], err, sizeof(err)) == 0)
				t.targets[ok++] = t.targets[i], ok_shims++;
			else
				voice(VOICE_ERROR, "%s", err);
		}
		if (a->json)
			json_object_set_new(out, "topology", coord_topology_json(t.targets, parts, ok));
		else
			coord_print_text(stdout, t.targets, parts, ok);
		for (size_t i = 0; i < ok; i++) {
			unsettled += parts[i].phase != PROTO_PHASE_ACTIVE;
			failed += parts[i].phase == PROTO_PHASE_FAILED; /* a rebuild failed there: parked */
			topo_free(&parts[i]);
		}
		free(parts);
	}
	/* A tree an interrupted command left half-done, and what repairs it. */
	size_t frozen = 0, locked = 0;
	for (size_t i = 0; i < t.ncuda; i++) {
		int st = t.procs[t.cuda_index[i]].state;
		frozen += st == CU_PROCESS_STATE_LOCKED || st == CU_PROCESS_STATE_CHECKPOINTED;
		locked += st == CU_PROCESS_STATE_LOCKED;
	}
	char holder[256];
	bool held = tree_held(&t, holder, sizeof(holder));
	/* Half-done only when no command is working on it. Suspended is every
	 * process CHECKPOINTED (its GPU memory released); a LOCKED one still holds
	 * its memory and its CUDA calls block: a command stopped half-way. */
	bool half = !held && (locked || (unsettled && !(frozen == t.ncuda && unsettled == ok_shims)) ||
			      (frozen && frozen < t.ncuda));
	if (a->json) {
		if (held)
			json_object_set_new(out, "held_by", json_string(holder));
		if (t.job_error[0])
			json_object_set_new(out, "job_error", json_text(t.job_error));
		json_object_set_new(out, "half_done", json_boolean(half || failed));
		json_object_set_new(out, "parked", json_integer((json_int_t)failed));
		if (half && !failed) {
			char repair[64];
			snprintf(repair, sizeof(repair), "cusnap resume --pid %d", (int)pid);
			json_object_set_new(out, "repair", json_string(repair));
		}
		json_emit(stdout, out);
	} else if (held) {
		printf("\na command is working on this tree: %s\n", holder);
	} else if (failed) {
		printf("\nhalf-done and parked: the rebuild of %zu participant(s) failed (phase failed); they refuse "
		       "VMM "
		       "calls and cannot be rebuilt in place: kill the tree (and restore it from a checkpoint)\n",
		       failed);
	} else if (half) {
		printf("\nhalf-done: %zu CUDA process(es) locked or checkpointed (%zu locked: GPU memory still held, "
		       "CUDA calls blocked), %zu participant(s) not active: an interrupted command left this tree; "
		       "repair it with: cusnap resume --pid %d\n",
		       frozen, locked, unsettled, (int)pid);
	} else if (frozen) {
		printf("\nsuspended: resume it with: cusnap resume --pid %d\n", (int)pid);
	}
	tree_free(&t);
	return EX_OK;
}
