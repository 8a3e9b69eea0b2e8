/* SPDX-License-Identifier: MIT */
/* What a step tells its user: progress lines, warnings and errors in the
 * caller's voice (stderr by default; the plugin's goes to CRIU's log too), the
 * phases a command went through (for --json and the metrics), and a line that
 * moves while a long step waits. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define PHASES_MAX 96

/* Everything the library's report keeps, in one place (one command runs per
 * process). */
static struct report {
	struct phase phases[PHASES_MAX]; /* the command's phases, in order */
	size_t nphases;
	bool quiet;
	pthread_mutex_t lock; /* the lines, whole: the ticker's thread says things too */
	bool line_open;       /* a ticker's line is on the terminal, not ended */
	/* The caller's voice (voice_set): NULL, stderr. */
	void (*sink)(enum voice_level level, const char *line);
	const char *prefix;
	char last_error[2600]; /* what fail() said last */
} R = {.lock = PTHREAD_MUTEX_INITIALIZER, .prefix = "cusnap: "};

void progress_quiet(bool q)
{
	R.quiet = q;
}

void voice_set(void (*to)(enum voice_level level, const char *line), const char *p)
{
	R.sink = to;
	R.prefix = p ? p : "cusnap: ";
}

/* text as one line in the caller's voice after who (NULL: the prefix it
 * chose), over a ticker's line on stderr if one is open; information not when
 * quiet. */
static void say_line(const char *who, enum voice_level level, const char *text)
{
	if (level == VOICE_INFO && R.quiet)
		return;
	char line[3200];
	snprintf(line, sizeof(line), "%s%s%s", who ? who : R.prefix, level == VOICE_WARN ? "warning: " : "", text);
	pthread_mutex_lock(&R.lock);
	if (R.sink) {
		R.sink(level, line);
	} else {
		if (R.line_open)
			fputs("\r\033[K", stderr);
		fprintf(stderr, "%s\n", line);
	}
	pthread_mutex_unlock(&R.lock);
}

void voice_v(const char *who, enum voice_level level, const char *fmt, va_list ap)
{
	char text[3000];
	vsnprintf(text, sizeof(text), fmt, ap);
	say_line(who, level, text);
}

void voice(enum voice_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	voice_v(NULL, level, fmt, ap);
	va_end(ap);
}

void progress(const char *step, double ms, const char *fmt, ...)
{
	char extra[512] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(extra, sizeof(extra), fmt, ap);
	va_end(ap);
	if (R.nphases < PHASES_MAX) {
		struct phase *p = &R.phases[R.nphases++];
		snprintf(p->name, sizeof(p->name), "%s", step);
		p->ms = ms;
		p->bytes = 0;
	}
	voice(VOICE_INFO, "%-22s %9.1f ms%s%s", step, ms, extra[0] ? "  " : "", extra);
}

void progress_bytes(const char *step, uint64_t bytes)
{
	for (size_t i = R.nphases; i-- > 0;)
		if (!strcmp(R.phases[i].name, step)) {
			R.phases[i].bytes = bytes;
			return;
		}
}

size_t progress_phases(const struct phase **out)
{
	*out = R.phases;
	return R.nphases;
}

json_t *progress_json(void)
{
	json_t *a = json_array();
	for (size_t i = 0; i < R.nphases; i++) {
		const struct phase *p = &R.phases[i];
		json_t *o = json_pack("{s:s, s:f}", "phase", p->name, "seconds", p->ms / 1000.0);
		if (o && p->bytes) {
			json_object_set_new(o, "bytes", json_integer((json_int_t)p->bytes));
			if (p->ms > 0)
				json_object_set_new(o, "gib_per_s",
						    json_real((double)p->bytes / (double)(1ull << 30) /
							      (p->ms / 1000.0)));
		}
		json_array_append_new(a, o);
	}
	return a;
}

void progress_warning(const char *what)
{
	say_line(NULL, VOICE_WARN, what);
}

void progress_stage(const char *stage, double ms, const char *note)
{
	progress(stage, ms, "%s", note);
}

/* ---- the ticker ---- */

struct ticker {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop, tty;
	char step[48];
	uint64_t total;
	uint64_t (*done)(void *arg);
	void *arg;
	double t0;
};

const char *bytes_text(uint64_t b, char out[32])
{
	if (b >= 1ull << 30)
		snprintf(out, 32, "%.2f GiB", (double)b / (double)(1ull << 30));
	else
		snprintf(out, 32, "%.1f MiB", (double)b / (double)(1ull << 20));
	return out;
}

/* One look at the step: "criu dump  3.2 s  1.20 GiB of ~3.00 GiB, 0.38 GiB/s". */
static void tick(struct ticker *k)
{
	double s = (now_ms() - k->t0) / 1000.0;
	char line[256], a[32], b[32];
	int n = snprintf(line, sizeof(line), "%-22s %7.1f s", k->step, s);
	if (k->done) {
		uint64_t d = k->done(k->arg);
		n += snprintf(line + n, sizeof(line) - (size_t)n, "  %s", bytes_text(d, a));
		if (k->total)
			n += snprintf(line + n, sizeof(line) - (size_t)n, " of ~%s", bytes_text(k->total, b));
		if (s > 0)
			snprintf(line + n, sizeof(line) - (size_t)n, ", %.2f GiB/s", (double)d / (1 << 30) / s);
	} else if (k->total) {
		snprintf(line + n, sizeof(line) - (size_t)n, "  (%s)", bytes_text(k->total, b));
	}
	if (!k->tty) {
		say_line(NULL, VOICE_INFO, line);
		return;
	}
	pthread_mutex_lock(&R.lock);
	fprintf(stderr, "\r\033[K%s%s", R.prefix, line);
	R.line_open = true;
	fflush(stderr);
	pthread_mutex_unlock(&R.lock);
}

static void *ticker_main(void *arg)
{
	struct ticker *k = arg;
	/* A terminal moves five times a second; a log gets a line a second,
	 * from the first second on (short steps stay one line). */
	int period_ms = k->tty ? 200 : 1000;
	pthread_mutex_lock(&k->lock);
	while (!k->stop) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += (long)period_ms * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		if (pthread_cond_timedwait(&k->cond, &k->lock, &until) != 0 && !k->stop) {
			pthread_mutex_unlock(&k->lock);
			tick(k);
			pthread_mutex_lock(&k->lock);
		}
	}
	pthread_mutex_unlock(&k->lock);
	return NULL;
}

struct ticker *ticker_start(const char *step, uint64_t total, uint64_t (*done)(void *arg), void *arg)
{
	if (R.quiet)
		return NULL;
	struct ticker *k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	snprintf(k->step, sizeof(k->step), "%s", step);
	k->total = total;
	k->done = done;
	k->arg = arg;
	k->tty = !R.sink && isatty(STDERR_FILENO) == 1; /* (a sink gets plain lines) */
	k->t0 = now_ms();
	pthread_mutex_init(&k->lock, NULL);
	pthread_cond_init(&k->cond, NULL);
	if (pthread_create(&k->thread, NULL, ticker_main, k) != 0) {
		free(k);
		return NULL;
	}
	return k;
}

void ticker_stop(struct ticker *k)
{
	if (!k)
		return;
	pthread_mutex_lock(&k->lock);
	k->stop = true;
	pthread_cond_signal(&k->cond);
	pthread_mutex_unlock(&k->lock);
	pthread_join(k->thread, NULL);
	pthread_mutex_lock(&R.lock);
	if (R.line_open)
		fputs("\r\033[K", stderr);
	R.line_open = false;
	pthread_mutex_unlock(&R.lock);
	pthread_cond_destroy(&k->cond);
	pthread_mutex_destroy(&k->lock);
	free(k);
}

/* ---- errors ---- */

/* What fail() printed last: one command runs per process. */

const char *report_error(void)
{
	return R.last_error;
}

int fail(int code, const char *fmt, ...)
{
	char msg[2600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	say_line(NULL, VOICE_ERROR, msg);
	snprintf(R.last_error, sizeof(R.last_error), "%s", msg);
	return code;
}

const char *state_name(int s)
{
	switch (s) {
	case CU_PROCESS_STATE_RUNNING: return "running";
	case CU_PROCESS_STATE_LOCKED: return "locked";
	case CU_PROCESS_STATE_CHECKPOINTED: return "checkpointed";
	case CU_PROCESS_STATE_FAILED: return "failed";
	default: return "-";
	}
}
