/* SPDX-License-Identifier: MIT */
/* The CRIU plugin's dump (plugin.c says the whole of it): PAUSE_DEVICES (the
 * tree checked, the group joined, then suspend's rows: the prepare, the
 * boundary, the lock), CHECKPOINT_DEVICES (the restore threads run, suspend's
 * native checkpoint row, the threads stopped, the plugin's image): two lists
 * of steps over P.fz; and the dump's end: digests, or a helper that undoes a failed dump or
 * completes one that leaves the tree running. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cusnap/fault.h"
#include "../node/node.h"
#include "cusnap/atomicfile.h"
#include "cusnap/control.h"
#include "cusnap/json.h"
#include "../node/group.h"
#include "plugin.h"

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

/* Whose is the tree of root (still running)? Told from the libraries its
 * processes map: no driver is needed to tell. */
static enum owner dump_owner(pid_t root)
{
	struct proc *procs = NULL;
	ssize_t n = proc_tree(root, &procs);
	bool interposed = false, cuda = false;
	for (ssize_t i = 0; i < n; i++) {
		interposed |= proc_maps_has(procs[i].pid, "/libsnapshot_cuda_vmm.so");
		cuda |= proc_maps_has(procs[i].pid, "/libcuda.so");
	}
	free(procs);
	if (n < 0)
		return OWNER_MINE; /* (tree_load says why) */
	if (!cuda && !interposed)
		return OWNER_NONE;
	return !interposed && peer_present() ? OWNER_PEER : OWNER_MINE;
}

/* A tree of mine that cannot be dumped, whatever its state: true (said). */
static bool dump_refused(pid_t root, int rc)
{
	if (P.conf_error[0])
		plugin_say(VOICE_ERROR, "the tree of %d: %s: dump refused, nothing changed", (int)root, P.conf_error);
	else if (rc == EX_UNAVAILABLE)
		plugin_say(VOICE_ERROR,
			   "the tree of %d uses CUDA but the driver cannot be loaded in CRIU (name it "
			   "with libcuda = PATH in %s, or CUSNAP_LIBCUDA): dump refused, nothing changed",
			   (int)root, P.conf.path[0] ? P.conf.path : PLUGIN_CONF_SYSTEM);
	return P.conf_error[0] || rc != 0;
}

/* The pause as one list of steps (src/node/steps.c) over P.fz: the tree
 * checked and the group joined (the plugin's rows), then suspend's prepare,
 * the group's boundary and the lock (freeze.c's rows, shared with cusnap). */
static int pause_failed(void *ctx, const char *why)
{
	(void)ctx;
	if (P.fz.prepared) { /* (whether the prepare changed anything or not: a tree without the interposer) */
		snprintf(P.fz.why, sizeof(P.fz.why), "%s", why); /* said by the prepare's undo */
		return 1;
	}
	plugin_say(VOICE_ERROR, "%s: dump refused, nothing changed", why);
	return 1;
}

/* Everything that would make the dump fail, refused before anything changes;
 * the tree's sockets and restore threads read while it runs. */
static int pause_check(void *ctx)
{
	(void)ctx;
	if (tree_hold(&P.t, "criu dump") || check_freezable(&P.t) || check_interposer(&P.t))
		return 1; /* (said) */
	ssize_t ns = inet_of_tree(P.t.procs, P.t.nprocs, &P.socks);
	P.nsocks = ns > 0 ? (size_t)ns : 0;
	/* The restore threads now: once the tree is frozen no process answers. */
	P.restore_tid = calloc(P.t.ncuda + 1, sizeof(*P.restore_tid));
	if (!P.restore_tid)
		return pause_failed(ctx, "out of memory");
	for (size_t i = 0; i < P.t.ncuda; i++) {
		CUresult q = P.t.nat.restore_tid(P.t.targets[i].obs, &P.restore_tid[i]);
		if (q != CUDA_SUCCESS) {
			char why[512];
			snprintf(why, sizeof(why), "process %d: cuCheckpointProcessGetRestoreThreadId: %s",
				 P.t.targets[i].obs, native_error(&P.t.nat, q));
			return pause_failed(ctx, why);
		}
	}
	return 0;
}

static int pause_join(void *ctx)
{
	(void)ctx;
	if (plugin_group_join(&P.conf.s, P.root, NULL, "checkpoint", &P.group) < 0)
		return 1; /* (said) */
	P.fz.boundary = P.group ? group_boundary(P.group) : NULL;
	return 0;
}

static void leave(int code)
{
	P.fz.boundary = NULL;
	P.criu_fails |= plugin_group_leave(&P.group, code) != code;
}

/* Every member undoes. */
static int pause_leave(void *ctx, int code)
{
	(void)ctx;
	leave(1);
	return code;
}

static int pause_lock(void *ctx)
{
	int rc = freeze_lock(ctx);
	if (rc == 0 && fault_fails(FAULT_PLUGIN_PAUSE))
		return pause_failed(ctx, "the plugin's pause failed");
	return rc;
}

static const struct step pause_steps[] = {
	{"check", NULL, pause_check, NULL},
	{"group", NULL, pause_join, pause_leave},
	{"prepare", NULL, freeze_prepare, freeze_undo},
	{"boundary", freeze_in_group, freeze_boundary, NULL},
	{"lock", NULL, pause_lock, NULL},
};

static const struct sequence pause_sequence = {"plugin pause", pause_steps,
					       sizeof(pause_steps) / sizeof(pause_steps[0]), pause_failed};

int pause_devices(int pid)
{
	if (P.stage != CRIU_STAGE_DUMP)
		return -ENOTSUP;        /* a pre-dump copies memory only: the tree is left alone */
	if (P.owner != OWNER_UNDECIDED) /* a child: the whole tree was done at the root */
		return P.owner == OWNER_MINE   ? 0
		       : P.owner == OWNER_PEER ? peer_call(CRIU_HOOK_PAUSE_DEVICES, pid)
					       : -ENOTSUP;
	if (images_dir(P.dir, sizeof(P.dir)) < 0) {
		plugin_say(VOICE_ERROR, "cannot tell CRIU's images directory: dump refused, nothing changed");
		return -1;
	}
	settings_for(pid);
	peer_attach(CR_PLUGIN_DESC.hooks); /* (loaded after this plugin: it is there by now) */
	P.owner = dump_owner(pid);
	if (P.owner == OWNER_PEER) {
		int r = peer_call(CRIU_HOOK_PAUSE_DEVICES, pid);
		if (r != -ENOTSUP)
			return r;
		P.owner = OWNER_MINE; /* it is disabled here: the native steps alone, as without it */
	}
	if (P.owner != OWNER_MINE)
		return -ENOTSUP; /* no CUDA here: CRIU alone */
	if (images_trusted("dump refused, nothing changed") < 0)
		return -1;
	int rc = tree_load(pid, &P.conf.s, &P.t);
	P.loaded = rc == 0; /* (what it loaded, freed at exit) */
	if (rc == 0 && P.t.ncuda == 0) {
		P.owner = OWNER_NONE; /* the driver mapped, never initialised: nothing on a GPU */
		return -ENOTSUP;
	}
	if (dump_refused(pid, rc))
		return -1; /* (said; nothing changed) */
	P.root = pid;
	digests_free(&P.content_known); /* (a pause before, whose dump never ended) */
	P.rec = (struct record){.root = pid, .dir = P.dir, .content_digests = &P.content_known};
	P.fz = (struct freeze){.t = &P.t,
			       .rec = &P.rec,
			       .content = settings_content(&P.conf.s, true),
			       .failed = pause_failed};
	size_t at;
	if (steps_run(&pause_sequence, &P.fz, &at) != 0)
		return -1;
	fault_point(FAULT_PLUGIN_PAUSE);
	return 0;
}

/* The plugin's image: what the restore needs besides the state file. */
static int write_image(void)
{
	/* The TIME_WAIT entries the tree's own connections left on its ports: a
	 * restore on this host clears them (DESIGN.md §9.4). */
	struct inet_sock *tw = NULL;
	ssize_t ntw = P.nsocks ? inet_time_wait_of(P.socks, P.nsocks, &tw) : 0;
	struct plugin_image im = {.content = settings_content(&P.conf.s, true),
				  .vmm = P.t.nshim > 0,
				  .cuda_processes = P.t.ncuda,
				  .gpus = devmap_gpus_json(&P.t.nat),
				  .network = P.nsocks ? inet_record(P.socks, P.nsocks, tw, ntw > 0 ? (size_t)ntw : 0)
						      : NULL};
	free(tw);
	im.needs = compat_record(&P.t.nat, P.t.nshim ? P.fz.r.device_bytes : NULL);
	im.pids = json_array();
	for (size_t i = 0; im.pids && i < P.t.nprocs; i++)
		json_array_append_new(im.pids, json_pack("[i,i]", (int)P.t.procs[i].pid, (int)P.t.procs[i].nspid));
	criu_self_version(im.criu_version, sizeof(im.criu_version));
	char why[PATH_MAX + 200];
	snprintf(im.control_dir, sizeof(im.control_dir), "%s", P.conf.s.control_dir);
	control_host_path(P.root, P.conf.s.control_dir, im.control_dir_here, sizeof(im.control_dir_here));
	int rc = plugin_image_write(P.dir, &im, why, sizeof(why));
	plugin_image_free(&im);
	if (rc < 0)
		plugin_say(VOICE_ERROR, "%s", why);
	return rc;
}

/* CHECKPOINT_DEVICES as a list of steps over P.fz: each process's restore
 * thread run alone, the native checkpoint (freeze.c's row), the threads
 * stopped again (also the undo of running them), the plugin's image. A
 * failure fails the dump, whose end puts the tree back (dump_exit). */
static int checkpoint_failed(void *ctx, const char *why)
{
	(void)ctx;
	plugin_say(VOICE_ERROR, "%s: the dump fails; the tree is put back before criu exits", why);
	return 1;
}

static int threads_back(void *ctx)
{
	(void)ctx;
	for (size_t i = 0; i < P.threads_running; i++) {
		int e = restore_thread(P.restore_tid[i], false, &P.thread_mask[i]);
		if (e < 0)
			plugin_say(VOICE_ERROR, "process %d: stopping its restore thread %d again: %s",
				   P.t.targets[i].obs, P.restore_tid[i], strerror(-e));
	}
	P.threads_running = 0;
	free(P.thread_mask);
	P.thread_mask = NULL;
	return 0;
}

static int threads_run(void *ctx)
{
	size_t n = P.t.ncuda;
	P.threads_running = 0;
	if (!(P.thread_mask = calloc(n + 1, sizeof(*P.thread_mask))))
		return checkpoint_failed(ctx, "out of memory");
	for (; P.threads_running < n; P.threads_running++) {
		size_t i = P.threads_running;
		int e = restore_thread(P.restore_tid[i], true, &P.thread_mask[i]);
		if (e < 0) {
			char why[256];
			snprintf(why, sizeof(why), "process %d: its restore thread %d cannot run: %s",
				 P.t.targets[i].obs, P.restore_tid[i], strerror(-e));
			threads_back(ctx); /* (the step undoes its own part) */
			return checkpoint_failed(ctx, why);
		}
	}
	return 0;
}

static int threads_undo(void *ctx, int code)
{
	threads_back(ctx);
	return code;
}

static int checkpoint_image(void *ctx)
{
	if (fault_fails(FAULT_PLUGIN_CHECKPOINT) || write_image() < 0)
		return checkpoint_failed(ctx, "the plugin's checkpoint failed");
	return 0;
}

static const struct step checkpoint_steps[] = {
	{"threads", NULL, threads_run, threads_undo},
	{"native checkpoint", NULL, freeze_checkpoint, NULL},
	{"threads back", NULL, threads_back, NULL},
	{"image", NULL, checkpoint_image, NULL},
};

static const struct sequence checkpoint_sequence = {"plugin checkpoint", checkpoint_steps,
						    sizeof(checkpoint_steps) / sizeof(checkpoint_steps[0]),
						    checkpoint_failed};

int checkpoint_devices(int pid)
{
	if (P.owner == OWNER_PEER)
		return peer_call(CRIU_HOOK_CHECKPOINT_DEVICES, pid);
	if (P.owner != OWNER_MINE)
		return -ENOTSUP;
	if (P.checkpointed)
		return 0;
	P.fz.failed = checkpoint_failed;
	size_t at;
	if (steps_run(&checkpoint_sequence, &P.fz, &at) != 0)
		return -1;
	fault_point(FAULT_PLUGIN_CHECKPOINT);
	P.checkpointed = true;
	return 0;
}

/* In the helper: once CRIU has let the tree go, a failed dump undone, a tree
 * that runs on completed, in place. Its exit code. */
static int after_dump(int ret)
{
	setsid();
	/* A dump that kills the tree kills each process while it still holds it
	 * (CRIU's SIGKILL, never a detach), so a process no longer held and alive
	 * was let go to run on: -R, or a failed dump. */
	int alive = wait_released(&P.t, 60000);
	if (alive < 0) {
		plugin_say(VOICE_ERROR,
			   "CRIU did not let the tree of %d go within 60 s: `cusnap resume --pid "
			   "%d` finishes it",
			   (int)P.root, (int)P.root);
		return 2;
	}
	if (alive == 0)
		return 0; /* dumped and ended: the checkpoint stands */
	if (ret != 0)
		return finish(&P.t, &P.rec, "the CRIU dump failed");
	struct recovery r;
	char err[1600];
	if (tree_release(&P.t, -1, P.dir, RECOVER_ANY, NULL, RELEASE_IN_PLACE, &r, err, sizeof(err)) < 0)
		return finish(&P.t, &P.rec, "after the dump: %s", err);
	plugin_say(VOICE_INFO, "the tree of %d runs on after the dump", (int)P.root);
	return 0;
}

/* After a dump that succeeded: the images' digests into the images directory
 * (IMAGES_DIGESTS; CRIU has flushed every image by its plugins' exit), which a
 * restore checks before any process is made. A failure is a warning: the
 * checkpoint stands, unverified. */
static void write_digests(void)
{
	char err[PATH_MAX + 256];
	struct file_digests files;
	struct digest_count count;
	json_t *j = images_digest(criu_images_fd(), ".", P.dir, &P.content_known, &files, &count, err, sizeof(err)) < 0
			    ? NULL
			    : digests_encode(&files);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	if (!text)
		snprintf(err + strlen(err), sizeof(err) - strlen(err), "%s", j ? "out of memory" : "");
	if (!text || atomic_write_text(criu_images_fd(), P.dir, IMAGES_DIGESTS, text, 0600, err, sizeof(err)) < 0)
		plugin_say(VOICE_WARN, "%s: the images get no digests", err);
	free(text);
	json_decref(j);
	digests_free(&files);
}

/* The dump's tail: a failed dump or -R handed to a helper CRIU waits for. */
void dump_exit(int ret)
{
	if (P.owner == OWNER_MINE && ret == 0 && P.checkpointed)
		write_digests();
	digests_free(&P.content_known);
	P.rec.content_digests = NULL;
	P.dump_failed = ret != 0;
	if (P.owner != OWNER_MINE || !P.rec.changed || (ret == 0 && !P.checkpointed)) {
		if (P.owner == OWNER_MINE)
			plugin_metrics("checkpoint", ret ? 1 : 0);
		leave(ret ? 1 : 0);
		return;
	}
	int h = helper_start(&P.helper);
	if (h == 0) { /* (in the helper) */
		int code = after_dump(ret);
		tree_free(&P.t); /* the lock released before CRIU hears it is done */
		helper_report(&P.helper, code);
	}
	if (h < 0) {
		plugin_say(VOICE_ERROR,
			   "cannot start the helper that puts the tree back (%s): `cusnap "
			   "resume --pid %d` does it",
			   strerror(errno), (int)P.root);
		P.criu_fails = true;
	}
	/* The helper holds the tree's lock now (the same open files): closed here
	 * without removing them. */
	tree_lock_hand_over(&P.t.lock);
}
