/* SPDX-License-Identifier: MIT */
/* cusnap's CRIU plugin (SYSTEM.md §9): plain `criu dump` and `criu restore`
 * (and so the container engines that run CRIU) of a tree whose CUDA processes
 * run under the interposer do what `cusnap checkpoint` and `restore` do, with
 * cusnap's own code: the coordinator library, the native steps, the finish
 * path. This file is only the glue to CRIU's hooks (criu_abi.h).
 *
 * Dump. At the first PAUSE_DEVICES (the root, still running) the tree is found
 * and checked (a partial interposition fails the dump before anything
 * changes), its shared memory prepared (the state file goes into the images
 * directory) and every CUDA process locked. At the first CHECKPOINT_DEVICES
 * (the tree frozen) every CUDA process is checkpointed natively: CRIU holds all
 * their threads stopped, so each process's restore thread runs alone
 * meanwhile, its signals blocked (as CRIU's CUDA plugin does). Then the
 * plugin's image (cusnap-plugin.json). When the dump fails, or the tree runs on
 * (--leave-running), exit leaves a helper that waits until CRIU has let the
 * tree go and then undoes (or completes) in place as cusnap would: native
 * restore and unlock, the sharing rebuilt.
 *
 * Restore. RESUME_DEVICES_LATE names the restored root first. Once CRIU has let
 * the tree go (exit), native restore and unlock (the job file written back
 * first), the sharing rebuilt from the state file, then restore-complete. A
 * failure there kills the restored tree: it never runs half-restored.
 *
 * CRIU's own CUDA plugin checkpoints each task by itself, which breaks shared
 * VMM memory: with it loaded too, this plugin refuses the dump. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../cusnap/cusnap.h"
#include "criu_abi.h"
#include "cusnap/atomicfile.h"
#include "cusnap/control.h"
#include "cusnap/json.h"

#define PLUGIN_IMAGE "cusnap-plugin.json"
#define API __attribute__((visibility("default")))

static struct {
	int stage;         /* enum criu_stage */
	bool seen;         /* the first hook of this stage came */
	bool active;       /* a tree with CUDA processes: the plugin works on it */
	bool checkpointed; /* CHECKPOINT_DEVICES done */
	struct tree t;
	bool loaded; /* t holds the tree */
	struct record rec;
	char dir[PATH_MAX]; /* the images directory */
	char control[4096]; /* the workload's control directory */
	pid_t root;
	int content;
	int *restore_tid; /* each CUDA process's restore thread, asked while it runs */
} P;

/* ---- what every hook needs ---- */

static int find_cuda_plugin(struct dl_phdr_info *info, size_t size, void *found)
{
	(void)size;
	const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	if (!base || strcmp(base + 1, "cuda_plugin.so"))
		return 0;
	snprintf(found, PATH_MAX, "%s", info->dlpi_name);
	return 1;
}

/* The images directory's path, from CRIU's descriptor of it. */
static int images_dir(char *out, size_t len)
{
	char link[64];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", criu_get_image_dir());
	ssize_t n = readlink(link, out, len - 1);
	if (n <= 0)
		return -1;
	out[n] = '\0';
	return 0;
}

/* The tool-wide settings, from the environment CRIU runs in and the
 * workload's: CUSNAP_TIMEOUT_MS, CUSNAP_CONTROL_DIR (else the workload's
 * SNAPSHOT_CONTROL_DIR), CUSNAP_CONTENT (host or native). */
static void settings_for(pid_t root)
{
	const char *v = getenv("CUSNAP_TIMEOUT_MS");
	if (v && atoi(v) > 0)
		settings.timeout_ms = atoi(v);
	if ((v = getenv("CUSNAP_CONTROL_DIR")) && *v)
		snprintf(P.control, sizeof(P.control), "%s", v);
	else if (!P.control[0] &&
		 !(proc_environ_get(root, "SNAPSHOT_CONTROL_DIR", P.control, sizeof(P.control)) && P.control[0] == '/'))
		snprintf(P.control, sizeof(P.control), "/snapshot-control");
	settings.control_dir = P.control;
	v = getenv("CUSNAP_CONTENT");
	P.content = v && proto_content_parse(v) ? (int)proto_content_parse(v) : PROTO_CONTENT_HOST;
}

/* ---- dump ---- */

/* Does pid have the CUDA driver (or the interposer) mapped? */
static bool maps_cuda(pid_t pid)
{
	char path[64], line[4400];
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, "/libcuda.so") || strstr(line, "/libsnapshot_cuda_vmm.so");
	if (f)
		fclose(f);
	return found;
}

/* Run the restore thread tid alone (run), or stop it again: CRIU holds every
 * thread of the tree stopped; the native checkpoint needs the driver's thread
 * in each process. Its signals stay blocked while it runs. */
static int restore_thread(pid_t tid, bool run, uint64_t *mask)
{
	if (run) {
		uint64_t all = ~0ull;
		if (ptrace(PTRACE_GETSIGMASK, tid, sizeof(*mask), mask) < 0 ||
		    ptrace(PTRACE_SETSIGMASK, tid, sizeof(all), &all) < 0 ||
		    ptrace(PTRACE_SETOPTIONS, tid, NULL, 0) < 0 || ptrace(PTRACE_CONT, tid, NULL, 0) < 0)
			return -errno;
		return 0;
	}
	if (ptrace(PTRACE_INTERRUPT, tid, NULL, 0) < 0)
		return -errno;
	int status;
	if (waitpid(tid, &status, __WALL) != tid || !WIFSTOPPED(status))
		return -EIO;
	if (ptrace(PTRACE_SETOPTIONS, tid, NULL, PTRACE_O_SUSPEND_SECCOMP | PTRACE_O_TRACESYSGOOD) < 0 ||
	    ptrace(PTRACE_SETSIGMASK, tid, sizeof(*mask), mask) < 0)
		return -errno;
	return 0;
}

static int pause_devices(int pid)
{
	if (P.stage != CRIU_STAGE_DUMP)
		return -ENOTSUP; /* a pre-dump copies memory only: the tree is left alone */
	if (P.seen)              /* a child: the whole tree was done at the root */
		return P.active ? 0 : -ENOTSUP;
	P.seen = true;
	char other[PATH_MAX];
	if (dl_iterate_phdr(find_cuda_plugin, other)) {
		fprintf(stderr,
			"cusnap-plugin: CRIU's CUDA plugin %s is loaded too: it checkpoints every task by itself, "
			"which breaks shared VMM memory; run criu with a --libdir (or CRIU_LIBS_DIR) holding "
			"cusnap_plugin.so without it: dump refused, nothing changed\n",
			other);
		return -1;
	}
	if (images_dir(P.dir, sizeof(P.dir)) < 0) {
		fprintf(stderr, "cusnap-plugin: cannot tell CRIU's images directory: dump refused, nothing changed\n");
		return -1;
	}
	settings_for(pid);
	int rc = tree_load(pid, &P.t);
	P.loaded = true; /* (what it loaded, freed at exit) */
	for (size_t i = 0; rc == EX_UNAVAILABLE && i < P.t.nprocs; i++) {
		if (maps_cuda(P.t.procs[i].pid)) {
			fprintf(stderr,
				"cusnap-plugin: process %d uses CUDA but the driver cannot be loaded here (name it in "
				"CUSNAP_LIBCUDA): dump refused, nothing changed\n",
				(int)P.t.procs[i].pid);
			return -1;
		}
	}
	if (rc == EX_UNAVAILABLE || (rc == 0 && P.t.ncuda == 0))
		return -ENOTSUP; /* no CUDA here: CRIU alone */
	if (rc || (rc = tree_hold(&P.t, "criu dump")) || (rc = check_freezable(&P.t)) || (rc = check_interposer(&P.t)))
		return -1; /* (said; nothing changed) */
	/* The restore threads now: once the tree is frozen no process answers. */
	P.restore_tid = calloc(P.t.ncuda + 1, sizeof(*P.restore_tid));
	for (size_t i = 0; P.restore_tid && i < P.t.ncuda; i++) {
		CUresult q = P.t.nat.restore_tid(P.t.targets[i].obs, &P.restore_tid[i]);
		if (q != CUDA_SUCCESS) {
			fprintf(stderr, "cusnap-plugin: process %d: %s: %s: dump refused, nothing changed\n",
				P.t.targets[i].obs, native_step_name(NATIVE_QUERY), native_error(&P.t.nat, q));
			return -1;
		}
	}
	if (!P.restore_tid)
		return -1;
	P.active = true;
	P.root = pid;
	P.rec = (struct record){.root = pid, .dir = P.dir};
	struct coord_report r;
	if (tree_prepare(&P.t, &P.rec, P.content, &r))
		return -1; /* (undone and said) */
	char err[1600] = "";
	if (native_lock(&P.t, &P.rec, err, sizeof(err)) < 0 || coord_fault_fails(FAULT_PLUGIN_PAUSE)) {
		/* The tree still runs: undone here, at once. */
		finish(&P.t, &P.rec, "%s", err[0] ? err : "the plugin's pause failed");
		P.rec.changed = false;
		return -1;
	}
	coord_fault_point(FAULT_PLUGIN_PAUSE);
	return 0;
}

/* The plugin's image: what the restore needs besides the state file. */
static int write_image(void)
{
	json_t *j = json_pack("{s:i, s:s, s:b, s:o, s:I}", "cusnap_plugin", 1, "content",
			      proto_content_name((uint32_t)P.content), "vmm", P.t.nshim > 0, "control_dir",
			      json_text(P.control), "cuda_processes", (json_int_t)P.t.ncuda);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	const char *step = "encode";
	int rc = text ? atomic_write(P.dir, PLUGIN_IMAGE, text, strlen(text), 0600, &step) : -ENOMEM;
	free(text);
	if (rc < 0)
		fprintf(stderr, "cusnap-plugin: writing %s/%s: %s failed: %s\n", P.dir, PLUGIN_IMAGE, step,
			strerror(-rc));
	return rc;
}

static int checkpoint_devices(int pid)
{
	(void)pid;
	if (!P.active)
		return -ENOTSUP;
	if (P.checkpointed)
		return 0;
	size_t n = P.t.ncuda;
	pid_t *tid = calloc(n + 1, sizeof(*tid));
	uint64_t *mask = calloc(n + 1, sizeof(*mask));
	char err[1600] = "out of memory";
	int rc = tid && mask ? 0 : -1;
	size_t running = 0;
	for (; rc == 0 && running < n; running++) {
		int e = restore_thread(P.restore_tid[running], true, &mask[running]);
		if (e < 0) {
			snprintf(err, sizeof(err), "process %d: its restore thread %d cannot run: %s",
				 P.t.targets[running].obs, P.restore_tid[running], strerror(-e));
			rc = -1;
			break;
		}
		tid[running] = P.restore_tid[running];
	}
	if (rc == 0)
		rc = native_checkpoint(&P.t, &P.rec, err, sizeof(err));
	for (size_t i = 0; i < running; i++) {
		int e = restore_thread(tid[i], false, &mask[i]);
		if (e < 0)
			fprintf(stderr, "cusnap-plugin: process %d: stopping its restore thread %d again: %s\n",
				P.t.targets[i].obs, tid[i], strerror(-e));
	}
	free(tid);
	free(mask);
	if (rc == 0 && (coord_fault_fails(FAULT_PLUGIN_CHECKPOINT) || write_image() < 0))
		rc = -1, snprintf(err, sizeof(err), "the plugin's checkpoint failed");
	if (rc < 0) {
		fprintf(stderr, "cusnap-plugin: %s: the dump fails; the tree is put back once CRIU lets it go\n", err);
		return -1;
	}
	coord_fault_point(FAULT_PLUGIN_CHECKPOINT);
	P.checkpointed = true;
	return 0;
}

/* Every process of the tree let go by CRIU (no tracer) or gone, within timeout_ms:
 * how many are alive, or -1 on a timeout. */
static int wait_released(int timeout_ms)
{
	for (int waited = 0; waited <= timeout_ms; waited += 20) {
		int alive = 0, held = 0;
		for (size_t i = 0; i < P.t.nprocs; i++) {
			long tracer = proc_status_field("/proc", P.t.procs[i].pid, "TracerPid");
			alive += tracer >= 0;
			held += tracer > 0;
		}
		if (!held)
			return alive;
		usleep(20000);
	}
	return -1;
}

/* After the dump, in a helper (CRIU lets the tree go only after this hook):
 * a failed dump undone, a tree that runs on completed, in place. */
static void after_dump(int ret)
{
	pid_t c = fork();
	if (c != 0) {
		if (c > 0)
			waitpid(c, NULL, 0);
		return;
	}
	setsid();
	if (fork() != 0)
		_exit(0);
	char log[PATH_MAX + 32];
	snprintf(log, sizeof(log), "%s/cusnap-plugin.log", P.dir);
	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0) {
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
	int alive = wait_released(60000);
	if (alive > 0 && ret == 0)
		usleep(300000), alive = wait_released(1000); /* (a dump that kills the tree kills it now) */
	if (alive < 0) {
		fprintf(stderr,
			"cusnap-plugin: CRIU did not let the tree of %d go within 60 s: `cusnap resume --pid "
			"%d` finishes it\n",
			(int)P.root, (int)P.root);
		_exit(2);
	}
	if (alive == 0)
		_exit(0); /* dumped and ended: the checkpoint stands */
	if (ret != 0)
		_exit(finish(&P.t, &P.rec, "the CRIU dump failed"));
	struct coord_report r;
	bool nothing;
	char err[1600], why[PATH_MAX + 256];
	if (tree_recover(&P.t, P.dir, false, &r, &nothing, err, sizeof(err)) < 0)
		_exit(finish(&P.t, &P.rec, "after the dump: %s", err));
	if (control_write(P.root, CONTROL_SNAPSHOT_DONE, why, sizeof(why)) < 0)
		fprintf(stderr, "cusnap-plugin: warning: cannot write %s\n", why);
	fprintf(stderr, "cusnap-plugin: the tree of %d runs on after the dump\n", (int)P.root);
	_exit(0);
}

/* ---- restore ---- */

static int resume_devices_late(int pid)
{
	if (P.seen)
		return P.active ? 0 : -ENOTSUP;
	P.seen = true;
	char image[PATH_MAX + 32];
	if (images_dir(P.dir, sizeof(P.dir)) < 0)
		return -ENOTSUP;
	snprintf(image, sizeof(image), "%s/" PLUGIN_IMAGE, P.dir);
	json_error_t je;
	json_t *j = json_load_file(image, 0, &je);
	if (!j)
		return -ENOTSUP; /* not dumped with this plugin */
	const char *control = json_string_value(json_object_get(j, "control_dir"));
	snprintf(P.control, sizeof(P.control), "%s", control ? control : "");
	json_decref(j);
	P.active = true;
	P.root = pid;
	return 0;
}

/* Once CRIU has let the restored tree go: native restore, unlock, the sharing
 * (tree_recover, as `cusnap resume` brings a suspended tree back),
 * restore-complete; or the tree killed. */
static void after_restore(void)
{
	settings_for(P.root);
	struct tree t;
	struct coord_report r;
	bool nothing;
	char err[4800], why[PATH_MAX + 256];
	int rc = tree_load(P.root, &t);
	if (rc == 0 && (rc = tree_hold(&t, "criu restore")) != 0)
		snprintf(err, sizeof(err), "another command holds the tree");
	else if (rc)
		snprintf(err, sizeof(err), "the restored tree cannot be loaded");
	if (rc == 0 && tree_recover(&t, P.dir, false, &r, &nothing, err, sizeof(err)) < 0)
		rc = -1;
	if (rc == 0 && control_write(P.root, CONTROL_RESTORE_DONE, why, sizeof(why)) < 0)
		rc = -1, snprintf(err, sizeof(err), "cannot write %s", why);
	if (rc == 0)
		progress("restore complete", 0, "%s/%s written", settings.control_dir, CONTROL_RESTORE_DONE);
	tree_free(&t);
	if (rc != 0) {
		fprintf(stderr, "cusnap-plugin: restore of the tree of %d: %s: the restored tree is killed\n",
			(int)P.root, err);
		proc_tree_kill(P.root, false);
	}
}

/* ---- the descriptor ---- */

static int plugin_init(int stage)
{
	memset(&P, 0, sizeof(P));
	P.stage = stage;
	return 0;
}

static void plugin_exit(int stage, int ret)
{
	if (stage == CRIU_STAGE_DUMP && P.active && P.rec.changed && (ret != 0 || P.checkpointed))
		after_dump(ret);
	else if (stage == CRIU_STAGE_RESTORE && P.active && ret == 0)
		after_restore();
	if (P.loaded)
		tree_free(&P.t);
	P.loaded = false;
	free(P.restore_tid);
	P.restore_tid = NULL;
}

API struct criu_plugin_desc CR_PLUGIN_DESC = {
	.name = "cusnap",
	.init = plugin_init,
	.exit = plugin_exit,
	.version = CRIU_PLUGIN_VERSION_0_2,
	.max_hooks = CRIU_HOOKS_4_1,
	.hooks =
		{
			[CRIU_HOOK_RESUME_DEVICES_LATE] = (void *)resume_devices_late,
			[CRIU_HOOK_PAUSE_DEVICES] = (void *)pause_devices,
			[CRIU_HOOK_CHECKPOINT_DEVICES] = (void *)checkpoint_devices,
		},
};
