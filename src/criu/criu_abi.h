/* SPDX-License-Identifier: MIT */
/* CRIU's plugin interface, as far as cusnap's plugin uses it: written from the
 * interface CRIU documents for its plugins (criu-plugin.h, plugin version
 * 0.2.0, CRIU 4.1): a shared object in CRIU's library directory exports a
 * descriptor named CR_PLUGIN_DESC; CRIU calls init and exit once per stage and
 * each hook it has, in every plugin until one returns something other than
 * -ENOTSUP. CRIU 4.1.1 knows 12 hooks and refuses a descriptor that lists more
 * ("Corrupted plugin"); 4.2 adds a 13th after them and accepts a descriptor
 * that lists fewer. So the descriptor lists 12: one binary loads in both
 * (test_criu_plugin dumps and restores under each). Nothing here reads CRIU's
 * internal structures (its option fields moved in 4.2). */
#ifndef CUSNAP_CRIU_ABI_H
#define CUSNAP_CRIU_ABI_H

/* The stage init and exit are called for. */
enum criu_stage { CRIU_STAGE_DUMP = 0, CRIU_STAGE_PRE_DUMP = 1, CRIU_STAGE_RESTORE = 2 };

/* The hooks used here, by index into the descriptor's table. */
enum criu_hook {
	CRIU_HOOK_RESUME_DEVICES_LATE = 9, /* int (int pid): each restored task, before CRIU lets them go */
	CRIU_HOOK_PAUSE_DEVICES = 10,      /* int (int pid): each task before it is interrupted (the root first) */
	CRIU_HOOK_CHECKPOINT_DEVICES = 11, /* int (int pid): each live task of the frozen tree */
	CRIU_HOOKS_4_1 = 12                /* the table's length in CRIU 4.1 */
};

/* Each hook's type: the descriptor's table holds them as void *, so a row is
 * written CRIU_HOOK_FN(type, fn), which refuses to compile a function of
 * another type. */
typedef int criu_resume_devices_late_fn(int pid);
typedef int criu_pause_devices_fn(int pid);
typedef int criu_checkpoint_devices_fn(int pid);
#define CRIU_HOOK_FN(type, fn) _Generic((fn), type * : (void *)(fn))

#define CRIU_PLUGIN_VERSION_0_2 ((0u << 16) + (2u << 8) + 0u)

struct criu_plugin_desc {
	const char *name;
	int (*init)(int stage);
	void (*exit)(int stage, int ret);
	unsigned int version;
	unsigned int max_hooks;
	void *hooks[CRIU_HOOKS_4_1];
};

/* CRIU's own: a descriptor of the images directory (weak: NULL where the
 * plugin is loaded by something else than CRIU). */
int criu_get_image_dir(void) __attribute__((weak));

#endif
