/* SPDX-License-Identifier: MIT */
/* The plugin's image, cusnap-plugin.json in CRIU's images directory: what a
 * restore needs besides the state file. Its writer and its reader, one form. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/atomicfile.h"
#include "cusnap/json.h"
#include "cusnap/paths.h"
#include "cusnap/request.h"
#include "plugin.h"

/* The form this plugin writes; a reader refuses any other. */
#define IMAGE_FORMAT 1

int plugin_image_write(const char *dir, const struct plugin_image *im, char *why, size_t len)
{
	json_t *j = json_pack("{s:i, s:s, s:b, s:o, s:o, s:I, s:O}", "cusnap_plugin", IMAGE_FORMAT, "content",
			      proto_content_name((uint32_t)im->content), "vmm", im->vmm, "control_dir",
			      json_text(im->control_dir), "control_dir_here", json_text(im->control_dir_here),
			      "cuda_processes", (json_int_t)im->cuda_processes, "gpus",
			      im->gpus ? im->gpus : json_array());
	if (j && im->network)
		json_object_set(j, "network", im->network);
	if (j && im->pids)
		json_object_set(j, "pids", im->pids);
	if (j && im->needs)
		json_object_set(j, "needs", im->needs);
	if (j && im->criu_version[0])
		json_object_set_new(j, "criu_version", json_text(im->criu_version));
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	int rc = atomic_write_text(-1, dir, PLUGIN_IMAGE, text, 0600, why, len);
	free(text);
	return rc;
}

int plugin_image_read(const char *dir, struct plugin_image *im, char *why, size_t len)
{
	char path[PATH_MAX + 32];
	memset(im, 0, sizeof(*im));
	snprintf(path, sizeof(path), "%s/" PLUGIN_IMAGE, dir);
	if (access(path, F_OK) < 0)
		return 0;
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	const char *control = json_string_value(json_object_get(j, "control_dir"));
	const char *here = json_string_value(json_object_get(j, "control_dir_here"));
	const char *content = json_string_value(json_object_get(j, "content"));
	const char *bad = !j ? je.text
			  : json_member_number(j, "cusnap_plugin", 0) != IMAGE_FORMAT
				  ? "not an image of this plugin's form"
			  : !control || !path_plain_absolute(control)
				  ? "no control_dir (an absolute path without . or ..)"
			  : here && here[0] && !path_plain_absolute(here)
				  ? "a control_dir_here that is not an absolute path without . or .."
			  : !proto_content_parse(content)              ? "no content mode"
			  : !json_is_array(json_object_get(j, "gpus")) ? "no GPU list"
			  : json_object_get(j, "network") && !json_is_object(json_object_get(j, "network"))
				  ? "a malformed network record"
			  : json_object_get(j, "pids") && !json_is_array(json_object_get(j, "pids"))
				  ? "a malformed PID list"
			  : json_object_get(j, "needs") && !json_is_object(json_object_get(j, "needs"))
				  ? "a malformed record of what a restore needs"
				  : NULL;
	if (bad) {
		snprintf(why, len, "%s: %s", path, bad);
		json_decref(j);
		return -1;
	}
	im->content = proto_content_parse(content);
	im->vmm = json_member_bool(j, "vmm", false);
	snprintf(im->control_dir, sizeof(im->control_dir), "%s", control);
	snprintf(im->control_dir_here, sizeof(im->control_dir_here), "%s", here ? here : "");
	im->cuda_processes = (size_t)json_member_number(j, "cuda_processes", 0);
	im->gpus = json_incref(json_object_get(j, "gpus"));
	im->network = json_incref(json_object_get(j, "network"));
	im->pids = json_incref(json_object_get(j, "pids"));
	im->needs = json_incref(json_object_get(j, "needs"));
	const char *criu = json_string_value(json_object_get(j, "criu_version"));
	snprintf(im->criu_version, sizeof(im->criu_version), "%s", criu ? criu : "");
	json_decref(j);
	return 1;
}

void plugin_image_free(struct plugin_image *im)
{
	json_decref(im->gpus);
	json_decref(im->network);
	json_decref(im->pids);
	json_decref(im->needs);
	im->gpus = im->network = im->pids = im->needs = NULL;
}
