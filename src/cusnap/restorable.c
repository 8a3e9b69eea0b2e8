/* SPDX-License-Identifier: MIT */
/* Can this machine restore a checkpoint (DESIGN.md §9.5)? cusnap restore asks
 * before anything is made and refuses with every reason at once; cusnap
 * inspect --dir prints the same verdict. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cusnap.h"
#include "cusnap/manifest.h"

json_t *restore_verdict(const struct settings *s, const struct manifest *m, const struct devmap *map, const char *criu,
			char *why, size_t len)
{
	const char *made = m->criu_version[0] ? m->criu_version : NULL;
	char here[64] = "";
	if (criu)
		criu_version(criu, here, sizeof(here));
	return compat_check(s->libcuda, m->needs, map, made, here, why, len);
}

/* The reasons as one text: "a; b; c". */
static void reasons_text(const json_t *reasons, char *out, size_t len)
{
	size_t at = 0;
	out[0] = '\0';
	for (size_t i = 0; i < json_array_size(reasons) && at < len; i++)
		at += (size_t)snprintf(out + at, len - at, "%s%s", i ? "; " : "",
				       json_string_value(json_array_get(reasons, i)));
}

int restore_gate(const struct settings *s, const struct manifest *m, const struct devmap *map, const char *criu)
{
	char why[1024], text[4096];
	json_t *reasons = restore_verdict(s, m, map, criu, why, sizeof(why));
	if (!reasons)
		return fail(EX_UNAVAILABLE, "%s; nothing done", why);
	size_t n = json_array_size(reasons);
	reasons_text(reasons, text, sizeof(text));
	json_decref(reasons);
	if (!n)
		return 0;
	return fail(EX_UNAVAILABLE, "this machine cannot restore the checkpoint (%zu reason%s): %s; nothing done", n,
		    n == 1 ? "" : "s", text);
}

json_t *restore_verdict_print(const struct settings *s, const char *dir, bool json)
{
	struct manifest m;
	char err[PATH_MAX + 1200], criu[PATH_MAX], text[4096];
	if (manifest_load(dir, &m, err, sizeof(err)) < 0)
		return NULL;
	bool have_criu = criu_find(s, criu, sizeof(criu), err, sizeof(err)) == 0;
	struct devmap map;
	json_t *reasons = NULL;
	if (devmap_for(s, m.gpus, &map, err, sizeof(err)) < 0) /* (--device-map as a restore would take it) */
		reasons = json_pack("[s+]", "--device-map: ", err);
	else
		reasons = restore_verdict(s, &m, &map, have_criu ? criu : NULL, err, sizeof(err));
	manifest_free(&m);
	if (!reasons)
		reasons = json_pack("[s]", err);
	if (reasons && !have_criu)
		json_array_append_new(reasons, json_string("no CRIU here (scripts/setup-criu.sh)"));
	if (!json && reasons) {
		reasons_text(reasons, text, sizeof(text));
		if (json_array_size(reasons))
			printf("restorable here: no — %s\n", text);
		else
			printf("restorable here: yes (GPUs, models, memory, driver, CRIU and state format as the "
			       "checkpoint needs; %s%s)\n",
			       s->device_map[0] ? "with --device-map " : "no --device-map",
			       s->device_map[0] ? s->device_map : "");
	}
	return reasons;
}
