/* SPDX-License-Identifier: MIT */
/* What a restore needs of the machine it runs on (DESIGN.md §9.5): recorded at
 * the checkpoint, checked before anything is made. NVIDIA's restore needs each
 * GPU it restores onto to be of the checkpointed GPU's chip and to have the
 * memory (cuCheckpointProcessRestore); cusnap adds its own state format and
 * the driver version. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "cusnap/state.h"

static int driver_version(const struct native *n)
{
	int v = 0;
	return n->driver_version && n->driver_version(&v) == CUDA_SUCCESS ? v : 0;
}

json_t *compat_record(const struct native *n, const uint64_t *used)
{
	struct gpu_here g[PROTO_MAX_DEVICES];
	int got = native_gpus(n, g, PROTO_MAX_DEVICES);
	json_t *gpus = json_array();
	for (int d = 0; d < got; d++) {
		char uuid[48];
		devmap_uuid_text(&g[d].uuid, uuid);
		json_t *one = json_pack("{s:s, s:s, s:I}", "uuid", uuid, "model", g[d].model, "memory",
					(json_int_t)g[d].memory);
		if (one && used)
			json_object_set_new(one, "used", json_integer((json_int_t)used[d]));
		json_array_append_new(gpus, one);
	}
	return json_pack("{s:i, s:i, s:o}", "driver_version", driver_version(n), "state_major", STATE_MAJOR, "gpus",
			 gpus);
}

/* CUDA 13.0 from 13000. */
static const char *cuda_text(int v, char out[16])
{
	snprintf(out, 16, "%d.%d", v / 1000, v % 1000 / 10);
	return out;
}

static int find_uuid(const struct gpu_here *g, int n, const char *text)
{
	CUuuid u;
	if (!text || id_parse_uuid(text, strlen(text), (uint8_t *)u.bytes) < 0)
		return -1;
	for (int i = 0; i < n; i++)
		if (!memcmp(g[i].uuid.bytes, u.bytes, 16))
			return i;
	return -1;
}

#define REASON(...) json_array_append_new(out, json_sprintf(__VA_ARGS__))

/* The reasons of one checkpointed GPU d (one object of needs' list) onto here. */
static void gpu_reasons(json_t *out, size_t d, const json_t *had, const struct gpu_here *g, int nhere,
			const struct devmap *map)
{
	const char *uuid = json_member_string(had, "uuid"), *model = json_member_string(had, "model");
	int t = map && map->nordinals ? (d < map->nordinals ? map->ordinals[d] : -1) : find_uuid(g, nhere, uuid);
	if (t < 0 || t >= nhere) {
		REASON("GPU %zu of the checkpoint (%s) is not here (--device-map auto, or OLD=NEW, puts it on another)",
		       d, uuid ? uuid : "?");
		return;
	}
	if (model && *model && g[t].model[0] && strcmp(model, g[t].model))
		REASON("GPU %zu of the checkpoint is a %s, GPU %d here a %s (the same model is needed)", d, model, t,
		       g[t].model);
	uint64_t used = (uint64_t)json_member_number(had, "used", 0);
	char a[32], b[32];
	if (used && g[t].memory && used > g[t].memory)
		REASON("GPU %zu of the checkpoint held %s, GPU %d here has %s", d, bytes_text(used, a), t,
		       bytes_text(g[t].memory, b));
}

/* What is wrong with a needs record (compat_record's shape), or NULL: a
 * missing or damaged one cannot say every check passed. */
static const char *needs_malformed(const json_t *needs)
{
	if (!json_is_object(needs))
		return "no record";
	if (!json_is_integer(json_object_get(needs, "driver_version")))
		return "driver_version";
	if (!json_is_integer(json_object_get(needs, "state_major")))
		return "state_major";
	const json_t *gpus = json_object_get(needs, "gpus"), *g;
	if (!json_is_array(gpus))
		return "gpus";
	size_t i;
	json_array_foreach(gpus, i, g)
	{
		const char *uuid = json_member_string(g, "uuid");
		CUuuid u;
		if (!uuid || id_parse_uuid(uuid, strlen(uuid), (uint8_t *)u.bytes) < 0 ||
		    !json_is_string(json_object_get(g, "model")) || !json_is_integer(json_object_get(g, "memory")))
			return "a GPU's uuid, model or memory";
	}
	return NULL;
}

json_t *compat_check(const char *libcuda, const json_t *needs, const struct devmap *map, const char *criu_had,
		     const char *criu_here, char *why, size_t len)
{
	struct native nat = {0};
	struct gpu_here g[PROTO_MAX_DEVICES];
	if (native_load(&nat, libcuda, why, len) < 0)
		return NULL;
	int nhere = native_gpus(&nat, g, PROTO_MAX_DEVICES);
	if (nhere < 0) {
		snprintf(why, len, "the driver (cuInit) does not list this machine's GPUs");
		return NULL;
	}
	json_t *out = json_array();
	const char *bad = needs_malformed(needs);
	if (bad) {
		REASON("the checkpoint's record of what it needs of a machine is missing or damaged (%s): nothing can "
		       "be checked",
		       bad);
		return out;
	}
	char a[16], b[16];
	int need = (int)json_member_number(needs, "driver_version", 0), have = driver_version(&nat);
	if (need && have && have < need)
		REASON("driver: CUDA %s here, the checkpoint's was CUDA %s (the same or newer is needed)",
		       cuda_text(have, a), cuda_text(need, b));
	int major = (int)json_member_number(needs, "state_major", STATE_MAJOR);
	if (major > STATE_MAJOR)
		REASON("state format %d, this cusnap reads %d and older (a newer cusnap wrote it)", major, STATE_MAJOR);
	if (criu_had && *criu_had && criu_here && *criu_here && criu_version_cmp(criu_had, criu_here) > 0)
		REASON("CRIU %s wrote the images, CRIU %s here cannot read a newer CRIU's images "
		       "(scripts/setup-criu.sh)",
		       criu_had, criu_here);
	const json_t *gpus = json_object_get(needs, "gpus");
	size_t nhad = json_array_size(gpus);
	if (nhad > (size_t)nhere)
		REASON("%zu GPUs needed, %d here", nhad, nhere);
	else
		for (size_t d = 0; d < nhad; d++)
			gpu_reasons(out, d, json_array_get(gpus, d), g, nhere, map);
	return out;
}
