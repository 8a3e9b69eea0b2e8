/* SPDX-License-Identifier: MIT */
/* The restore gate (DESIGN.md §9.5): a checkpoint records what a restore needs
 * of its machine; `cusnap restore` refuses a machine that lacks any of it (GPU
 * count, model, memory, driver version, a CRIU older than the dump's, a newer
 * state format) before anything is made, naming every reason at once (69), and
 * `cusnap inspect --dir` gives the same verdict without restoring. cuemu
 * stands for the other machines: CUEMU_DEVICES, CUEMU_MODEL, CUEMU_MEMORY and
 * CUEMU_DRIVER_VERSION in the restoring command's environment change what the
 * driver it loads answers (CUEMU_UUID_SEED: another node's GPUs, to be
 * mapped). A missing or damaged record of what the checkpoint needs is a
 * reason too. The same checkpoint then restores here and passes.
 * (The plugin's gate at CRIU's init: test_criu_plugin.) */
#include "cusnap/json.h"
#include "cusnap/manifest.h"
#include "e2e_util.h"

static char cusnap[PATH_MAX], criu[PATH_MAX];

static int restore(const char *dir, char *const *env, char **out)
{
	return tool(out, env, cusnap, "restore", "--dir", dir, "--criu", criu, "--timeout", "60000", NULL);
}

/* inspect --dir's verdict line, under env: the output (freed by the caller). */
static char *verdict(const char *dir, char *const *env)
{
	char *out;
	CHECK_EQ(tool(&out, env, cusnap, "inspect", "--dir", dir, NULL), 0);
	return out;
}

/* dir's manifest with key of object parent (NULL: the top) set to value. */
static void manifest_set(const char *dir, const char *parent, const char *key, json_t *value)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/" MANIFEST_FILE, dir);
	json_t *m = json_load_file(path, 0, NULL);
	json_t *o = parent ? json_object_get(m, parent) : m;
	CHECK(json_is_object(o));
	json_object_set_new(o, key, value);
	CHECK_EQ(json_dump_file(m, path, JSON_INDENT(2)), 0);
	json_decref(m);
}

/* The manifest at path as text was (undoing manifest_set). */
static void manifest_put(const char *path, const char *text)
{
	FILE *f = text ? fopen(path, "w") : NULL;
	CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0);
}

/* A refused restore under env: 69, every reason in want (NULL-ended) named
 * by both restore and inspect, nothing made. */
static void refused(const char *dir, char *const *env, const char *const *want)
{
	char *out;
	CHECK_EQ(restore(dir, env, &out), 69);
	CHECK_CONTAINS(out, "this machine cannot restore the checkpoint");
	CHECK_CONTAINS(out, "nothing done");
	for (int i = 0; want[i]; i++)
		CHECK_CONTAINS(out, want[i]);
	free(out);
	CHECK(restored_root(dir) <= 0); /* CRIU never ran */
	out = verdict(dir, env);
	CHECK_CONTAINS(out, "restorable here: no — ");
	for (int i = 0; want[i]; i++)
		CHECK_CONTAINS(out, want[i]);
	free(out);
}

static void gate(void)
{
	struct group g;
	if (group_start_pair(&g, "gate") < 0)
		return;
	char dir[PATH_MAX + 32], pid[16], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	snprintf(pid, sizeof(pid), "%d", (int)g.root);
	int rc = tool(&out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", dir, "--control-dir", g.ctl, "--criu",
		      criu, "--timeout", "60000", NULL);
	if (!group_dump_ok(&g, rc, out))
		return;
	out = verdict(dir, NULL);
	CHECK_CONTAINS(out, "restorable here: yes");
	CHECK_CONTAINS(out, "; no --device-map)");
	free(out);

	char *fewer[] = {"CUEMU_DEVICES=1", NULL};
	refused(dir, fewer, (const char *const[]){"2 GPUs needed, 1 here", NULL});
	char *model[] = {"CUEMU_MODEL=cuemu,H200", NULL};
	refused(dir, model, (const char *const[]){"GPU 1 of the checkpoint is a cuemu, GPU 1 here a H200", NULL});
	char *memory[] = {"CUEMU_MEMORY=1M", NULL};
	refused(dir, memory, (const char *const[]){"GPU 0 of the checkpoint held ", "GPU 0 here has 1.0 MiB", NULL});
	char *driver[] = {"CUEMU_DRIVER_VERSION=12080", NULL};
	refused(dir, driver, (const char *const[]){"driver: CUDA 12.8 here, the checkpoint's was CUDA 13.0", NULL});
	/* Every reason at once. */
	char *all[] = {"CUEMU_MODEL=cuemu,H200", "CUEMU_MEMORY=1M", "CUEMU_DRIVER_VERSION=12080", NULL};
	refused(dir, all,
		(const char *const[]){"driver: CUDA 12.8", "GPU 1 here a H200", "GPU 0 here has 1.0 MiB", NULL});

	/* What the checkpoint recorded of its CRIU and of cusnap's state format. */
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/" MANIFEST_FILE, dir);
	char *saved = test_read_file(path);
	CHECK(saved != NULL);
	manifest_set(dir, "criu", "version", json_string("99.1"));
	manifest_set(dir, "needs", "state_major", json_integer(99));
	refused(dir, NULL,
		(const char *const[]){"CRIU 99.1 wrote the images", "cannot read a newer CRIU's images",
				      "state format 99, this cusnap reads 1", NULL});
	manifest_put(path, saved);
	/* A missing or damaged record of what it needs: nothing checked, refused. */
	manifest_set(dir, NULL, "needs", json_null());
	refused(dir, NULL, (const char *const[]){"what it needs of a machine is missing or damaged (no record)", NULL});
	manifest_set(dir, NULL, "needs",
		     json_pack("{s:i, s:i, s:[{s:s}]}", "driver_version", 13000, "state_major", 1, "gpus", "uuid",
			       "GPU-1"));
	refused(dir, NULL, (const char *const[]){"missing or damaged (a GPU's uuid, model or memory)", NULL});
	manifest_put(path, saved);
	free(saved);

	/* Another node (other GPU UUIDs): "no" without a device map, "yes" with
	 * the map a restore would take; a map putting two GPUs on one refused
	 * before anything is made, by both. */
	char *other[] = {"CUEMU_UUID_SEED=another-node", NULL};
	out = verdict(dir, other);
	CHECK_CONTAINS(out, "restorable here: no — GPU 0 of the checkpoint");
	free(out);
	CHECK_EQ(tool(&out, other, cusnap, "inspect", "--dir", dir, "--device-map", "auto", NULL), 0);
	CHECK_CONTAINS(out, "restorable here: yes");
	CHECK_CONTAINS(out, "with --device-map auto)");
	free(out);
	CHECK_EQ(tool(&out, other, cusnap, "inspect", "--dir", dir, "--device-map", "0=0,1=0", NULL), 0);
	CHECK_CONTAINS(out, "restorable here: no — --device-map: GPU 0 here is named for GPUs 0 and 1");
	free(out);
	CHECK_SAYS(out,
		   tool(&out, other, cusnap, "restore", "--dir", dir, "--criu", criu, "--device-map", "0=0,1=0", NULL),
		   64, "GPU 0 here is named for GPUs 0 and 1 of the checkpoint");
	CHECK(restored_root(dir) <= 0);

	/* The machine it was made on: restored, and it verifies itself. */
	CHECK_SAYS(out, restore(dir, NULL, &out), 0, "topology identical");
	RESTORED_PASSES(&g, dir, 2);
}

int main(void)
{
	test_require_criu(criu, sizeof(criu));
	e2e_init("restorable");
	cusnap_path(cusnap, sizeof(cusnap));
	test_run("the restore gate: GPU count, model, memory, driver, CRIU version, state format refused (69) with "
		 "every reason, nothing made; inspect --dir agrees; restored here",
		 gate);
	return e2e_done();
}
