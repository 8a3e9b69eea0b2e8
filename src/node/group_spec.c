/* SPDX-License-Identifier: MIT */
/* A group's spec from the settings (DESIGN.md §16): the tool's --group options
 * and the plugin's keys of the same names are rows of settings.def; here they
 * are checked and made the spec group.c joins with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "node.h"

/* A member's name: 1 to 200 letters, digits, '.', '_', ':' or '-', not beginning with '.'. */
static bool name_ok(const char *t)
{
	static const char ok[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-";
	size_t n = strlen(t);
	return n && n <= 200 && strspn(t, ok) == n && t[0] != '.';
}

static int name_order(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

/* members: N, or NAME,NAME,... (each once; letters, digits, . _ : -) into
 * spec, the names sorted ("b,a" and "a,b" are one job): 0, or -1 with why. */
static int members_parse(const char *arg, struct group_spec *spec, char *why, size_t len)
{
	const char *bad = "a number from 1 to 4096, or the members' names (letters, digits, . _ : -), each once, "
			  "separated by commas";
	spec->member_names[0] = '\0';
	if (strspn(arg, "0123456789") == strlen(arg)) {
		long n = strtol(arg, NULL, 10);
		if (n < 1 || n > 4096 || strlen(arg) > 4)
			return snprintf(why, len, "members %s: %s", arg, bad), -1;
		spec->members = (int)n;
		return 0;
	}
	char copy[sizeof(spec->member_names)], *names[4096];
	if (strlen(arg) >= sizeof(copy))
		return snprintf(why, len, "members: a list of at most %zu characters", sizeof(copy) - 1), -1;
	snprintf(copy, sizeof(copy), "%s", arg);
	int n = 0;
	for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		bool wrong = n == 4096 || !name_ok(t);
		for (int i = 0; i < n && !wrong; i++)
			wrong = !strcmp(names[i], t); /* (named twice) */
		if (wrong)
			return snprintf(why, len, "members %s: %s", arg, bad), -1;
		names[n++] = t;
	}
	if (!n || arg[0] == ',' || arg[strlen(arg) - 1] == ',' || strstr(arg, ",,"))
		return snprintf(why, len, "members %s: %s", arg, bad), -1;
	qsort(names, (size_t)n, sizeof(*names), name_order);
	char *w = spec->member_names;
	for (int i = 0; i < n; i++)
		w += sprintf(w, "%s%s", i ? "," : "", names[i]); /* (as long as the list) */
	spec->members = n;
	return 0;
}

int group_spec_from(const struct settings *s, pid_t pid, const char *dir, struct group_spec *spec, char *why,
		    size_t len)
{
	memset(spec, 0, sizeof(*spec));
	if (!s->group[0]) {
		if (s->members[0] || s->etcd[0] || s->member[0])
			return snprintf(why, len, "members, etcd and member go with a group NAME"), -1;
		return 0;
	}
	if (strchr(s->group, '/') || strlen(s->group) > 128)
		return snprintf(why, len, "group %s: a name of 1 to 128 characters without '/'", s->group), -1;
	if (s->member[0] && !name_ok(s->member))
		return snprintf(why, len,
				"member %s: a name of 1 to 200 letters, digits, '.', '_', ':' or '-', not beginning "
				"with '.'",
				s->member),
		       -1;
	if (s->members[0] && members_parse(s->members, spec, why, len) < 0)
		return -1;
	spec->group = s->group;
	spec->member = s->member[0] ? s->member : NULL;
	spec->etcd = s->etcd[0] ? s->etcd : NULL;
	spec->auth = (struct etcd_auth){.cacert = s->etcd_cacert[0] ? s->etcd_cacert : NULL,
					.cert = s->etcd_cert[0] ? s->etcd_cert : NULL,
					.key = s->etcd_key[0] ? s->etcd_key : NULL,
					.user = s->etcd_user[0] ? s->etcd_user : NULL,
					.password_file = s->etcd_password_file[0] ? s->etcd_password_file : NULL};
	spec->timeout_ms = s->group_timeout_ms ? s->group_timeout_ms : s->timeout_ms;
	spec->pid = pid;
	spec->dir = dir;
	return 1;
}
