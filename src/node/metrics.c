/* SPDX-License-Identifier: MIT */
/* Metrics for node_exporter's textfile collector (DESIGN.md §12.1): after
 * every operation DIR/cusnap.prom is rewritten atomically, in the Prometheus
 * text format that collector parses. The counters go on from the file's
 * previous contents (each command is a process of its own), under an flock of
 * DIR/.cusnap.prom.lock so that two commands at once both count. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "cusnap/atomicfile.h"
#include "cusnap/exitcodes.h"
#include "cusnap/rundir.h"

#define METRICS_FILE "cusnap.prom"
#define METRICS_LOCK ".cusnap.prom.lock"
#define METRICS_MAX_BYTES (1u << 20)
/* Trees and checkpoints whose last success is kept (the oldest go first). */
#define METRICS_TARGETS_MAX 256

static const struct {
	const char *name, *type, *help;
} metric[] = {
	{"cusnap_operations_total", "counter", "Operations run, by operation and result (ok or failed)."},
	{"cusnap_failures_total", "counter",
	 "Failed operations, by operation and reason (what the exit status means)."},
	{"cusnap_last_duration_seconds", "gauge", "How long the last operation of each kind took."},
	{"cusnap_last_exit_code", "gauge", "The exit status of the last operation of each kind (0: success)."},
	{"cusnap_last_phase_duration_seconds", "gauge", "How long each phase of the last operation of each kind took."},
	{"cusnap_last_phase_bytes", "gauge", "The bytes each phase of the last operation of each kind moved."},
	{"cusnap_last_success_timestamp_seconds", "gauge",
	 "When an operation last succeeded on a tree (its root PID) or a checkpoint directory (Unix time)."},
};
#define NMETRICS (sizeof(metric) / sizeof(metric[0]))

static const char *reason_of(int code)
{
	switch (code) {
	case EX_LEFT_RUNNING: return "left_running";
	case EX_TERMINATED: return "terminated";
	case EX_USAGE: return "usage";
	case EX_UNAVAILABLE: return "unavailable";
	case EX_BUSY: return "busy";
	default: return "other";
	}
}

/* A label value as the text format wants it: \, " and newline escaped. */
static void escape(const char *in, char *out, size_t len)
{
	size_t o = 0;
	for (; *in && o + 3 < len; in++) {
		if (*in == '\\' || *in == '"' || *in == '\n')
			out[o++] = '\\';
		out[o++] = *in == '\n' ? 'n' : *in;
	}
	out[o] = '\0';
}

/* The metric a series ("name{labels}") belongs to: its index, or -1. */
static int metric_of(const char *series)
{
	size_t n = strcspn(series, "{ ");
	for (size_t i = 0; i < NMETRICS; i++)
		if (strlen(metric[i].name) == n && !strncmp(series, metric[i].name, n))
			return (int)i;
	return -1;
}

/* The previous file's series of ours into s (series -> value). */
static void carried(int dfd, json_t *s)
{
	int fd = openat(dfd, METRICS_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	char *text = malloc(METRICS_MAX_BYTES + 1);
	ssize_t n = text ? read(fd, text, METRICS_MAX_BYTES) : -1;
	close(fd);
	if (n <= 0) {
		free(text);
		return;
	}
	text[n] = '\0';
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char *sp = strrchr(line, ' '), *end;
		if (line[0] == '#' || !sp || metric_of(line) < 0)
			continue;
		*sp = '\0';
		double v = strtod(sp + 1, &end);
		if (end != sp + 1 && !*end)
			json_object_set_new(s, line, json_real(v));
	}
	free(text);
}

static void add(json_t *s, const char *series, double by)
{
	json_object_set_new(s, series, json_real(json_real_value(json_object_get(s, series)) + by));
}

/* Drop the series of metric name whose labels start with prefix. */
static void drop(json_t *s, const char *name, const char *prefix)
{
	char start[512];
	snprintf(start, sizeof(start), "%s{%s", name, prefix);
	const char *key;
	json_t *v;
	void *tmp;
	json_object_foreach_safe(s, tmp, key, v)
	{
		(void)v;
		if (!strncmp(key, start, strlen(start)))
			json_object_del(s, key);
	}
}

/* At most METRICS_TARGETS_MAX last-success series: the oldest go. */
static void bound_targets(json_t *s)
{
	const char *name = "cusnap_last_success_timestamp_seconds{", *key, *oldest;
	json_t *v;
	for (;;) {
		size_t n = 0;
		double at = 0;
		oldest = NULL;
		json_object_foreach(s, key, v)
		{
			if (strncmp(key, name, strlen(name)))
				continue;
			n++;
			if (!oldest || json_real_value(v) < at)
				oldest = key, at = json_real_value(v);
		}
		if (n <= METRICS_TARGETS_MAX || !oldest)
			return;
		json_object_del(s, oldest);
	}
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* s as the text format: each metric's HELP and TYPE, then its series sorted. */
static char *render(const json_t *s)
{
	size_t n = json_object_size(s), k = 0;
	const char **keys = calloc(n ? n : 1, sizeof(*keys));
	char *text = NULL;
	size_t len = 0;
	FILE *f = keys ? open_memstream(&text, &len) : NULL;
	if (!f) {
		free(keys);
		return NULL;
	}
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)s, key, v) keys[k++] = key;
	qsort(keys, n, sizeof(*keys), cmp_str);
	for (size_t m = 0; m < NMETRICS; m++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", metric[m].name, metric[m].help, metric[m].name,
			metric[m].type);
		for (size_t i = 0; i < n; i++)
			if (metric_of(keys[i]) == (int)m)
				fprintf(f, "%s %.15g\n", keys[i], json_real_value(json_object_get(s, keys[i])));
	}
	fclose(f);
	free(keys);
	return text;
}

/* The series of this operation's result into s. */
static void record(json_t *s, const char *op, int code, double seconds, const char *target)
{
	char series[1024], e[512];
	snprintf(series, sizeof(series), "cusnap_operations_total{operation=\"%s\",result=\"%s\"}", op,
		 code ? "failed" : "ok");
	add(s, series, 1);
	if (code) {
		snprintf(series, sizeof(series), "cusnap_failures_total{operation=\"%s\",reason=\"%s\"}", op,
			 reason_of(code));
		add(s, series, 1);
	}
	snprintf(series, sizeof(series), "cusnap_last_duration_seconds{operation=\"%s\"}", op);
	json_object_set_new(s, series, json_real(seconds));
	snprintf(series, sizeof(series), "cusnap_last_exit_code{operation=\"%s\"}", op);
	json_object_set_new(s, series, json_real(code));
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "operation=\"%s\",", op);
	drop(s, "cusnap_last_phase_duration_seconds", prefix);
	drop(s, "cusnap_last_phase_bytes", prefix);
	const struct phase *p;
	size_t np = progress_phases(&p);
	for (size_t i = 0; i < np; i++) {
		escape(p[i].name, e, sizeof(e));
		snprintf(series, sizeof(series), "cusnap_last_phase_duration_seconds{operation=\"%s\",phase=\"%s\"}",
			 op, e);
		add(s, series, p[i].ms / 1000.0); /* (a phase met twice: both) */
		if (p[i].bytes) {
			snprintf(series, sizeof(series), "cusnap_last_phase_bytes{operation=\"%s\",phase=\"%s\"}", op,
				 e);
			add(s, series, (double)p[i].bytes);
		}
	}
	if (!code && target && *target) {
		escape(target, e, sizeof(e));
		snprintf(series, sizeof(series),
			 "cusnap_last_success_timestamp_seconds{operation=\"%s\",target=\"%s\"}", op, e);
		json_object_set_new(s, series, json_real((double)time(NULL)));
		bound_targets(s);
	}
}

int metrics_write(const char *dir, const char *op, int code, double seconds, const char *target, char *why, size_t len)
{
	int dfd = dir_open_trusted(dir, false, why, len);
	if (dfd < 0)
		return -1;
	int lk = openat(dfd, METRICS_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lk < 0 || flock(lk, LOCK_EX) < 0) {
		snprintf(why, len, "%s/%s: %s", dir, METRICS_LOCK, strerror(errno));
		if (lk >= 0)
			close(lk);
		close(dfd);
		return -1;
	}
	json_t *s = json_object();
	carried(dfd, s);
	record(s, op, code, seconds, target);
	char *text = render(s);
	json_decref(s);
	/* 0644: node_exporter runs as a user of its own. */
	int rc = atomic_write_text(dfd, dir, METRICS_FILE, text, 0644, why, len);
	free(text);
	close(lk);
	close(dfd);
	return rc;
}
