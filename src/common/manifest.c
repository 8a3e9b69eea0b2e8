/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cusnap/manifest.h"
#include "cusnap/paths.h"

int manifest_from_json(json_t *root, struct manifest *m, char *err, size_t errlen)
{
	memset(m, 0, sizeof(*m));
	const char *format = json_member_string(root, "format");
	double version = json_member_number(root, "version", 0);
	const char *ctl = json_member_string(root, "control_dir");
	const json_t *procs = json_is_object(root) ? json_object_get(root, "processes") : NULL;
	if (!format || strcmp(format, MANIFEST_FORMAT) != 0 || version != MANIFEST_VERSION || !ctl ||
	    !json_is_array(procs)) {
		snprintf(err, errlen, "not a cusnap manifest of version %d (format, version, control_dir, processes)",
			 MANIFEST_VERSION);
		json_decref(root);
		return -1;
	}
	const char *here = json_member_string(root, "control_dir_here");
	if (here && !here[0])
		here = NULL; /* (not told: the control directory as the workload sees it) */
	if (!path_plain_absolute(ctl) || (here && !path_plain_absolute(here))) {
		snprintf(err, errlen, "control_dir %s%s%s is not an absolute path without . or .. components", ctl,
			 here ? " or control_dir_here " : "", here ? here : "");
		json_decref(root);
		return -1;
	}
	m->root = root;
	m->procs = procs;
	m->control_dir = ctl;
	m->control_dir_here = here ? here : ctl;
	m->prepared = json_member_bool(root, "prepared", false);
	return 0;
}

int manifest_parse(const char *text, size_t len, struct manifest *m, char *err, size_t errlen)
{
	json_error_t je;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		memset(m, 0, sizeof(*m));
		snprintf(err, errlen, "not valid JSON: %s at line %d, column %d", je.text, je.line, je.column);
		return -1;
	}
	return manifest_from_json(root, m, err, errlen);
}

int manifest_load(const char *dir, struct manifest *m, char *err, size_t errlen)
{
	char path[PATH_MAX + 32], why[512];
	snprintf(path, sizeof(path), "%s/" MANIFEST_FILE, dir);
	memset(m, 0, sizeof(*m));
	json_t *root = json_read_file(path, MANIFEST_MAX_BYTES, err, errlen);
	if (!root)
		return -1;
	if (manifest_from_json(root, m, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "%s: %s", path, why);
		return -1;
	}
	return 0;
}

void manifest_free(struct manifest *m)
{
	json_decref(m->root);
	memset(m, 0, sizeof(*m));
}

bool manifest_dump_arg(const struct manifest *m, const char *arg)
{
	const json_t *criu = json_object_get(m->root, "criu");
	const json_t *args = json_is_object(criu) ? json_object_get(criu, "dump_args") : NULL;
	for (size_t i = 0; i < json_array_size(args); i++) {
		const json_t *a = json_array_get(args, i);
		if (json_is_string(a) && strcmp(json_string_value(a), arg) == 0)
			return true;
	}
	return false;
}

const char *manifest_dump_arg_value(const struct manifest *m, const char *arg)
{
	const json_t *criu = json_object_get(m->root, "criu");
	const json_t *args = json_is_object(criu) ? json_object_get(criu, "dump_args") : NULL;
	for (size_t i = 0; i + 1 < json_array_size(args); i++) {
		const json_t *a = json_array_get(args, i);
		if (json_is_string(a) && strcmp(json_string_value(a), arg) == 0)
			return json_string_value(json_array_get(args, i + 1));
	}
	return NULL;
}

static const char *or_unknown(const char *s)
{
	return s ? s : "?";
}

int manifest_print(const char *dir)
{
	char path[PATH_MAX + 32], err[PATH_MAX + 600];
	snprintf(path, sizeof(path), "%s/" MANIFEST_FILE, dir);
	if (access(path, F_OK) != 0)
		return -1;
	struct manifest m;
	if (manifest_load(dir, &m, err, sizeof(err)) < 0) {
		fprintf(stderr, "cusnap: %s\n", err);
		return -2;
	}
	const json_t *criu = json_object_get(m.root, "criu");
	time_t created = (time_t)json_member_number(m.root, "created", 0);
	char when[64] = "?";
	struct tm tm;
	if (created > 0 && localtime_r(&created, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %z", &tm);
	printf("manifest %s: checkpoint %s, created %s, root pid %.0f (ns %.0f), content %s, prepare %s, criu %s\n",
	       path, or_unknown(json_member_string(m.root, "checkpoint_id")), when,
	       json_member_number(m.root, "root_pid", 0), json_member_number(m.root, "root_nspid", 0),
	       or_unknown(json_member_string(m.root, "content")), m.prepared ? "ran" : "did not run",
	       or_unknown(json_member_string(criu, "version")));
	for (size_t i = 0; i < json_array_size(m.procs); i++) {
		const json_t *p = json_array_get(m.procs, i);
		printf("  process %.0f (ns %.0f)%s%s\n", json_member_number(p, "pid", 0),
		       json_member_number(p, "nspid", 0), json_member_bool(p, "cuda", false) ? " cuda" : "",
		       json_member_bool(p, "interposed", false) ? " interposed" : "");
	}
	manifest_free(&m);
	return 0;
}
