/* SPDX-License-Identifier: MIT */
/* Which GPU each GPU of a checkpoint is restored onto: `cusnap restore
 * --device-map` and the CRIU plugin's device_map (and CRIU's forthcoming
 * `--plugin-option cuda.device-map=`, which takes the same text). A map is
 *   auto                 a GPU of the checkpoint that is here keeps its GPU;
 *                        the others go, in order, onto the GPUs here that no
 *                        one kept
 *   OLD=NEW[,OLD=NEW]    each side a GPU UUID ("GPU-xxxxxxxx-...") or an
 *                        ordinal: OLD the checkpoint's (its GPU list, in the
 *                        order the driver listed them), NEW this machine's
 * The native restore takes no partial map: every GPU of the checkpoint is named
 * once, and every target must be here. A map that changes nothing is no map. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "cusnap/ids.h"

int native_gpus(const struct native *n, struct gpu_here *g, int max)
{
	int ndev = 0, got = 0;
	if (!native_devices(n) || n->device_count(&ndev) != CUDA_SUCCESS)
		return -1;
	for (int d = 0; d < ndev && got < max; d++) {
		CUdevice dev;
		struct gpu_here *h = &g[got];
		memset(h, 0, sizeof(*h));
		if (n->device_get(&dev, d) != CUDA_SUCCESS || n->device_uuid(&h->uuid, dev) != CUDA_SUCCESS)
			continue;
		if (n->device_name && n->device_name(h->model, sizeof(h->model), dev) != CUDA_SUCCESS)
			h->model[0] = '\0';
		if (n->device_memory && n->device_memory(&h->memory, dev) != CUDA_SUCCESS)
			h->memory = 0;
		got++;
	}
	return got;
}

/* The GPUs the driver lists, by ordinal, into out: how many. */
static int devmap_gpus(const struct native *n, CUuuid *out, size_t max)
{
	struct gpu_here g[PROTO_MAX_DEVICES];
	int got = native_gpus(n, g, max < PROTO_MAX_DEVICES ? (int)max : PROTO_MAX_DEVICES);
	for (int d = 0; d < got; d++)
		out[d] = g[d].uuid;
	return got > 0 ? got : 0;
}

void devmap_uuid_text(const CUuuid *u, char out[48])
{
	char *o = out + sprintf(out, "GPU-");
	for (int b = 0; b < 16; b++)
		o += sprintf(o, "%02x%s", (unsigned char)u->bytes[b], b == 3 || b == 5 || b == 7 || b == 9 ? "-" : "");
}

json_t *devmap_gpus_json(const struct native *n)
{
	json_t *gpus = json_array();
	CUuuid u[PROTO_MAX_DEVICES];
	char text[48];
	for (int d = 0, got = devmap_gpus(n, u, PROTO_MAX_DEVICES); d < got; d++) {
		devmap_uuid_text(&u[d], text);
		json_array_append_new(gpus, json_string(text));
	}
	return gpus;
}

/* One side of a pair: an ordinal below n, or a UUID among list[0..n). The
 * index, or -1 (not a GPU there), -2 (neither an ordinal nor a UUID). */
static int side(const char *s, size_t len, const CUuuid *list, size_t n)
{
	size_t digits = strspn(s, "0123456789");
	if (len > 0 && digits >= len && len < 4) {
		int v = atoi(s);
		return v < (int)n ? v : -1;
	}
	CUuuid u;
	if (id_parse_uuid(s, len, (uint8_t *)u.bytes) < 0)
		return -2;
	for (size_t i = 0; i < n; i++)
		if (!memcmp(u.bytes, list[i].bytes, 16))
			return (int)i;
	return -1;
}

/* target[i]: the index here of the checkpoint's GPU i, for auto. */
static int auto_targets(const CUuuid *had, size_t nhad, const CUuuid *here, size_t nhere, int *target, char *why,
			size_t len)
{
	bool used[PROTO_MAX_DEVICES] = {false};
	for (size_t i = 0; i < nhad; i++) {
		target[i] = -1;
		for (size_t j = 0; j < nhere && target[i] < 0; j++)
			if (!used[j] && !memcmp(had[i].bytes, here[j].bytes, 16))
				target[i] = (int)j, used[j] = true;
	}
	for (size_t i = 0, j = 0; i < nhad; i++) {
		while (target[i] < 0 && j < nhere)
			if (!used[j++])
				target[i] = (int)j - 1, used[j - 1] = true;
		if (target[i] < 0)
			return snprintf(why, len, "auto: the checkpoint has %zu GPUs, this machine %zu", nhad, nhere),
			       -1;
	}
	return 0;
}

/* target[i] from "OLD=NEW,...": every GPU of the checkpoint once, each onto
 * a GPU of its own. */
static int pair_targets(const char *spec, const CUuuid *had, size_t nhad, const CUuuid *here, size_t nhere, int *target,
			char *why, size_t len)
{
	int onto[PROTO_MAX_DEVICES]; /* onto[j]: the checkpoint's GPU put on GPU j here */
	for (size_t i = 0; i < nhad; i++)
		target[i] = -1;
	for (size_t j = 0; j < nhere; j++)
		onto[j] = -1;
	int k = 0;
	for (const char *p = spec; *p; k++) {
		size_t plen = strcspn(p, ",");
		const char *eq = memchr(p, '=', plen);
		if (!eq)
			return snprintf(why, len, "pair %d (\"%.*s\") is not OLD=NEW", k + 1, (int)plen, p), -1;
		int from = side(p, (size_t)(eq - p), had, nhad);
		int to = side(eq + 1, plen - (size_t)(eq - p) - 1, here, nhere);
		if (from == -2 || to == -2)
			return snprintf(why, len, "pair %d (\"%.*s\"): use GPU ordinals or UUIDs", k + 1, (int)plen, p),
			       -1;
		if (from < 0)
			return snprintf(why, len, "pair %d names a GPU the checkpoint does not have", k + 1), -1;
		if (to < 0)
			return snprintf(why, len, "pair %d names a GPU this machine does not have", k + 1), -1;
		if (target[from] >= 0)
			return snprintf(why, len, "GPU %d of the checkpoint is mapped more than once", from), -1;
		if (onto[to] >= 0)
			return snprintf(why, len,
					"GPU %d here is named for GPUs %d and %d of the checkpoint (each needs a GPU "
					"of "
					"its own)",
					to, onto[to], from),
			       -1;
		target[from] = to;
		onto[to] = from;
		p += plen;
		if (*p == ',')
			p++;
	}
	for (size_t i = 0; i < nhad; i++)
		if (target[i] < 0)
			return snprintf(why, len, "GPU %zu of the checkpoint is not mapped (a map must name every GPU)",
					i),
			       -1;
	return 0;
}

int devmap_parse(const char *spec, const CUuuid *had, size_t nhad, const CUuuid *here, size_t nhere, struct devmap *m,
		 char *why, size_t len)
{
	*m = (struct devmap){0};
	if (!spec || !*spec)
		return 0;
	if (nhad == 0)
		return snprintf(why, len, "the checkpoint records no GPUs to map"), -1;
	if (nhad > PROTO_MAX_DEVICES || nhere > PROTO_MAX_DEVICES)
		return snprintf(why, len, "more than %d GPUs", PROTO_MAX_DEVICES), -1;
	int target[PROTO_MAX_DEVICES];
	int rc = !strcmp(spec, "auto") ? auto_targets(had, nhad, here, nhere, target, why, len)
				       : pair_targets(spec, had, nhad, here, nhere, target, why, len);
	if (rc < 0)
		return -1;
	bool moved = false;
	for (size_t i = 0; i < nhad; i++)
		moved |= memcmp(had[i].bytes, here[target[i]].bytes, 16) != 0;
	if (!moved)
		return 0; /* every GPU onto itself */
	for (size_t i = 0; i < nhad; i++) {
		m->pairs[i] = (CUcheckpointGpuPair){.oldUuid = had[i], .newUuid = here[target[i]]};
		m->ordinals[i] = target[i];
	}
	m->npairs = (unsigned)nhad;
	m->nordinals = nhad;
	return 0;
}

/* A JSON array of UUID strings into out: how many, or -1 when one is not a UUID. */
static int devmap_uuids(const json_t *list, CUuuid *out, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < json_array_size(list) && n < max; i++) {
		const json_t *g = json_array_get(list, i);
		if (!json_is_string(g) ||
		    id_parse_uuid(json_string_value(g), json_string_length(g), (uint8_t *)out[n].bytes) < 0)
			return -1;
		n++;
	}
	return (int)n;
}

int devmap_for(const struct settings *s, const json_t *gpus, struct devmap *m, char *why, size_t len)
{
	const char *spec = s->device_map;
	*m = (struct devmap){0};
	if (!spec || !*spec)
		return 0;
	CUuuid had[PROTO_MAX_DEVICES], here[PROTO_MAX_DEVICES];
	int nhad = devmap_uuids(gpus, had, PROTO_MAX_DEVICES);
	if (nhad < 0)
		return snprintf(why, len, "the checkpoint's GPU list is not a list of GPU UUIDs"), -EINVAL;
	struct native nat = {0};
	if (native_load(&nat, s->libcuda, why, len) < 0)
		return -ENODEV;
	/* (the driver stays loaded: the restore needs it next) */
	int nhere = devmap_gpus(&nat, here, PROTO_MAX_DEVICES);
	return devmap_parse(spec, had, (size_t)nhad, here, (size_t)nhere, m, why, len) < 0 ? -EINVAL : 0;
}
