/* SPDX-License-Identifier: MIT */
/* cusnap's CRIU plugin (DESIGN.md §9): plain `criu dump` and `criu restore`
 * (and so the container engines that run CRIU) of a tree whose CUDA processes
 * run under the interposer do what `cusnap checkpoint` and `restore` do, with
 * cusnap's own code: the coordinator library, the native steps, the finish
 * path. This file is the glue to CRIU's hooks (criu_abi.h); its settings come
 * from a file (plugin_conf.c), what it says goes into CRIU's log too
 * (plugin_log.c), and CRIU's own CUDA plugin may sit beside it (plugin_peer.c).
 *
 * Dump. At the first PAUSE_DEVICES (the root, still running) the tree is found
 * and checked (a partial interposition fails the dump before anything
 * changes), its shared memory prepared (the state file goes into the images
 * directory) and every CUDA process locked. At the first CHECKPOINT_DEVICES
 * (the tree frozen) every CUDA process is checkpointed natively: CRIU holds all
 * their threads stopped, so each process's restore thread runs alone
 * meanwhile, its signals blocked (as CRIU's CUDA plugin does). Then the
 * plugin's image (cusnap-plugin.json). When the dump fails, or the tree runs on
 * (-R), CRIU lets the tree go only after the plugin's exit: a helper forked
 * there waits for that and undoes (or completes) in place as cusnap would,
 * holding the tree's lock, while CRIU waits for it before it exits: when `criu
 * dump` returns, the tree is whole (or the failure is in CRIU's log).
 *
 * Restore. At init, before any process is made, the restore-complete a
 * previous restore left is removed. RESUME_DEVICES_LATE names the restored
 * root first (the tree still stopped): a helper forked there waits until CRIU
 * lets the tree go, then native restore and unlock (the job file written back
 * first), the sharing rebuilt from the state file, then restore-complete; or
 * the tree killed, and `criu restore` exits 1. CRIU's exit waits for the
 * helper; without -d CRIU waits for the tree meanwhile, which runs once
 * restore-complete is written. */
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

#define API __attribute__((visibility("default")))

/* Who works on the tree CRIU was given. */
enum owner {
	OWNER_UNDECIDED,
	OWNER_NONE, /* no CUDA (or not dumped by this plugin): CRIU, and any other plugin */
	OWNER_MINE, /* this plugin */
	OWNER_PEER, /* CRIU's CUDA plugin: CUDA processes, none under the interposer */
};

API struct criu_plugin_desc CR_PLUGIN_DESC;

static struct {
	int stage; /* enum criu_stage */
	enum owner owner;
	bool checkpointed; /* CHECKPOINT_DEVICES done */
	struct tree t;
	bool loaded; /* t holds the tree */
	struct record rec;
	char dir[PATH_MAX]; /* the images directory */
	struct plugin_conf conf;
	char conf_error[PATH_MAX + 600]; /* the configuration file is refused: why */
	char control[4096];              /* the workload's control directory */
	struct settings s;               /* what the node library is given (settings_for) */
	pid_t root;
	int *restore_tid;                         /* each CUDA process's restore thread, asked while it runs */
	struct devmap map;                        /* restore: the GPUs the checkpoint's are restored onto */
	uint64_t device_bytes[PROTO_MAX_DEVICES]; /* dump: the tree's VMM memory per GPU (prepare's count) */
	struct inet_sock *socks;                  /* dump: the tree's sockets, read while it runs */
	size_t nsocks;
	struct helper helper;
	bool criu_fails;     /* CRIU's exit status becomes 1 (set once the plugin is kept loaded) */
	bool restoring;      /* restore: the images are this plugin's */
	bool dump_failed;    /* dump: CRIU's status was not 0 */
	double t0;           /* when CRIU loaded the plugin (the operation's start, for the metrics) */
	struct group *group; /* dump: the group this dump is one member of (plugin_group.c) */
} P;

/* metrics_dir: the dump's or restore's result for node_exporter (a warning
 * when it cannot be written). */
static void plugin_metrics(const char *op, int code)
{
	char why[PATH_MAX + 200];
	if (P.conf.s.metrics_dir[0] &&
	    metrics_write(P.conf.s.metrics_dir, op, code, (now_ms() - P.t0) / 1000.0, P.dir, why, sizeof(why)) < 0)
		plugin_say(VOICE_WARN, "metrics not written: %s", why);
}

/* ---- what every hook needs ---- */

/* The images directory's path, from CRIU's descriptor of it. */
static int images_dir(char *out, size_t len)
{
	char link[64];
	if (!criu_get_image_dir)
		return -1;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", criu_get_image_dir());
	ssize_t n = readlink(link, out, len - 1);
	if (n <= 0)
		return -1;
	out[n] = '\0';
	return 0;
}

/* Where this plugin was loaded from (CRIU's libdir): path into out. */
static void own_dir(char *out, size_t len)
{
	Dl_info info;
	out[0] = '\0';
	if (dladdr(&CR_PLUGIN_DESC, &info) && info.dli_fname && strrchr(info.dli_fname, '/')) {
		snprintf(out, len, "%s", info.dli_fname);
		*strrchr(out, '/') = '\0';
	}
}

/* CRIU unloads its plugins after their exit: this one stays (RTLD_NODELETE). */
static void stay_loaded(void)
{
	Dl_info info;
	if (dladdr(&CR_PLUGIN_DESC, &info) && info.dli_fname)
		dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

/* The settings: the configuration file and the environment (plugin_conf.c),
 * then the workload's own SNAPSHOT_CONTROL_DIR, then the defaults. */
static void settings_for(pid_t root)
{
	P.s = P.conf.s;
	if (P.s.control_dir[0])
		snprintf(P.control, sizeof(P.control), "%s", P.s.control_dir);
	else if (!P.control[0] &&
		 !(proc_environ_get(root, "SNAPSHOT_CONTROL_DIR", P.control, sizeof(P.control)) && P.control[0] == '/'))
		snprintf(P.control, sizeof(P.control), "%s", CONTROL_DIR_DEFAULT);
	snprintf(P.s.control_dir, sizeof(P.s.control_dir), "%s", P.control);
}

/* How long CRIU waits for a helper: the release (60 s), then an undo. */
static int helper_bound_ms(void)
{
	return 90000 + 2 * coord_undo_timeout_ms(P.s.timeout_ms ? P.s.timeout_ms : settings_default().timeout_ms);
}

/* ---- dump ---- */

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

/* CRIU's images directory and everything in it its owner's or root's,
 * writable by no one else (DESIGN.md §9): what the plugin reads and writes
 * there steers a restore run as root. 0, or -1 (said, with outcome). */
static int images_trusted(const char *outcome)
{
	char why[PATH_MAX + 256];
	int fd = path_ancestors_trusted(P.dir, why, sizeof(why)) < 0 ? -1
								     : dir_open_trusted(P.dir, false, why, sizeof(why));
	int rc = fd >= 0 ? dir_tree_trusted(fd, P.dir, why, sizeof(why)) : -1;
	if (fd >= 0)
		close(fd);
	if (rc < 0)
		plugin_say(VOICE_ERROR,
			   "%s (everything in CRIU's images directory must be yours or root's, writable by "
			   "no one else): %s",
			   why, outcome);
	return rc;
}

static int pause_devices(int pid)
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
	int rc = tree_load(pid, &P.s, &P.t);
	P.loaded = rc == 0; /* (what it loaded, freed at exit) */
	if (rc == 0 && P.t.ncuda == 0) {
		P.owner = OWNER_NONE; /* the driver mapped, never initialised: nothing on a GPU */
		return -ENOTSUP;
	}
	if (dump_refused(pid, rc) || tree_hold(&P.t, "criu dump") || check_freezable(&P.t) || check_interposer(&P.t))
		return -1; /* (said; nothing changed) */
	ssize_t ns = inet_of_tree(P.t.procs, P.t.nprocs, &P.socks);
	P.nsocks = ns > 0 ? (size_t)ns : 0;
	/* The restore threads now: once the tree is frozen no process answers. */
	P.restore_tid = calloc(P.t.ncuda + 1, sizeof(*P.restore_tid));
	for (size_t i = 0; P.restore_tid && i < P.t.ncuda; i++) {
		CUresult q = P.t.nat.restore_tid(P.t.targets[i].obs, &P.restore_tid[i]);
		if (q != CUDA_SUCCESS) {
			plugin_say(VOICE_ERROR, "process %d: %s: %s: dump refused, nothing changed", P.t.targets[i].obs,
				   "cuCheckpointProcessGetRestoreThreadId", native_error(&P.t.nat, q));
			return -1;
		}
	}
	if (!P.restore_tid)
		return -1;
	P.root = pid;
	P.rec = (struct record){.root = pid, .dir = P.dir};
	if (plugin_group_join(&P.s, pid, NULL, "checkpoint", &P.group) < 0)
		return -1; /* (said; nothing changed) */
	struct coord_report r;
	if (tree_prepare(&P.t, &P.rec, settings_content(&P.s, true), &r)) {
		plugin_group_leave(&P.group, 1); /* (every member undoes) */
		return -1;                       /* (undone and said) */
	}
	memcpy(P.device_bytes, r.device_bytes, sizeof(P.device_bytes));
	char err[1600] = "";
	/* The group's boundary: every member prepared before any locks. */
	struct boundary *b = P.group ? group_boundary(P.group) : NULL;
	if ((b && b->ready(b, err, sizeof(err)) < 0) || native_lock(&P.t, &P.rec, err, sizeof(err)) < 0 ||
	    fault_fails(FAULT_PLUGIN_PAUSE)) {
		/* The tree still runs: undone here, at once. */
		finish(&P.t, &P.rec, "%s", err[0] ? err : "the plugin's pause failed");
		P.rec.changed = false;
		plugin_group_leave(&P.group, 1);
		return -1;
	}
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
	struct plugin_image im = {.content = settings_content(&P.s, true),
				  .vmm = P.t.nshim > 0,
				  .cuda_processes = P.t.ncuda,
				  .gpus = devmap_gpus_json(&P.t.nat),
				  .network = P.nsocks ? inet_record(P.socks, P.nsocks, tw, ntw > 0 ? (size_t)ntw : 0)
						      : NULL};
	free(tw);
	im.needs = compat_record(&P.t.nat, P.t.nshim ? P.device_bytes : NULL);
	im.pids = json_array();
	for (size_t i = 0; im.pids && i < P.t.nprocs; i++)
		json_array_append_new(im.pids, json_pack("[i,i]", (int)P.t.procs[i].pid, (int)P.t.procs[i].nspid));
	criu_self_version(im.criu_version, sizeof(im.criu_version));
	char why[PATH_MAX + 200];
	snprintf(im.control_dir, sizeof(im.control_dir), "%s", P.control);
	control_host_path(P.root, P.control, im.control_dir_here, sizeof(im.control_dir_here));
	int rc = plugin_image_write(P.dir, &im, why, sizeof(why));
	plugin_image_free(&im);
	if (rc < 0)
		plugin_say(VOICE_ERROR, "%s", why);
	return rc;
}

static int checkpoint_devices(int pid)
{
	if (P.owner == OWNER_PEER)
		return peer_call(CRIU_HOOK_CHECKPOINT_DEVICES, pid);
	if (P.owner != OWNER_MINE)
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
			plugin_say(VOICE_ERROR, "process %d: stopping its restore thread %d again: %s",
				   P.t.targets[i].obs, tid[i], strerror(-e));
	}
	free(tid);
	free(mask);
	if (rc == 0 && (fault_fails(FAULT_PLUGIN_CHECKPOINT) || write_image() < 0))
		rc = -1, snprintf(err, sizeof(err), "the plugin's checkpoint failed");
	if (rc < 0) {
		plugin_say(VOICE_ERROR, "%s: the dump fails; the tree is put back before criu exits", err);
		return -1;
	}
	fault_point(FAULT_PLUGIN_CHECKPOINT);
	P.checkpointed = true;
	return 0;
}

/* In the helper: once CRIU has let the tree go, a failed dump undone, a tree
 * that runs on completed, in place. Its exit code. */
static int after_dump(int ret)
{
	setsid();
	int alive = wait_released(&P.t, 60000);
	if (alive > 0 && ret == 0)
		usleep(300000), alive = wait_released(&P.t, 1000); /* (a dump that kills the tree kills it now) */
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
	if (tree_release(&P.t, P.dir, RECOVER_ANY, NULL, RELEASE_IN_PLACE, &r, err, sizeof(err)) < 0)
		return finish(&P.t, &P.rec, "after the dump: %s", err);
	plugin_say(VOICE_INFO, "the tree of %d runs on after the dump", (int)P.root);
	return 0;
}

/* At CRIU's exit (atexit): the helper's work done (or its bound passed), and
 * CRIU's status 1 when the tree could not be put back. */
static void criu_exit_waits(void)
{
	if (P.helper.pid) {
		int code = helper_wait(&P.helper, helper_bound_ms());
		if (code < 0)
			plugin_say(VOICE_ERROR,
				   "the helper putting the tree of %d back did not finish within %d ms "
				   "(it goes on; `cusnap inspect --pid %d` shows where it is)",
				   (int)P.root, helper_bound_ms(), (int)P.root);
		P.criu_fails |= code != 0;
		/* A failed dump put back is a failure left running (1); one not put back, 2. */
		int outcome = code == 0 && !P.dump_failed ? 0 : code == 0 || code == 1 ? 1 : 2;
		if (P.stage == CRIU_STAGE_DUMP) {
			plugin_metrics("checkpoint", outcome);
			P.criu_fails |= plugin_group_leave(&P.group, outcome) != outcome;
		}
	}
	plugin_log_stop();
	if (P.criu_fails)
		_exit(1);
}

/* The dump's tail: a failed dump or -R handed to a helper CRIU waits for. */
/* After a dump that succeeded: the images' digests into the images directory
 * (IMAGES_DIGESTS; CRIU has flushed every image by its plugins' exit), which a
 * restore checks before any process is made. A failure is a warning: the
 * checkpoint stands, unverified. */
static void write_digests(void)
{
	char err[PATH_MAX + 256];
	json_t *files = images_digest(P.dir, err, sizeof(err));
	char *text = files ? json_dumps(files, JSON_COMPACT) : NULL;
	if (!files || atomic_write_text(-1, P.dir, IMAGES_DIGESTS, text, 0600, err, sizeof(err)) < 0)
		plugin_say(VOICE_WARN, "%s: the images get no digests", err);
	free(text);
	json_decref(files);
}

static void dump_exit(int ret)
{
	if (P.owner == OWNER_MINE && ret == 0 && P.checkpointed)
		write_digests();
	P.dump_failed = ret != 0;
	if (P.owner != OWNER_MINE || !P.rec.changed || (ret == 0 && !P.checkpointed)) {
		if (P.owner == OWNER_MINE)
			plugin_metrics("checkpoint", ret ? 1 : 0);
		P.criu_fails |= plugin_group_leave(&P.group, ret ? 1 : 0) != (ret ? 1 : 0);
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

/* ---- restore ---- */

/* CRIU makes each process of a tree dumped in the host's PID namespace at its
 * old PID: a zombie of the dumped tree still holding one (its parent, often
 * init, has not reaped it yet) is waited for, a live process holding one is
 * named. A tree dumped in a PID namespace of its own is restored in a new one.
 * 0, or -1 (said). */
static int pids_free(const json_t *pids)
{
	char why[512];
	for (size_t i = 0; i < json_array_size(pids); i++) {
		const json_t *p = json_array_get(pids, i);
		pid_t pid = (pid_t)json_integer_value(json_array_get(p, 0));
		if (pid <= 0 || pid != (pid_t)json_integer_value(json_array_get(p, 1)))
			continue;
		if (pid_free_wait(pid, PID_ZOMBIE_WAIT_MS, why, sizeof(why)) < 0) {
			plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", why);
			return -1;
		}
	}
	return 0;
}

/* Every reason this machine cannot take the checkpoint (its GPUs, models,
 * memory, driver, the state format, a CRIU older than the one that dumped)
 * said at once: 0, or -1. */
static int restore_gate(const struct plugin_image *im)
{
	char mine[64], why[1024];
	criu_self_version(mine, sizeof(mine));
	json_t *reasons = compat_check(P.conf.s.libcuda, im->needs, &P.map, im->criu_version, mine, why, sizeof(why));
	if (!reasons) {
		plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", why);
		return -1;
	}
	size_t n = json_array_size(reasons);
	for (size_t i = 0; i < n; i++)
		plugin_say(VOICE_ERROR, "cannot restore here: %s", json_string_value(json_array_get(reasons, i)));
	if (n)
		plugin_say(VOICE_ERROR,
			   "this machine cannot restore the checkpoint (%zu reason%s above): restore "
			   "refused, nothing made",
			   n, n == 1 ? "" : "s");
	json_decref(reasons);
	return n ? -1 : 0;
}

/* The configuration's device_map against the checkpoint's GPUs (the image's
 * list) and this machine's, into P.map: 0, or -1 (said). */
static int restore_map(const json_t *gpus)
{
	char why[1200];
	if (devmap_for(&P.conf.s, gpus, &P.map, why, sizeof(why)) == 0)
		return 0;
	plugin_say(VOICE_ERROR, "device_map = %s (%s): %s: restore refused, nothing made", P.conf.s.device_map,
		   P.conf.path[0] ? P.conf.path : "CUSNAP_DEVICE_MAP", why);
	return -1;
}

/* The plugin's image in the images directory: 1 (control directories into
 * P.control and here, the device map checked), 0 when there is none (not
 * dumped with this plugin), -1 when it cannot be read or the map does not fit
 * (said). */
static int read_image(char *here, size_t len)
{
	struct plugin_image im;
	char why[PATH_MAX + 200];
	if (images_dir(P.dir, sizeof(P.dir)) < 0)
		return 0;
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/" PLUGIN_IMAGE, P.dir);
	if (access(path, F_OK) == 0 && images_trusted("restore refused, nothing made") < 0)
		return -1; /* (ours, and not to be read) */
	int got = plugin_image_read(P.dir, &im, why, sizeof(why));
	if (got < 0)
		plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", why);
	if (got <= 0)
		return got;
	snprintf(P.control, sizeof(P.control), "%s", im.control_dir);
	snprintf(here, len, "%s", im.control_dir_here);
	int rc = restore_map(im.gpus) < 0 ? -1 : 1;
	/* This machine able to take the checkpoint (DESIGN.md §9.5), CRIU included. */
	if (rc > 0 && restore_gate(&im) < 0)
		rc = -1;
	/* Its PIDs free (a zombie of the dumped tree its parent has not reaped yet waited for). */
	if (rc > 0 && pids_free(im.pids) < 0)
		rc = -1;
	/* The ports the tree bound, free again (its own TIME_WAIT entries cleared). */
	if (rc > 0 && im.network && inet_record_ports_free(im.network, INET_PORT_WAIT_MS, why, sizeof(why)) < 0) {
		plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", why);
		rc = -1;
	}
	plugin_image_free(&im);
	return rc;
}

/* The restore-complete a previous restore left in directory dfd removed: 0, or
 * -1 (said). */
static int remove_stale_done(int dfd, const char *where)
{
	if (unlinkat(dfd, CONTROL_RESTORE_DONE, 0) == 0 || errno == ENOENT)
		return 0;
	plugin_say(VOICE_ERROR, "cannot remove the stale %s/%s: %s: restore refused", where, CONTROL_RESTORE_DONE,
		   strerror(errno));
	return -1;
}

/* The images as the dump wrote them (its digests): 0, or -1 (said). A
 * checkpoint without digests (an older plugin's) is restored with a warning. */
static int images_whole(void)
{
	char path[PATH_MAX + 32], why[PATH_MAX + 256];
	snprintf(path, sizeof(path), "%s/" IMAGES_DIGESTS, P.dir);
	if (access(path, F_OK) < 0) {
		plugin_say(VOICE_WARN,
			   "%s: no digests of the images (an older plugin's checkpoint): "
			   "restored unverified",
			   P.dir);
		return 0;
	}
	json_error_t je;
	json_t *files = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	int rc = json_is_object(files)
			 ? images_verify(P.dir, files, why, sizeof(why))
			 : (snprintf(why, sizeof(why), "%s: %s", path, files ? "not an object" : je.text), -1);
	json_decref(files);
	if (rc < 0)
		plugin_say(VOICE_ERROR,
			   "%s: refusing to restore a damaged checkpoint; restore refused, nothing "
			   "made",
			   why);
	return rc;
}

/* Before any process is made: ours to restore? The stale restore-complete goes
 * (where the dumped tree's control directory still is). 0, or -1 (said). */
static int restore_begin(void)
{
	char here[PATH_MAX], why[PATH_MAX + 128];
	int got = read_image(here, sizeof(here));
	P.restoring = got != 0;
	if (got <= 0) {
		P.owner = OWNER_NONE;
		return got;
	}
	P.owner = OWNER_MINE;
	if (P.conf_error[0]) {
		plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", P.conf_error);
		return -1;
	}
	if (images_whole() < 0)
		return -1;
	int dfd = here[0] ? control_dir_open_here(here, why, sizeof(why)) : -ENOENT;
	if (dfd == -ENOENT)
		return 0; /* (elsewhere now: removed inside the restored root) */
	if (dfd < 0) {
		plugin_say(VOICE_ERROR, "%s: restore refused, nothing made", why);
		return -1;
	}
	int rc = remove_stale_done(dfd, here);
	close(dfd);
	return rc;
}

/* In the helper: once CRIU has let the restored tree go, native restore,
 * unlock, the sharing (tree_recover, as `cusnap resume` brings a suspended tree
 * back), restore-complete; or the tree killed. Its exit code. */
static int after_restore(void)
{
	setsid();
	for (int waited = 0; proc_status_field("/proc", P.root, "TracerPid") > 0; waited += 20) {
		if (waited > 60000) {
			plugin_say(VOICE_ERROR,
				   "CRIU did not let the restored tree of %d go within 60 s: it is "
				   "killed",
				   (int)P.root);
			proc_tree_kill(P.root, false);
			return 2;
		}
		usleep(20000);
	}
	if (proc_status_field("/proc", P.root, "TracerPid") < 0)
		return 2; /* gone: CRIU failed the restore and killed it (its log says why) */
	struct group *group;
	if (plugin_group_join(&P.s, 0, P.dir, "restore", &group) < 0) {
		proc_tree_kill(P.root, false);
		return 2;
	}
	if (group)
		P.s.boundary = group_boundary(group); /* (met in tree_release, before restore-complete) */
	struct tree t;
	struct recovery r;
	char err[4800];
	int rc = tree_load(P.root, &P.s, &t);
	if (rc == 0 && wait_released(&t, 5000) < 0)
		rc = -1, snprintf(err, sizeof(err), "CRIU still holds some of its processes");
	else if (rc == 0 && (rc = tree_hold(&t, "criu restore")) != 0)
		snprintf(err, sizeof(err), "another command holds the tree");
	else if (rc)
		snprintf(err, sizeof(err), "the restored tree cannot be loaded");
	if (rc == 0 && tree_release(&t, P.dir, RECOVER_ANY, &P.map, RELEASE_RESTORED, &r, err, sizeof(err)) < 0)
		rc = -1; /* (the tree killed) */
	else if (rc != 0)
		proc_tree_kill(P.root, false);
	if (rc != 0)
		plugin_say(VOICE_ERROR, "restore of the tree of %d: %s: the restored tree is killed", (int)P.root, err);
	tree_free(&t);
	return plugin_group_leave(&group, rc == 0 ? 0 : 2);
}

static int resume_devices_late(int pid)
{
	if (P.owner != OWNER_MINE || P.root)
		return P.owner == OWNER_MINE ? 0 : -ENOTSUP;
	P.root = pid; /* (the root comes first) */
	settings_for(pid);
	char why[PATH_MAX + 128];
	int dfd = control_dir_open(pid, P.control, why, sizeof(why));
	int rc = dfd >= 0 ? remove_stale_done(dfd, P.control) : dfd == -ENOENT ? 0 : -1;
	if (dfd >= 0)
		close(dfd);
	else if (rc < 0)
		plugin_say(VOICE_ERROR, "%s", why);
	int h = rc == 0 ? helper_start(&P.helper) : -1;
	if (h == 0)
		helper_report(&P.helper, after_restore()); /* (in the helper) */
	if (h < 0) {
		/* CRIU goes on whatever this hook returns: the tree is killed here. */
		plugin_say(VOICE_ERROR, "restore of the tree of %d cannot go on: the restored tree is killed", pid);
		proc_tree_kill(pid, false);
		P.criu_fails = true;
		return -1;
	}
	return 0;
}

static void restore_exit(int ret)
{
	if (!P.helper.pid) {
		if (P.restoring)
			plugin_metrics("restore", ret ? 1 : 0); /* (refused before anything was made) */
		return;
	}
	int code = helper_wait(&P.helper, helper_bound_ms());
	plugin_metrics("restore", code == 0 && ret == 0 ? 0 : 2);
	if (code != 0 && ret == 0) {
		if (code < 0)
			plugin_say(VOICE_ERROR, "the restore of the tree of %d did not finish within %d ms",
				   (int)P.root, helper_bound_ms());
		P.criu_fails = true; /* criu restore exits 1 */
	}
}

/* ---- the descriptor ---- */

static int plugin_init(int stage)
{
	struct helper keep = P.helper;
	memset(&P, 0, sizeof(P));
	P.helper = keep;
	P.stage = stage;
	P.t0 = now_ms();
	/* CRIU unloads a plugin right after its exit; the native steps' worker
	 * threads (detached: a call stuck in the driver is left behind) may still
	 * be on their way out of its code then, which was a SIGSEGV in about one
	 * refused dump in twenty. The plugin stays until CRIU exits. */
	stay_loaded();
	plugin_log_start();
	char dir[PATH_MAX], why[PATH_MAX + 512];
	own_dir(dir, sizeof(dir));
	if (plugin_conf_load(&P.conf, dir[0] ? dir : NULL, why, sizeof(why)) < 0)
		snprintf(P.conf_error, sizeof(P.conf_error), "the plugin's configuration is refused: %s", why);
	else if (fault_check(why, sizeof(why)) < 0)
		snprintf(P.conf_error, sizeof(P.conf_error), "%s", why);
	peer_attach(CR_PLUGIN_DESC.hooks); /* (loaded before this plugin: its hooks come first) */
	int rc = stage == CRIU_STAGE_RESTORE ? restore_begin() : 0;
	if (rc < 0 && P.restoring) {
		/* Refused before anything was made; CRIU calls no exit hook after a failed init. */
		plugin_metrics("restore", 1);
		P.restoring = false;
	}
	return rc;
}

static void plugin_exit(int stage, int ret)
{
	if (stage == CRIU_STAGE_DUMP)
		dump_exit(ret);
	else if (stage == CRIU_STAGE_RESTORE)
		restore_exit(ret);
	if (P.loaded)
		tree_free(&P.t);
	P.loaded = false;
	free(P.restore_tid);
	P.restore_tid = NULL;
	free(P.socks);
	P.socks = NULL;
	P.nsocks = 0;
	peer_detach();
	if (P.helper.pid || P.criu_fails) {
		static bool registered;
		if (!registered)
			atexit(criu_exit_waits);
		registered = true;
		return;
	}
	plugin_log_stop();
}

CRIU_UNTIMED_HOOK(pause_devices_untimed, pause_devices)
CRIU_UNTIMED_HOOK(checkpoint_devices_untimed, checkpoint_devices)

API struct criu_plugin_desc CR_PLUGIN_DESC = {
	.name = "cusnap",
	.init = plugin_init,
	.exit = plugin_exit,
	.version = CRIU_PLUGIN_VERSION_0_2,
	.max_hooks = CRIU_HOOKS_4_1,
	.hooks =
		{
			[CRIU_HOOK_RESUME_DEVICES_LATE] = (void *)resume_devices_late,
			[CRIU_HOOK_PAUSE_DEVICES] = (void *)pause_devices_untimed,
			[CRIU_HOOK_CHECKPOINT_DEVICES] = (void *)checkpoint_devices_untimed,
		},
};
