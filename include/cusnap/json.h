/* SPDX-License-Identifier: MIT */
/* JSON through jansson: every JSON output of cusnap and snapshot-cuda-vmm, and
 * reading manifest.json. jansson is linked statically into those two tools
 * (the agent image needs nothing new) and never into the shim. These helpers
 * are what jansson leaves to its caller. */
#ifndef CUSNAP_JSON_H
#define CUSNAP_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cusnap/ids.h"

/* s as a JSON string. JSON text is Unicode and a path need not be: each byte
 * that is not part of valid UTF-8 becomes U+FFFD. NULL s: JSON null. */
json_t *json_text(const char *s);
/* An id as its 32 hex digits. */
json_t *json_id(const struct cusnap_id *id);
/* Write v as one compact line on f, then drop it. Returns 0, or -1 when v is
 * NULL (a build step ran out of memory) or the write failed. */
int json_emit(FILE *f, json_t *v);
/* Parse the JSON file at path (at most max bytes): NULL with err saying why. */
json_t *json_read_file(const char *path, size_t max, char *err, size_t errlen);
/* The same for name in directory dfd (AT_FDCWD: the working directory), never
 * through a symbolic link; shown names it in err. */
json_t *json_read_at(int dfd, const char *name, const char *shown, size_t max, char *err, size_t errlen);
/* Typed members of object o: NULL / def when absent or of another type. */
const char *json_member_string(const json_t *o, const char *key);
/* The same, "" when absent or of another type. */
const char *json_member_text(const json_t *o, const char *key);
double json_member_number(const json_t *o, const char *key, double def);
bool json_member_bool(const json_t *o, const char *key, bool def);

#endif
