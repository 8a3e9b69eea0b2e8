/* SPDX-License-Identifier: MIT */
/* cusnap: the node tool (SYSTEM.md §9). */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/request.h"
#include "cusnap/control.h"
#include "cusnap/coord.h"
#include "cusnap/fdcheck.h"
#include "cusnap/json.h"
#include "cusnap/manifest.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: cusnap run [--control-dir DIR] -- PROGRAM [ARG...]\n"
		"       cusnap checkpoint --pid PID --dir DIR [--leave-running] [--content host|native]\n"
		"                         [--criu PATH] [--wait-ready] [--require-interposer] [--json]\n"
		"       cusnap restore --dir DIR [--device-map OLD=NEW,...] [--criu PATH] [--json]\n"
		"       cusnap suspend --pid PID [--dir DIR] [--content host|native] [--require-interposer] [--json]\n"
		"       cusnap resume  --pid PID [--dir DIR] [--discard-state] [--json]\n"
		"       cusnap inspect (--pid PID | --dir DIR) [--json]\n"
		"       cusnap demo [--processes N] [--size BYTES] [--in-place] [--keep DIR] [--criu PATH]\n"
		"\n"
		"  run        start PROGRAM under the CUDA VMM interposer (snapshot-cuda-vmm-launch)\n"
		"  checkpoint dump the process tree rooted at PID to DIR with CRIU: prepare shared VMM memory, lock\n"
		"             and checkpoint every CUDA process natively, dump; the tree is gone afterwards unless\n"
		"             --leave-running (then it is resumed in place and snapshot-complete is written)\n"
		"  restore    restore DIR with CRIU, then the GPU state (--device-map remaps GPUs by UUID) and the\n"
		"             shared memory, then write restore-complete for the workload\n"
		"  suspend    release all GPU memory of the process tree rooted at PID, in place: prepare shared\n"
		"             VMM memory (when the tree runs under the interposer), then lock and checkpoint\n"
		"             every CUDA process natively; the state goes to DIR (default a private directory\n"
		"             under /run/cusnap for root, printed on stderr)\n"
		"  resume     bring a suspended tree back, or finish what an interrupted command left: native\n"
		"             restore and unlock, then rebuild the sharing (--discard-state: without the state\n"
		"             file, from each process's own records)\n"
		"  inspect    show the tree's CUDA processes and what they share, a command working on it, or a\n"
		"             checkpoint directory\n"
		"  demo       run the example process group under the interposer, checkpoint, kill and restore it\n"
		"             (on cuemu when there is no GPU) and print the phases\n"
		"\n"
		"options: --control-dir DIR (endpoints; default $SNAPSHOT_CONTROL_DIR or /snapshot-control),\n"
		"         --timeout MS (per participant and step, and for every native state query; default\n"
		"         30000), --json (summary on stdout), --require-interposer (refuse a tree whose CUDA\n"
		"         processes run without the interposer: what they share would come back as copies)\n"
		"         A command takes only the options shown for it. DIR must be owned by you or root and\n"
		"         writable by no one else.\n"
		"environment: CUSNAP_NATIVE_TIMEOUT_MS (default 300000): how long one native lock/checkpoint/\n"
		"         restore/unlock may take before cusnap names the stuck process and step and exits 2\n"
		"         CUSNAP_NATIVE_PARALLEL (default: the number of cores): how many processes' native\n"
		"         steps run at once (1: one after another)\n"
		"         CUSNAP_RUN_DIR: the run directory (locks, state notes) instead of /run/cusnap\n"
		"\n"
		"exit status: 0 success; 1 failed, the workload was left or put back running as before;\n"
		"2 failed, the workload was terminated or its state is unknown; 64 usage error (a directory\n"
		"others control included); 69 a required component is missing (the CUDA driver, CRIU), with\n"
		"the fix named; 75 another command is working on the tree (nothing done)\n");
}

/* The tree of pid, loaded and held for command what: the guard rails first
 * (before the tree's processes are even asked anything). 0, or an exit code
 * (reported) with t freed. */
static int tree_take(pid_t pid, const char *what, struct tree *t)
{
	int rc = check_pid_guard(pid);
	if (rc || (rc = tree_load(pid, t)))
		return rc;
	if ((rc = tree_hold(t, what)))
		tree_free(t);
	return rc;
}

int cmd_suspend(pid_t pid, const char *dir_arg, int content)
{
	struct tree t;
	int rc = tree_take(pid, "suspend", &t);
	if (rc)
		return rc;
	char dir[PATH_MAX];
	double start = now_ms();
	if (!t.ncuda) {
		rc = fail(EX_LEFT_RUNNING, "no CUDA process in the tree of %d (%zu processes)", (int)pid, t.nprocs);
		goto out;
	}
	if ((rc = check_freezable(&t)) || (rc = check_interposer(&t)))
		goto out;
	if (dir_arg)
		snprintf(dir, sizeof(dir), "%s", dir_arg);
	else
		state_dir_default(t.procs[0].pid, dir, sizeof(dir));
	if ((rc = use_dir(dir, true, NULL)))
		goto out;
	if (!dir_arg)
		fprintf(stderr, "cusnap: state directory %s\n", dir);
	bool vmm = t.nshim > 0;
	progress("find", now_ms() - start, "%zu processes, %zu CUDA, %s", t.nprocs, t.ncuda,
		 vmm ? "interposed: VMM steps" : "not interposed: native steps only");
	struct record rec = {.root = t.procs[0].pid, .dir = dir};
	struct coord_report r;
	if ((rc = tree_suspend(&t, &rec, content, &r)))
		goto out;
	if (opt_json)
		json_emit(stdout, json_pack("{s:b, s:s, s:i, s:o, s:I, s:I, s:b, s:I, s:I, s:f}", "ok", 1, "operation",
					    "suspend", "pid", (int)pid, "dir", json_text(dir), "processes",
					    (json_int_t)t.nprocs, "cuda_processes", (json_int_t)t.ncuda, "vmm", vmm,
					    "shared_allocations", (json_int_t)r.shared, "bytes_copied",
					    (json_int_t)r.bytes, "total_ms", now_ms() - start));
	rc = EX_OK;
out:
	tree_free(&t);
	return rc;
}

int cmd_resume(pid_t pid, const char *dir_arg, bool discard_state)
{
	struct tree t;
	int rc = tree_take(pid, "resume", &t);
	if (rc)
		return rc;
	char dir[PATH_MAX], err[1200];
	double start = now_ms();
	state_dir_of(t.procs[0].pid, dir_arg, dir, sizeof(dir));
	if ((dir_arg || access(dir, F_OK) == 0) && (rc = use_dir(dir, false, NULL)))
		goto out;
	if ((rc = check_interposition(&t)))
		goto out;
	/* A resume is itself the undo: a signal now is noted, and the resume completes. */
	signals_arm();
	struct coord_report r;
	bool nothing;
	if (tree_recover(&t, dir, discard_state, &r, &nothing, err, sizeof(err)) < 0) {
		char why[1400];
		size_t gone;
		if (tree_verify(&t, why, sizeof(why), &gone) < 0)
			rc = fail(EX_TERMINATED, "%s; the tree is left half-done: %s", err, why);
		else
			rc = fail(EX_TERMINATED, "%s", err);
		goto out;
	}
	if (signal_caught())
		fprintf(stderr, "cusnap: %s arrived during the resume; the resume was completed first\n",
			strsignal(signal_caught()));
	bool vmm = t.nshim > 0;
	state_dir_end(t.procs[0].pid, dir);
	if (nothing) {
		fprintf(stderr, "cusnap: the tree of %d is running (every CUDA process running%s): nothing to resume\n",
			(int)pid, vmm ? ", every participant active" : "");
		if (opt_json)
			json_emit(stdout, json_pack("{s:b, s:s, s:i, s:b}", "ok", 1, "operation", "resume", "pid",
						    (int)pid, "nothing_to_do", 1));
		rc = EX_OK;
		goto out;
	}
	if (opt_json)
		json_emit(stdout,
			  json_pack("{s:b, s:s, s:i, s:o, s:I, s:b, s:I, s:f}", "ok", 1, "operation", "resume", "pid",
				    (int)pid, "dir", json_text(dir), "cuda_processes", (json_int_t)t.ncuda, "vmm", vmm,
				    "bytes_copied", (json_int_t)r.bytes, "total_ms", now_ms() - start));
	rc = EX_OK;
out:
	tree_free(&t);
	return rc;
}

static int cmd_inspect(pid_t pid, const char *dir)
{
	if (dir) {
		if (!opt_json && manifest_print(dir) == -2)
			return EX_LEFT_RUNNING;
		char path[PATH_MAX + 32], err[1200];
		snprintf(path, sizeof(path), "%s/" STATE_FILE, dir);
		struct state st;
		if (state_read(path, &st, err, sizeof(err)) < 0)
			return fail(EX_LEFT_RUNNING, "%s", err);
		struct coord_target *t;
		struct topo_participant *p;
		if (coord_state_view(&st, &t, &p) < 0) {
			state_free(&st);
			return fail(EX_LEFT_RUNNING, "out of memory");
		}
		if (opt_json) {
			json_emit(stdout, coord_topology_json(t, p, st.n));
		} else {
			printf("state %s: content %s, %zu participant(s)\n", path,
			       proto_content_name(st.content) ? proto_content_name(st.content) : "?", st.n);
			coord_print_text(stdout, t, p, st.n);
		}
		free(t);
		free(p);
		state_free(&st);
		return EX_OK;
	}
	struct tree t;
	int rc = tree_load(pid, &t);
	if (rc)
		return rc;
	json_t *out = opt_json ? json_pack("{s:i, s:[]}", "pid", (int)pid, "processes") : NULL;
	if (!opt_json)
		printf("%-8s %-8s %-5s %-13s %s\n", "PID", "NSPID", "CUDA", "STATE", "INTERPOSED");
	for (size_t i = 0; i < t.nprocs; i++) {
		const struct proc *p = &t.procs[i];
		if (opt_json)
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
			if (coord_inspect(&t.targets[i], opt_timeout_ms, &parts[ok], err, sizeof(err)) == 0)
				t.targets[ok++] = t.targets[i], ok_shims++;
			else
				fprintf(stderr, "cusnap: %s\n", err);
		}
		if (opt_json)
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
	size_t frozen = 0;
	for (size_t i = 0; i < t.ncuda; i++) {
		int st = t.procs[t.cuda_index[i]].state;
		frozen += st == CU_PROCESS_STATE_LOCKED || st == CU_PROCESS_STATE_CHECKPOINTED;
	}
	char holder[256];
	bool held = tree_held(&t, holder, sizeof(holder));
	/* Half-done only when no command is working on it. */
	bool half = !held &&
		    ((unsettled && !(frozen == t.ncuda && unsettled == ok_shims)) || (frozen && frozen < t.ncuda));
	if (opt_json) {
		if (held)
			json_object_set_new(out, "held_by", json_string(holder));
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
		printf("\nhalf-done: %zu CUDA process(es) locked or checkpointed, %zu participant(s) not active: an "
		       "interrupted command left this tree; repair it with: cusnap resume --pid %d\n",
		       frozen, unsettled, (int)pid);
	} else if (frozen) {
		printf("\nsuspended: resume it with: cusnap resume --pid %d\n", (int)pid);
	}
	tree_free(&t);
	return EX_OK;
}

static int cmd_run(int argc, char **argv)
{
	if (argc < 1)
		return fail(EX_USAGE, "run: PROGRAM missing (cusnap run [--control-dir DIR] -- PROGRAM [ARG...])");
	char self[PATH_MAX], launcher[PATH_MAX + 64];
	if (!path_self_dir(self, sizeof(self)))
		return fail(EX_UNAVAILABLE, "cannot find cusnap's own directory");
	snprintf(launcher, sizeof(launcher), "%s/snapshot-cuda-vmm-launch", self);
	if (access(launcher, X_OK) != 0)
		snprintf(launcher, sizeof(launcher), "/usr/local/bin/snapshot-cuda-vmm-launch");
	if (getenv("CUSNAP_CONTROL_DIR_SET"))
		setenv("SNAPSHOT_CONTROL_DIR", opt_control_dir, 1);
	char **args = calloc((size_t)argc + 2, sizeof(*args));
	if (!args)
		return fail(EX_LEFT_RUNNING, "out of memory");
	args[0] = launcher;
	for (int i = 0; i < argc; i++)
		args[i + 1] = argv[i];
	execv(launcher, args);
	return fail(EX_UNAVAILABLE, "cannot run %s: %s (run 'make' or 'make install')", launcher, strerror(errno));
}

static int run(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return EX_USAGE;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
		usage(stdout);
		return EX_OK;
	}
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"dir", required_argument, NULL, 'd'},
		{"content", required_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'},
		{"timeout", required_argument, NULL, 't'},
		{"control-dir", required_argument, NULL, 'C'},
		{"help", no_argument, NULL, 'h'},
		{"leave-running", no_argument, NULL, 'L'},
		{"criu", required_argument, NULL, 'R'},
		{"wait-ready", no_argument, NULL, 'W'},
		{"device-map", required_argument, NULL, 'M'},
		{"processes", required_argument, NULL, 'P'},
		{"size", required_argument, NULL, 'S'},
		{"in-place", no_argument, NULL, 'I'},
		{"keep", required_argument, NULL, 'K'},
		{"discard-state", no_argument, NULL, 'D'},
		{"require-interposer", no_argument, NULL, 'N'},
		{0, 0, 0, 0},
	};
	/* The options each command takes (by their short values); any other is a usage error. */
	static const struct {
		const char *cmd, *takes;
	} takes[] = {
		{"suspend", "pdcjtCN"}, {"resume", "pdjtCD"}, {"inspect", "pdjtC"}, {"checkpoint", "pdcjtCLRWN"},
		{"restore", "djtRM"},   {"demo", "PSIKRt"},   {"run", "C"},
	};
	const char *allowed = NULL;
	for (size_t i = 0; i < sizeof(takes) / sizeof(takes[0]); i++)
		if (!strcmp(cmd, takes[i].cmd))
			allowed = takes[i].takes;
	if (!allowed)
		return fail(EX_USAGE, "unknown command '%s' (cusnap --help)", cmd);
	opt_control_dir = control_dir_from_env();
	pid_t pid = 0;
	const char *dir = NULL, *criu = NULL, *device_map = NULL, *keep = NULL;
	bool leave_running = false, wait_ready = false, in_place = false, discard_state = false;
	int content = PROTO_CONTENT_HOST, c, processes = 3;
	unsigned long long size = 64ull << 20;
	optind = 2;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		if (c != 'h' && c != '?' && !strchr(allowed, c)) {
			const char *name = "?";
			for (const struct option *o = opts; o->name; o++)
				if (o->val == c)
					name = o->name;
			return fail(EX_USAGE, "%s does not take --%s (cusnap --help)", cmd, name);
		}
		switch (c) {
		case 'p': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (*end || v <= 0 || v > 1 << 30)
				return fail(EX_USAGE, "--pid %s: not a PID", optarg);
			pid = (pid_t)v;
			break;
		}
		case 'd': dir = optarg; break;
		case 'c':
			content = proto_content_parse(optarg);
			if (!content)
				return fail(EX_USAGE, "--content %s: use host or native", optarg);
			break;
		case 'j': opt_json = true; break;
		case 't': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (end == optarg || *end || v <= 0 || v > 86400000)
				return fail(EX_USAGE, "--timeout %s: not a number of milliseconds (1 to 86400000)",
					    optarg);
			opt_timeout_ms = (int)v;
			break;
		}
		case 'C':
			opt_control_dir = optarg;
			setenv("CUSNAP_CONTROL_DIR_SET", "1", 1);
			break;
		case 'L': leave_running = true; break;
		case 'R': criu = optarg; break;
		case 'W': wait_ready = true; break;
		case 'M': device_map = optarg; break;
		case 'P': {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (end == optarg || *end || v < 1 || v > 64)
				return fail(EX_USAGE, "--processes %s: a number from 1 to 64", optarg);
			processes = (int)v;
			break;
		}
		case 'D': discard_state = true; break;
		case 'N': opt_require_interposer = true; break;
		case 'S': {
			char *end;
			size = strtoull(optarg, &end, 0);
			if (*end == 'M' || *end == 'm')
				size <<= 20, end++;
			else if (*end == 'G' || *end == 'g')
				size <<= 30, end++;
			if (*end || !size)
				return fail(EX_USAGE, "--size %s: a number of bytes (K/M/G suffixes: M, G)", optarg);
			break;
		}
		case 'I': in_place = true; break;
		case 'K': keep = optarg; break;
		case 'h': usage(stdout); return EX_OK;
		default: usage(stderr); return EX_USAGE;
		}
	}
	if (!strcmp(cmd, "run"))
		return cmd_run(argc - optind, argv + optind);
	if (optind < argc)
		return fail(EX_USAGE, "%s: unexpected argument '%s'", cmd, argv[optind]);
	if (!strcmp(cmd, "suspend") || !strcmp(cmd, "resume")) {
		if (!pid)
			return fail(EX_USAGE, "%s needs --pid PID", cmd);
		return !strcmp(cmd, "suspend") ? cmd_suspend(pid, dir, content) : cmd_resume(pid, dir, discard_state);
	}
	if (!strcmp(cmd, "inspect")) {
		if (!pid == !dir)
			return fail(EX_USAGE, "inspect needs --pid PID or --dir DIR");
		return cmd_inspect(pid, dir);
	}
	if (!strcmp(cmd, "checkpoint")) {
		if (!pid || !dir)
			return fail(EX_USAGE, "checkpoint needs --pid PID and --dir DIR");
		return cmd_checkpoint(pid, dir, content, criu, leave_running, wait_ready, NULL);
	}
	if (!strcmp(cmd, "restore")) {
		if (!dir)
			return fail(EX_USAGE, "restore needs --dir DIR");
		return cmd_restore(dir, device_map, criu, NULL);
	}
	return cmd_demo(processes, size, in_place, keep, criu);
}

int main(int argc, char **argv)
{
	fd_check_start();
	return fd_check_end("cusnap", run(argc, argv));
}
