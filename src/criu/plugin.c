/* SPDX-License-Identifier: MIT */
/* cusnap's CRIU plugin (DESIGN.md §9): plain `criu dump` and `criu restore`
 * (and so the container engines that run CRIU) of a tree whose CUDA processes
 * run under the interposer do what `cusnap checkpoint` and `restore` do, with
 * cusnap's own code: the coordinator library, the native steps, the finish
 * path. This file is the glue to CRIU's hooks (criu_abi.h): the descriptor,
 * init and exit; plugin_dump.c and plugin_restore.c hold each stage's hooks. Its settings come
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

struct plugin_state P;

/* ---- what every hook needs ---- */

void plugin_metrics(const char *op, int code)
{
	char why[PATH_MAX + 200];
	if (P.conf.s.metrics_dir[0] &&
	    metrics_write(P.conf.s.metrics_dir, op, code, (now_ms() - P.t0) / 1000.0, P.dir, why, sizeof(why)) < 0)
		plugin_say(VOICE_WARN, "metrics not written: %s", why);
}

int criu_images_fd(void)
{
	return criu_get_image_dir ? criu_get_image_dir() : -1;
}

int images_dir(char *out, size_t len)
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

void settings_for(pid_t root)
{
	char *dir = P.conf.s.control_dir;
	if (dir[0])
		return; /* the file's, the environment's, or the image's at a restore */
	/* The workload's environment, by the shim's rule (control.h). */
	char cur[sizeof(P.conf.s.control_dir)] = "", old[sizeof(P.conf.s.control_dir)] = "";
	bool has_cur = proc_environ_get(root, CONTROL_DIR_VAR, cur, sizeof(cur));
	bool has_old = proc_environ_get(root, CONTROL_DIR_VAR_DEPRECATED, old, sizeof(old));
	snprintf(dir, sizeof(P.conf.s.control_dir), "%s",
		 control_dir_named(has_cur ? cur : NULL, has_old ? old : NULL));
}

int helper_bound_ms(void)
{
	return 90000 +
	       2 * coord_undo_timeout_ms(P.conf.s.timeout_ms ? P.conf.s.timeout_ms : settings_default().timeout_ms);
}

int images_trusted(const char *outcome)
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

void criu_exit_waits(void)
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
			[CRIU_HOOK_RESUME_DEVICES_LATE] = CRIU_HOOK_FN(criu_resume_devices_late_fn,
								       resume_devices_late),
			[CRIU_HOOK_PAUSE_DEVICES] = CRIU_HOOK_FN(criu_pause_devices_fn, pause_devices_untimed),
			[CRIU_HOOK_CHECKPOINT_DEVICES] = CRIU_HOOK_FN(criu_checkpoint_devices_fn,
								      checkpoint_devices_untimed),
		},
};
