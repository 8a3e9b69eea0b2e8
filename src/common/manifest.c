/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cusnap/manifest.h"
#include "cusnap/paths.h"

/* ---- writing ---- */

static json_t *procs_json(const struct manifest *m)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < m->nprocs; i++) {
		const struct manifest_proc *p = &m->procs[i];
		json_array_append_new(a, json_pack("{s:i, s:i, s:b, s:b, s:o}", "pid", p->pid, "nspid", p->nspid,
						   "cuda", p->cuda, "interposed", p->interposed, "endpoint",
						   json_text(p->endpoint ? p->endpoint : "")));
	}
	return a;
}

static json_t *strings_json(const char *const *v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_text(v[i]));
	return a;
}

/* A record another module wrote, or null. */
static json_t *record(const json_t *j)
{
	return j ? json_incref((json_t *)j) : json_null();
}

char *manifest_encode(const struct manifest *m, size_t *len)
{
	/* CRIU's own CUDA plugin would restore and unlock every task itself (no
	 * --device-map, the workload running before its sharing is rebuilt). */
	json_t *j = json_pack("{s:s, s:i, s:o, s:I, s:o, s:i, s:i, s:o, s:o, s:s, s:b, s:b,"
			      " s:{s:o, s:o, s:o, s:b, s:s}, s:o, s:o,"
			      " s:{s:f, s:f, s:f, s:f, s:f}, s:{s:I, s:I}, s:o}",
			      "format", MANIFEST_FORMAT, "version", MANIFEST_VERSION, "checkpoint_id",
			      json_text(m->checkpoint_id), "created", (json_int_t)m->created, "hostname",
			      json_text(m->hostname), "root_pid", m->root_pid, "root_nspid", m->root_nspid,
			      "control_dir", json_text(m->control_dir), "control_dir_here",
			      json_text(m->control_dir_here), "content", m->content, "prepared", m->prepared,
			      "leave_running", m->leave_running, "criu", "path", json_text(m->criu_path), "version",
			      json_text(m->criu_version), "dump_args", strings_json(m->dump_args, m->ndump_args),
			      "cuda_plugin", 0, "plugins", "none: an empty --libdir; cusnap does the native steps",
			      "gpus", record(m->gpus), "processes", procs_json(m), "timings_ms", "prepare",
			      m->ms.prepare, "lock", m->ms.lock, "checkpoint", m->ms.checkpoint, "criu_dump",
			      m->ms.criu_dump, "restore_in_place", m->ms.restore_in_place, "bytes", "host_copies",
			      (json_int_t)m->bytes.host_copies, "images", (json_int_t)m->bytes.images, "needs",
			      record(m->needs));
	if (j && m->image_files)
		json_object_set_new(j, "image_files", digests_encode(m->image_files));
	if (j && m->content_files)
		json_object_set_new(j, "content_files", digests_encode(m->content_files));
	if (j && m->network)
		json_object_set(j, "network", (json_t *)m->network);
	if (j && m->written_files)
		json_object_set(j, "written_files", (json_t *)m->written_files);
	char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(7)) : NULL;
	json_decref(j);
	if (!text)
		return NULL;
	*len = strlen(text);
	text[(*len)++] = '\n'; /* over the NUL: the file ends with a newline, no NUL */
	return text;
}

/* ---- reading ---- */

/* Each of these: 0 with *out set (def when key is absent), or -1 when the
 * member is there with another type (its name in err). */
static int get_string(const json_t *o, const char *key, const char *def, const char **out, const char **bad)
{
	const json_t *v = json_object_get(o, key);
	*out = v ? json_string_value(v) : def;
	return *out ? 0 : (*bad = key, -1);
}

static int get_int(const json_t *o, const char *key, long long lo, long long hi, long long *out, const char **bad)
{
	const json_t *v = json_object_get(o, key);
	*out = v ? json_integer_value(v) : 0;
	return (!v || json_is_integer(v)) && *out >= lo && *out <= hi ? 0 : (*bad = key, -1);
}

static int get_bool(const json_t *o, const char *key, bool *out, const char **bad)
{
	const json_t *v = json_object_get(o, key);
	*out = json_is_true(v);
	return !v || json_is_boolean(v) ? 0 : (*bad = key, -1);
}

static int get_real(const json_t *o, const char *key, double *out, const char **bad)
{
	const json_t *v = json_object_get(o, key);
	*out = json_is_number(v) ? json_number_value(v) : 0;
	return !v || json_is_number(v) ? 0 : (*bad = key, -1);
}

/* A record another module wrote: an object (an array when array), NULL when
 * absent or null, -1 when of another type. */
static int get_record(const json_t *o, const char *key, bool array, const json_t **out, const char **bad)
{
	const json_t *v = json_object_get(o, key);
	bool ok = array ? json_is_array(v) : json_is_object(v);
	*out = ok ? v : NULL;
	return !v || json_is_null(v) || ok ? 0 : (*bad = key, -1);
}

/* The files' digests under key (none: *out NULL) into *slot. */
static int get_digests(const json_t *o, const char *key, struct file_digests *slot, const struct file_digests **out,
		       const char **bad)
{
	const json_t *v;
	char why[300];
	if (get_record(o, key, false, &v, bad))
		return -1;
	*out = NULL;
	if (!v)
		return 0;
	if (digests_decode(v, slot, why, sizeof(why)) < 0)
		return *bad = key, -1;
	*out = slot;
	return 0;
}

static int procs_from_json(const json_t *a, struct manifest_proc *procs, const char **bad)
{
	for (size_t i = 0; i < json_array_size(a); i++) {
		const json_t *o = json_array_get(a, i);
		struct manifest_proc *p = &procs[i];
		long long pid, nspid;
		if (!json_is_object(o) || !json_object_get(o, "pid") || !json_object_get(o, "nspid"))
			return *bad = "processes", -1;
		if (get_int(o, "pid", 1, INT_MAX, &pid, bad) || get_int(o, "nspid", -1, INT_MAX, &nspid, bad) ||
		    get_bool(o, "cuda", &p->cuda, bad) || get_bool(o, "interposed", &p->interposed, bad) ||
		    get_string(o, "endpoint", "", &p->endpoint, bad))
			return -1;
		p->pid = (int)pid;
		p->nspid = (int)nspid;
	}
	return 0;
}

/* The typed fields of root into m (its strings and records point into root). */
static int fields_from_json(const json_t *root, struct manifest *m, const char **bad)
{
	const json_t *criu = json_object_get(root, "criu"), *args = json_object_get(criu, "dump_args"),
		     *procs = json_object_get(root, "processes"), *ms = json_object_get(root, "timings_ms"),
		     *bytes = json_object_get(root, "bytes");
	long long v[4];
	if ((criu && !json_is_object(criu)) || (args && !json_is_array(args)))
		return *bad = "criu", -1;
	if ((ms && !json_is_object(ms)) || (bytes && !json_is_object(bytes)))
		return *bad = ms && !json_is_object(ms) ? "timings_ms" : "bytes", -1;
	m->nprocs = json_array_size(procs);
	m->ndump_args = json_array_size(args);
	m->owned = calloc(1, m->nprocs * sizeof(*m->procs) + (m->ndump_args + 1) * sizeof(char *));
	if (!m->owned)
		return *bad = "(out of memory)", -1;
	m->procs = m->owned;
	m->dump_args = (const char **)(m->procs + m->nprocs);
	for (size_t i = 0; i < m->ndump_args; i++)
		if (!(m->dump_args[i] = json_string_value(json_array_get(args, i))))
			return *bad = "dump_args", -1;
	if (get_string(root, "checkpoint_id", "", &m->checkpoint_id, bad) ||
	    get_string(root, "hostname", "", &m->hostname, bad) || get_int(root, "created", 0, LLONG_MAX, &v[0], bad) ||
	    get_int(root, "root_pid", -1, INT_MAX, &v[1], bad) ||
	    get_int(root, "root_nspid", -1, INT_MAX, &v[2], bad) ||
	    get_string(root, "control_dir_here", "", &m->control_dir_here, bad) ||
	    get_string(root, "content", "", &m->content, bad) || get_bool(root, "prepared", &m->prepared, bad) ||
	    get_bool(root, "leave_running", &m->leave_running, bad) ||
	    get_string(criu, "path", "", &m->criu_path, bad) ||
	    get_string(criu, "version", "", &m->criu_version, bad) || get_real(ms, "prepare", &m->ms.prepare, bad) ||
	    get_real(ms, "lock", &m->ms.lock, bad) || get_real(ms, "checkpoint", &m->ms.checkpoint, bad) ||
	    get_real(ms, "criu_dump", &m->ms.criu_dump, bad) ||
	    get_real(ms, "restore_in_place", &m->ms.restore_in_place, bad) ||
	    get_int(bytes, "host_copies", 0, LLONG_MAX, &m->bytes.host_copies, bad) ||
	    get_int(bytes, "images", 0, LLONG_MAX, &v[3], bad) || get_record(root, "gpus", true, &m->gpus, bad) ||
	    get_record(root, "needs", false, &m->needs, bad) ||
	    get_digests(root, "image_files", &m->files[0], &m->image_files, bad) ||
	    get_digests(root, "content_files", &m->files[1], &m->content_files, bad) ||
	    get_record(root, "network", false, &m->network, bad) ||
	    get_record(root, "written_files", true, &m->written_files, bad) || procs_from_json(procs, m->procs, bad))
		return -1;
	m->created = v[0];
	m->root_pid = (int)v[1];
	m->root_nspid = (int)v[2];
	m->bytes.images = v[3];
	return 0;
}

/* Check a parsed manifest (taking root) into *m: 0, or -1 with err. */
static int manifest_from_json(json_t *root, struct manifest *m, char *err, size_t errlen)
{
	memset(m, 0, sizeof(*m));
	m->root = root;
	const char *format = json_member_string(root, "format"), *bad = NULL;
	double version = json_member_number(root, "version", 0);
	const char *ctl = json_member_string(root, "control_dir");
	const json_t *procs = json_is_object(root) ? json_object_get(root, "processes") : NULL;
	if (!format || strcmp(format, MANIFEST_FORMAT) != 0 || version != MANIFEST_VERSION || !ctl ||
	    !json_is_array(procs)) {
		snprintf(err, errlen, "not a cusnap manifest of version %d (format, version, control_dir, processes)",
			 MANIFEST_VERSION);
		manifest_free(m);
		return -1;
	}
	if (fields_from_json(root, m, &bad) < 0) {
		snprintf(err, errlen, "its member %s is not what a manifest of version %d holds there", bad,
			 MANIFEST_VERSION);
		manifest_free(m);
		return -1;
	}
	m->control_dir = ctl;
	if (!m->control_dir_here[0])
		m->control_dir_here = ctl; /* (not told: the control directory as the workload sees it) */
	if (!path_plain_absolute(ctl) || !path_plain_absolute(m->control_dir_here)) {
		snprintf(err, errlen,
			 "control_dir %s or control_dir_here %s is not an absolute path without . or .. "
			 "components",
			 ctl, m->control_dir_here);
		manifest_free(m);
		return -1;
	}
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

int manifest_load_at(int dfd, const char *dir, struct manifest *m, char *err, size_t errlen)
{
	char path[PATH_MAX + 32], why[512];
	snprintf(path, sizeof(path), "%s/" MANIFEST_FILE, dir);
	memset(m, 0, sizeof(*m));
	json_t *root = json_read_at(dfd, dfd == AT_FDCWD ? path : MANIFEST_FILE, path, MANIFEST_MAX_BYTES, err, errlen);
	if (!root)
		return -1;
	if (manifest_from_json(root, m, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "%s: %s", path, why);
		return -1;
	}
	return 0;
}

int manifest_load(const char *dir, struct manifest *m, char *err, size_t errlen)
{
	return manifest_load_at(AT_FDCWD, dir, m, err, errlen);
}

void manifest_free(struct manifest *m)
{
	json_decref(m->root);
	free(m->owned);
	digests_free(&m->files[0]);
	digests_free(&m->files[1]);
	memset(m, 0, sizeof(*m));
}

bool manifest_dump_arg(const struct manifest *m, const char *arg)
{
	for (size_t i = 0; i < m->ndump_args; i++)
		if (strcmp(m->dump_args[i], arg) == 0)
			return true;
	return false;
}

const char *manifest_dump_arg_value(const struct manifest *m, const char *arg)
{
	for (size_t i = 0; i + 1 < m->ndump_args; i++)
		if (strcmp(m->dump_args[i], arg) == 0)
			return m->dump_args[i + 1];
	return NULL;
}

static const char *or_unknown(const char *s)
{
	return s && s[0] ? s : "?";
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
	time_t created = (time_t)m.created;
	char when[64] = "?";
	struct tm tm;
	if (created > 0 && localtime_r(&created, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %z", &tm);
	printf("manifest %s: checkpoint %s, created %s, root pid %d (ns %d), content %s, prepare %s, criu %s\n", path,
	       or_unknown(m.checkpoint_id), when, m.root_pid, m.root_nspid, or_unknown(m.content),
	       m.prepared ? "ran" : "did not run", or_unknown(m.criu_version));
	for (size_t i = 0; i < m.nprocs; i++)
		printf("  process %d (ns %d)%s%s\n", m.procs[i].pid, m.procs[i].nspid, m.procs[i].cuda ? " cuda" : "",
		       m.procs[i].interposed ? " interposed" : "");
	manifest_free(&m);
	return 0;
}
