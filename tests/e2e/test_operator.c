/* SPDX-License-Identifier: MIT */
/* What an operator sees (DESIGN.md §9, §12.1): on a terminal a long step shows
 * one line that moves, off one a plain line each second, with --quiet none;
 * --json carries each phase's time, bytes and rate; --metrics-dir leaves a
 * file node_exporter's textfile collector reads, with the counters carried
 * from one command to the next (a suspend, a resume, a failed suspend, a
 * checkpoint), read back through node_exporter's own HTTP endpoint on the
 * loopback; a metrics directory others may write is refused before anything
 * is done. The native checkpoint of the group is made to take 1.2 s
 * (CUEMU_CKPT_STALL_MS) so that there is a long step to watch. Without CRIU
 * (the sanitizer passes: CRIU cannot dump their runtimes) the checkpoint and
 * what the metrics say of it are left out; the rest runs. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "e2e_util.h"

static char cusnap[PATH_MAX], criu[PATH_MAX];
static bool have_criu;
static char *stall[] = {"CUEMU_CKPT_STALL_MS=1200", NULL};

/* cusnap VERB for g's tree with more arguments (NULL-ended, at most 6). */
static int on_group(struct group *g, const char *verb, char **out, const char *const *more)
{
	char pid[16], dir[PATH_MAX + 32];
	snprintf(pid, sizeof(pid), "%d", g->root);
	snprintf(dir, sizeof(dir), "%s/state", g->ctl);
	const char *m[7] = {NULL};
	for (int i = 0; more && more[i] && i < 6; i++)
		m[i] = more[i];
	return tool(out, NULL, cusnap, verb, "--pid", pid, "--dir", dir, "--control-dir", g->ctl, "--timeout", "20000",
		    m[0], m[1], m[2], m[3], m[4], m[5], NULL);
}

/* How many ticker lines of the native checkpoint (stalled) out holds, each
 * between before and after, whatever time it shows (a busy machine ticks late:
 * the times are not the property). */
static int ticks(const char *out, const char *before, const char *after)
{
	static const char tag[] = "cusnap: (native checkpoint) ";
	int n = 0;
	for (const char *p = out; p && (p = strstr(p, before)); p++) {
		const char *q = p + strlen(before);
		if (strncmp(q, tag, sizeof(tag) - 1))
			continue;
		q += sizeof(tag) - 1;
		q += strspn(q, " ");
		size_t whole = strspn(q, "0123456789");
		if (!whole || q[whole] != '.' || !strspn(q + whole + 1, "0123456789"))
			continue;
		q += whole + 1 + strspn(q + whole + 1, "0123456789");
		n += !strncmp(q, " s", 2) && !strncmp(q + 2, after, strlen(after));
	}
	return n;
}

static void progress_lines(void)
{
	struct group g;
	if (group_start(&g, "progress", 1, 2, false, NULL, stall, NULL) < 0)
		return;
	char *out, cmd[3 * PATH_MAX];
	/* On a terminal (script(1) gives the command a pseudo-terminal). */
	snprintf(cmd, sizeof(cmd), "'%s' suspend --pid %d --dir '%s/state' --control-dir '%s'", cusnap, (int)g.root,
		 g.ctl, g.ctl);
	CHECK_EQ(tool(&out, NULL, "/usr/bin/script", "-qec", cmd, "/dev/null", NULL), 0);
	CHECK_CONTAINS(out, "native checkpoint");
	CHECK(ticks(out, "\r\033[K", "\r\033[K") >= 1); /* (the command's output follows a failure) */
	free(out);
	CHECK_SAYS(out, on_group(&g, "resume", &out, NULL), 0, "RESUME");
	/* Off a terminal: plain lines, one a second, none that moves. */
	CHECK_EQ(on_group(&g, "suspend", &out, NULL), 0);
	CHECK_CONTAINS(out, "native checkpoint");
	CHECK(ticks(out, "\n", "\n") >= 1);
	CHECK(!strchr(out, '\r'));
	free(out);
	/* --quiet --json: the summary alone, with each phase's bytes and rate. */
	CHECK_EQ(on_group(&g, "resume", &out, (const char *const[]){"--quiet", "--json", NULL}), 0);
	CHECK(out && out[0] == '{');
	CHECK(!strstr(out, "cusnap: "));
	CHECK_CONTAINS(out, "{\"phase\":\"RESTORE_CREATORS\",\"seconds\":");
	CHECK_CONTAINS(out, "\"gib_per_s\":");
	free(out);
	CHECK_EQ(on_group(&g, "suspend", &out, (const char *const[]){"--quiet", NULL}), 0);
	CHECK(out && !strstr(out, "cusnap: "));
	free(out);
	CHECK_SAYS(out, on_group(&g, "resume", &out, NULL), 0, "RESUME");
	CHECK_EQ(group_finish(&g), 2);
	group_kill(&g);
}

/* The value of series in text (a line "SERIES VALUE"), or -1. */
static double value_of(const char *text, const char *series)
{
	char want[512];
	snprintf(want, sizeof(want), "\n%s ", series);
	const char *at = text ? strstr(text, want) : NULL;
	return at ? strtod(at + strlen(want), NULL) : -1;
}

/* What the metrics of this test's commands must say, in text (the file, or
 * node_exporter's answer). */
static void metrics_say(const char *text, const char *ckpt)
{
	CHECK_EQ(value_of(text, "cusnap_operations_total{operation=\"suspend\",result=\"ok\"}"), 1);
	CHECK_EQ(value_of(text, "cusnap_operations_total{operation=\"suspend\",result=\"failed\"}"), 1);
	CHECK_EQ(value_of(text, "cusnap_failures_total{operation=\"suspend\",reason=\"left_running\"}"), 1);
	CHECK_EQ(value_of(text, "cusnap_operations_total{operation=\"resume\",result=\"ok\"}"), 1);
	CHECK_EQ(value_of(text, "cusnap_last_exit_code{operation=\"suspend\"}"), 1);
	CHECK(value_of(text, "cusnap_last_phase_bytes{operation=\"resume\",phase=\"RESTORE_CREATORS\"}") > 0);
	CHECK_CONTAINS(text, "# TYPE cusnap_operations_total counter\n");
	if (!have_criu)
		return;
	CHECK_EQ(value_of(text, "cusnap_operations_total{operation=\"checkpoint\",result=\"ok\"}"), 1);
	CHECK(value_of(text, "cusnap_last_phase_bytes{operation=\"checkpoint\",phase=\"criu dump\"}") > 0);
	CHECK(value_of(text, "cusnap_last_phase_bytes{operation=\"checkpoint\",phase=\"PREPARE\"}") > 0);
	CHECK(value_of(text, "cusnap_last_phase_duration_seconds{operation=\"checkpoint\",phase=\"native "
			     "checkpoint\"}") >= 1.0);
	CHECK(value_of(text, "cusnap_last_duration_seconds{operation=\"checkpoint\"}") >= 1.0);
	char series[PATH_MAX + 128];
	snprintf(series, sizeof(series),
		 "cusnap_last_success_timestamp_seconds{operation=\"checkpoint\",target=\"%s\"}", ckpt);
	CHECK(value_of(text, series) > 1.7e9);
}

/* node_exporter (build/node-exporter-path, as make test provides it), or "". */
static void exporter_binary(char out[PATH_MAX])
{
	char path[PATH_MAX];
	out[0] = '\0';
	for (int i = 0; i < 2 && !out[0]; i++) {
		snprintf(path, sizeof(path), i ? "%s/../../build/node-exporter-path" : "%s/../node-exporter-path",
			 tests_dir);
		char *given = test_read_file(path);
		if (given && *given)
			snprintf(out, PATH_MAX, "%.*s", (int)strcspn(given, "\n"), given);
		free(given);
		if (out[0] && access(out, X_OK) != 0)
			out[0] = '\0';
	}
}

/* A port on the loopback nobody listens on now. */
static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(a);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;
	if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(s, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (s >= 0)
		close(s);
	return port;
}

/* metrics_dir through node_exporter's textfile collector, on the loopback. */
static void scraped(const char *metrics_dir, const char *ckpt)
{
	char bin[PATH_MAX];
	exporter_binary(bin);
	if (!bin[0]) {
		printf("  (the scrape skipped: no node_exporter; scripts/setup-node-exporter.sh provides it)\n");
		return;
	}
	int port = free_port();
	char listen[64], textdir[PATH_MAX + 40], url[96], log[PATH_MAX + 32];
	snprintf(listen, sizeof(listen), "--web.listen-address=127.0.0.1:%d", port);
	snprintf(textdir, sizeof(textdir), "--collector.textfile.directory=%s", metrics_dir);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/metrics", port);
	snprintf(log, sizeof(log), "%s/node-exporter.log", e2e_root);
	char *argv[] = {bin, listen, "--collector.disable-defaults", "--collector.textfile", textdir, NULL};
	pid_t ex = test_spawn_tied(argv, NULL, log);
	char *out = NULL;
	for (int i = 0; i < 100; i++) {
		free(out);
		if (tool(&out, NULL, "/usr/bin/curl", "-sf", "--max-time", "5", url, NULL) == 0)
			break;
		usleep(100000);
	}
	CHECK_CONTAINS(out, "node_textfile_scrape_error 0");
	metrics_say(out, ckpt);
	free(out);
	kill(ex, SIGTERM);
	test_wait_child(ex, 10000);
}

static void metrics(void)
{
	char dir[PATH_MAX], ctl[PATH_MAX + 16], m[PATH_MAX + 16], open_dir[PATH_MAX + 16], ckpt[PATH_MAX + 16];
	e2e_scratch("metrics", dir, ctl);
	snprintf(m, sizeof(m), "%s/metrics", dir);
	snprintf(open_dir, sizeof(open_dir), "%s/open", dir);
	CHECK_EQ(mkdir(m, 0700), 0);
	CHECK_EQ(mkdir(open_dir, 0700), 0);
	CHECK_EQ(chmod(open_dir, 0777), 0);
	struct group g;
	if (group_start(&g, "metrics-group", 1, 2, false, NULL, stall, NULL) < 0)
		return;
	char *out;
	const char *with[] = {"--metrics-dir", m, NULL};
	/* A directory anyone may write into: refused before anything is done. */
	CHECK_SAYS(out, on_group(&g, "suspend", &out, (const char *const[]){"--metrics-dir", open_dir, NULL}), 64,
		   "--metrics-dir");
	CHECK_SAYS(out, on_group(&g, "suspend", &out, with), 0, "native checkpoint");
	CHECK_SAYS(out, on_group(&g, "resume", &out, with), 0, "RESUME");
	/* A failed suspend: a tree without CUDA (this test's own sleeping child). */
	pid_t sleeper = fork();
	if (sleeper == 0) {
		execl("/bin/sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	char spid[16];
	snprintf(spid, sizeof(spid), "%d", (int)sleeper);
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "suspend", "--pid", spid, "--metrics-dir", m, NULL), 1,
		   "no CUDA process");
	kill(sleeper, SIGKILL);
	test_wait_child(sleeper, 5000);
	snprintf(ckpt, sizeof(ckpt), "%s/ckpt", dir);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", (int)g.root);
	if (have_criu) {
		int rc = tool(&out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", ckpt, "--control-dir", g.ctl,
			      "--criu", criu, "--metrics-dir", m, NULL);
		if (!group_dump_ok(&g, rc, out))
			return;
	} else {
		printf("  (no checkpoint: %s)\n",
		       getenv("CUSNAP_SANITIZER") ? "CRIU cannot dump a sanitizer's runtime" : "no CRIU");
	}
	char file[PATH_MAX + 32];
	snprintf(file, sizeof(file), "%s/cusnap.prom", m);
	char *text = test_read_file(file);
	CHECK(text != NULL);
	metrics_say(text, ckpt);
	free(text);
	struct stat st;
	CHECK(stat(file, &st) == 0 && (st.st_mode & 0777) == 0644); /* node_exporter runs as a user of its own */
	scraped(m, ckpt);
	if (!have_criu) {
		CHECK_EQ(group_finish(&g), 2);
		group_kill(&g);
	}
}

int main(void)
{
	have_criu = !getenv("CUSNAP_SANITIZER") && geteuid() == 0 && test_find_criu(criu, sizeof(criu)) == 0;
	e2e_init("operator");
	cusnap_path(cusnap, sizeof(cusnap));
	test_run("progress: a line that moves on a terminal, plain lines off one, none with --quiet; --json phases",
		 progress_lines);
	test_run("--metrics-dir: counters carried over a suspend, a resume, a failed suspend and a checkpoint; "
		 "read back through node_exporter; an open directory refused",
		 metrics);
	return e2e_done();
}
