/* SPDX-License-Identifier: MIT */
/* CRIU's own CUDA plugin (plugins/cuda, installed as cuda_plugin.so) in the
 * same plugin directory. CRIU calls a hook in each plugin, in the order it
 * loaded them (the directory's order), until one returns something other than
 * -ENOTSUP; its CUDA plugin answers every process (0 for one without CUDA), so
 * whichever of the two comes first would take every tree. Its descriptor is its
 * own, writable data, and CRIU reads the hook from it at each call: its device
 * hooks (pause, checkpoint, resume late) are pointed at a router that asks mine
 * first. Mine claim the trees that run under the interposer and hand every
 * other process to it (peer_call), so in either order each tree has one owner
 * and each of its hooks runs once per process:
 *   it first:  router -> mine (claimed: done; handed over: its hook) -> its
 *              answer; -ENOTSUP (it is disabled) goes on to mine, which
 *              answers -ENOTSUP again;
 *   mine first: mine (claimed: done; handed over: its hook; no CUDA: -ENOTSUP)
 *              -> CRIU calls the router -> mine (-ENOTSUP again) -> its hook.
 * Its table is put back at my exit (when it is still loaded). */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "plugin.h"

static const enum criu_hook routed[] = {CRIU_HOOK_RESUME_DEVICES_LATE, CRIU_HOOK_PAUSE_DEVICES,
					CRIU_HOOK_CHECKPOINT_DEVICES};

static struct {
	struct criu_plugin_desc *desc;  /* its descriptor; NULL: not loaded */
	void *orig[CRIU_HOOKS_4_1];     /* its hooks before routing */
	void *mine[CRIU_HOOKS_4_1];     /* my hooks */
	bool in_router[CRIU_HOOKS_4_1]; /* (its router asks mine, which may call it) */
} peer;

typedef int hook_fn(int pid);

static int find_peer(struct dl_phdr_info *info, size_t size, void *found)
{
	(void)size;
	const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
	if (!base || strcmp(base + 1, "cuda_plugin.so"))
		return 0;
	snprintf(found, PATH_MAX, "%s", info->dlpi_name);
	return 1;
}

/* Its hook h for pid, as routed: mine first; what mine do not take, its own. */
static int route(enum criu_hook h, int pid)
{
	int r = ((hook_fn *)peer.mine[h])(pid);
	return r != -ENOTSUP ? r : peer_call(h, pid);
}

static int route_resume_late(int pid)
{
	return route(CRIU_HOOK_RESUME_DEVICES_LATE, pid);
}

static int route_pause(int pid)
{
	return route(CRIU_HOOK_PAUSE_DEVICES, pid);
}

static int route_checkpoint(int pid)
{
	return route(CRIU_HOOK_CHECKPOINT_DEVICES, pid);
}

static void *router(enum criu_hook h)
{
	return h == CRIU_HOOK_PAUSE_DEVICES        ? (void *)route_pause
	       : h == CRIU_HOOK_CHECKPOINT_DEVICES ? (void *)route_checkpoint
						   : (void *)route_resume_late;
}

void peer_attach(void *const mine[CRIU_HOOKS_4_1])
{
	char path[PATH_MAX];
	if (peer.desc || !dl_iterate_phdr(find_peer, path))
		return;
	void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
	struct criu_plugin_desc *d = h ? dlsym(h, "CR_PLUGIN_DESC") : NULL;
	if (h)
		dlclose(h); /* (still loaded: CRIU holds it) */
	if (!d || d->version < CRIU_PLUGIN_VERSION_0_2 || d->max_hooks < CRIU_HOOKS_4_1) {
		plugin_say(VOICE_WARN,
			   "%s has no descriptor of CRIU plugin version 0.2 or later: it is "
			   "left as CRIU calls it",
			   path);
		return;
	}
	peer.desc = d;
	memcpy(peer.mine, mine, sizeof(peer.mine));
	for (size_t i = 0; i < sizeof(routed) / sizeof(routed[0]); i++) {
		enum criu_hook hk = routed[i];
		peer.orig[hk] = d->hooks[hk];
		if (d->hooks[hk] && mine[hk])
			d->hooks[hk] = router(hk);
	}
}

bool peer_present(void)
{
	return peer.desc != NULL;
}

int peer_call(enum criu_hook h, int pid)
{
	if (!peer.desc || !peer.orig[h] || peer.in_router[h])
		return -ENOTSUP;
	peer.in_router[h] = true;
	int r = ((hook_fn *)peer.orig[h])(pid);
	peer.in_router[h] = false;
	return r;
}

void peer_detach(void)
{
	char path[PATH_MAX];
	if (!peer.desc)
		return;
	/* CRIU unloads each plugin after its exit: when it came first, it is gone. */
	for (size_t i = 0; dl_iterate_phdr(find_peer, path) && i < sizeof(routed) / sizeof(routed[0]); i++)
		peer.desc->hooks[routed[i]] = peer.orig[routed[i]];
	memset(&peer, 0, sizeof(peer));
}
