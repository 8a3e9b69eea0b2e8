/* SPDX-License-Identifier: MIT */
/* snapshot-cuda-vmm: the coordinator CLI (DESIGN.md §3), a thin front over the
 * coordinator library. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusnap/fault.h"
#include "cusnap/request.h"
#include "cusnap/control.h"
#include "coord.h"
#include "cusnap/fdcheck.h"
#include "cusnap/exitcodes.h"
#include "cusnap/json.h"
#include "cusnap/log.h"
#include "cusnap/rundir.h"

/* SIGINT, SIGTERM, SIGHUP during --prepare: finish the step in flight, then
 * abort what was prepared (never leave the participants half-prepared). */
static volatile sig_atomic_t caught;

static void on_signal(int sig)
{
	caught = sig;
}

static void catch_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

/* One line of this tool's on stderr, at a level of log.h's numbering (the
 * one the project says everything in: cusnap's voice too): a warning's says
 * so. */
static void say(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int level, const char *fmt, ...)
{
	char text[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	fprintf(stderr, "snapshot-cuda-vmm: %s%s\n", level == LOG_WARN ? "warning: " : "", text);
}

/* An error said: code, the exit code it ends with. */
#define REFUSE(code, ...) (say(LOG_ERROR, __VA_ARGS__), (code))

/* The coordinator's stages and warnings, in this tool's voice. */
static void print_stage(const char *stage, double ms, const char *note)
{
	say(LOG_INFO, "%-24s %8.1f ms%s%s", stage, ms, *note ? "  " : "", note);
}

static void print_warning(const char *what)
{
	say(LOG_WARN, "%s", what);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: snapshot-cuda-vmm --prepare --checkpoint-dir DIR [--content host|file|native] PARTICIPANTS\n"
		"       snapshot-cuda-vmm --restore --checkpoint-dir DIR [--require-state] PARTICIPANTS\n"
		"       snapshot-cuda-vmm --abort PARTICIPANTS\n"
		"       snapshot-cuda-vmm --inspect PARTICIPANTS\n"
		"       snapshot-cuda-vmm --inspect-state DIR [--json]\n"
		"  PARTICIPANTS: [--proc-root P] [--control-dir D] [--json] [--timeout MS]\n"
		"                --process OBS NS [--process OBS NS ...]\n"
		"\n"
		"  --prepare          reduce shared VMM memory to what the native checkpoint handles and write\n"
		"                     DIR/cuda-vmm.state; on failure every participant is rebuilt\n"
		"  --restore          after the native restore: rebuild the sharing from DIR/cuda-vmm.state;\n"
		"                     without that file nothing was prepared: exit 0 (unless --require-state)\n"
		"  --abort            rebuild participants left part way through a prepare\n"
		"  --inspect          print every participant's tracked CUDA VMM topology (read-only)\n"
		"  --inspect-state D  print the state file D/cuda-vmm.state\n"
		"  --content MODE     host (default): save shared bytes in the processes; file: in files of\n"
		"                     their own in DIR; native: keep them on the device for the native\n"
		"                     checkpoint to save\n"
		"  --process OBS NS   a participant: OBS its PID as seen here, NS its PID in its own namespace\n"
		"  --proc-root P      reach endpoints as P/OBS/root/<control-dir>/cuda-vmm-NS.sock\n"
		"                     (default /proc; \"\" means <control-dir>/cuda-vmm-NS.sock directly)\n"
		"  --control-dir D    the participants' control directory (default $SNAPSHOT_CONTROL_DIR,\n"
		"                     $DYN_SNAPSHOT_CONTROL_DIR, or /snapshot-control)\n"
		"  --json             one JSON object on stdout\n"
		"  --timeout MS       deadline per participant (default %d, as cusnap's)\n"
		"\n"
		"exit status: 0 success; 1 failed, the workload is as before (prepare rebuilt it); 2 failed\n"
		"and the workload is in an unknown state (restore or abort failed); 64 usage error\n",
		PROTO_STEP_TIMEOUT_MS);
}

static int parse_int(const char *s, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v <= 0 || v > 1 << 30)
		return -1;
	*out = (int)v;
	return 0;
}

/* --inspect-state DIR: the state file, readable or as JSON. */
static int inspect_state(const char *dir, int json)
{
	char path[4200], err[1200];
	snprintf(path, sizeof(path), "%s/" STATE_FILE, dir);
	struct state st;
	if (state_read(path, &st, err, sizeof(err)) < 0) {
		return REFUSE(EX_LEFT_RUNNING, "%s", err);
	}
	struct coord_target *t;
	struct topo_participant *p;
	if (coord_state_view(&st, &t, &p) < 0) {
		state_free(&st);
		return REFUSE(EX_LEFT_RUNNING, "out of memory");
	}
	const char *content = proto_content_name(st.content) ? proto_content_name(st.content) : "?";
	if (json) {
		char version[32];
		snprintf(version, sizeof(version), "%d.%d", STATE_MAJOR, STATE_MINOR);
		json_emit(stdout, json_pack("{s:{s:o, s:s, s:I, s:s}, s:o}", "state", "path", json_text(path),
					    "version", version, "created", (json_int_t)st.created, "content", content,
					    "topology", coord_topology_json(t, p, st.n)));
	} else {
		printf("state file %s: format %d.%d, created %llu, content %s, %zu participant(s)\n", path, STATE_MAJOR,
		       STATE_MINOR, (unsigned long long)st.created, content, st.n);
		coord_print_text(stdout, t, p, st.n);
	}
	free(t);
	free(p);
	state_free(&st);
	return 0;
}

enum mode {
	MODE_INSPECT = 1,
	MODE_PREPARE,
	MODE_RESTORE,
	MODE_ABORT,
	MODE_INSPECT_STATE,
	OPT_PROC_ROOT,
	OPT_CONTROL_DIR,
	OPT_JSON,
	OPT_PROCESS,
	OPT_TIMEOUT,
	OPT_HELP,
	OPT_DIR,
	OPT_CONTENT,
	OPT_REQUIRE_STATE
};

/* The command line. */
struct cli {
	enum mode mode;
	bool json, require_state, help;
	int timeout_ms;
	enum proto_content content;
	const char *proc_root, *control_dir, *dir;
	struct coord_target *targets;
	size_t ntargets;
};

/* --process OBS NS (the second PID is the next argument). 0 or an exit code. */
static int add_process(struct cli *c, int argc, char **argv)
{
	struct coord_target t = {0};
	if (optind >= argc || parse_int(optarg, &t.obs) < 0 || parse_int(argv[optind], &t.ns) < 0)
		return REFUSE(EX_USAGE, "--process needs two PIDs: OBS NS");
	optind++;
	struct coord_target *grown = realloc(c->targets, (c->ntargets + 1) * sizeof(*grown));
	if (!grown)
		return REFUSE(EX_LEFT_RUNNING, "out of memory");
	c->targets = grown;
	c->targets[c->ntargets++] = t;
	return 0;
}

/* argv into c: 0, or an exit code (said). */
static int parse(int argc, char **argv, struct cli *c)
{
	static const struct option opts[] = {
		{"inspect", no_argument, NULL, MODE_INSPECT},
		{"prepare", no_argument, NULL, MODE_PREPARE},
		{"restore", no_argument, NULL, MODE_RESTORE},
		{"abort", no_argument, NULL, MODE_ABORT},
		{"inspect-state", required_argument, NULL, MODE_INSPECT_STATE},
		{"proc-root", required_argument, NULL, OPT_PROC_ROOT},
		{"control-dir", required_argument, NULL, OPT_CONTROL_DIR},
		{"json", no_argument, NULL, OPT_JSON},
		{"process", required_argument, NULL, OPT_PROCESS},
		{"timeout", required_argument, NULL, OPT_TIMEOUT},
		{"help", no_argument, NULL, OPT_HELP},
		{"checkpoint-dir", required_argument, NULL, OPT_DIR},
		{"content", required_argument, NULL, OPT_CONTENT},
		{"require-state", no_argument, NULL, OPT_REQUIRE_STATE},
		{0, 0, 0, 0},
	};
	*c = (struct cli){.timeout_ms = PROTO_STEP_TIMEOUT_MS,
			  .content = PROTO_CONTENT_HOST,
			  .proc_root = "/proc",
			  .control_dir = control_dir_from_env()};
	int o, rc = 0;
	while (rc == 0 && (o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case MODE_INSPECT:
		case MODE_PREPARE:
		case MODE_RESTORE:
		case MODE_ABORT: c->mode = (enum mode)o; break;
		case MODE_INSPECT_STATE:
			c->mode = MODE_INSPECT_STATE;
			c->dir = optarg;
			break;
		case OPT_DIR: c->dir = optarg; break;
		case OPT_REQUIRE_STATE: c->require_state = true; break;
		case OPT_CONTENT:
			c->content = proto_content_parse(optarg);
			if (!c->content)
				rc = REFUSE(EX_USAGE, "--content %s: use host, file or native", optarg);
			break;
		case OPT_PROC_ROOT: c->proc_root = optarg; break;
		case OPT_CONTROL_DIR: c->control_dir = optarg; break;
		case OPT_JSON: c->json = true; break;
		case OPT_TIMEOUT:
			if (parse_int(optarg, &c->timeout_ms) < 0)
				rc = REFUSE(EX_USAGE, "--timeout %s: not a positive number of milliseconds", optarg);
			break;
		case OPT_PROCESS: rc = add_process(c, argc, argv); break;
		case OPT_HELP: c->help = true; break;
		default: usage(stderr); rc = EX_USAGE;
		}
	}
	if (rc == 0 && optind < argc)
		rc = REFUSE(EX_USAGE, "unexpected argument '%s'", argv[optind]);
	if (rc == 0 && !c->mode && !c->help)
		rc = EX_USAGE, usage(stderr);
	return rc;
}

/* --prepare, --restore, --abort: the coordinator library's lifecycle on the
 * participants, holding their lock. */
static int cmd_lifecycle(struct cli *c)
{
	struct coord_options o = {.timeout_ms = c->timeout_ms,
				  .content = c->content,
				  .dir = c->dir,
				  .require_state = c->require_state,
				  .on_stage = print_stage,
				  .on_warning = print_warning};
	/* One command per tree (DESIGN.md §9); a run directory that cannot be had
	 * (a read-only /run in a container) only costs the protection. */
	pid_t *pids = calloc(c->ntargets, sizeof(*pids));
	for (size_t i = 0; pids && i < c->ntargets; i++)
		pids[i] = *c->proc_root ? c->targets[i].obs : c->targets[i].ns;
	char holder[64], err[PATH_MAX + 256];
	snprintf(holder, sizeof(holder), "snapshot-cuda-vmm --%s",
		 c->mode == MODE_PREPARE   ? "prepare"
		 : c->mode == MODE_RESTORE ? "restore"
					   : "abort");
	struct tree_lock lock = {.dirfd = -1};
	int lrc = pids ? tree_lock_take(&lock, *c->proc_root ? c->proc_root : "/proc", pids, c->ntargets, holder, err,
					sizeof(err))
		       : -ENOMEM;
	free(pids);
	if (lrc == -EBUSY)
		return REFUSE(EX_BUSY, "%s; nothing done", err);
	if (lrc < 0)
		say(LOG_WARN, "the participants are not locked against another command: %s",
		    lrc == -ENOMEM ? "out of memory" : err);
	struct coord_report r;
	if (c->mode == MODE_PREPARE)
		catch_signals();
	int rc = c->mode == MODE_PREPARE   ? coord_prepare(c->targets, c->ntargets, &o, &r)
		 : c->mode == MODE_RESTORE ? coord_restore(c->targets, c->ntargets, &o, &r)
					   : coord_abort(c->targets, c->ntargets, &o, &r);
	if (c->mode == MODE_PREPARE && rc == 0 && caught) {
		/* Interrupted: abort what was prepared, as if the prepare had failed. */
		say(LOG_ERROR, "%s during prepare: rebuilding every participant", strsignal(caught));
		struct coord_report ar;
		int arc = coord_abort(c->targets, c->ntargets, &o, &ar);
		if (c->json)
			json_emit(stdout, coord_report_json(&ar));
		if (arc < 0)
			say(LOG_ERROR, "abort failed: %s", ar.error);
		tree_lock_release(&lock);
		return arc < 0 ? EX_TERMINATED : EX_LEFT_RUNNING;
	}
	if (c->json)
		json_emit(stdout, coord_report_json(&r));
	if (rc < 0)
		say(LOG_ERROR, "%s failed: %s", r.op, r.error);
	tree_lock_release(&lock);
	if (rc == 0)
		return 0;
	return c->mode == MODE_PREPARE && (r.aborted || r.unchanged) ? EX_LEFT_RUNNING : EX_TERMINATED;
}

/* --inspect: every participant's live records. */
static int cmd_inspect(struct cli *c)
{
	struct topo_participant *parts = calloc(c->ntargets, sizeof(*parts));
	if (!parts)
		return REFUSE(EX_LEFT_RUNNING, "out of memory");
	int status = 0;
	for (size_t i = 0; i < c->ntargets; i++) {
		char err[1200];
		if (coord_inspect(&c->targets[i], c->timeout_ms, &parts[i], err, sizeof(err)) != PROTO_OK) {
			status = REFUSE(EX_LEFT_RUNNING, "%s", err);
		}
	}
	if (status == 0 && c->json)
		json_emit(stdout, coord_topology_json(c->targets, parts, c->ntargets));
	else if (status == 0)
		coord_print_text(stdout, c->targets, parts, c->ntargets);
	for (size_t i = 0; i < c->ntargets; i++)
		topo_free(&parts[i]);
	free(parts);
	return status;
}

/* --inspect-state DIR: a state file's records. */
static int cmd_inspect_state(struct cli *c)
{
	return inspect_state(c->dir, c->json);
}

/* The commands: what each needs, and who runs it. */
static const struct command {
	enum mode mode;
	const char *name;
	bool participants, dir; /* needs --process, --checkpoint-dir */
	int (*run)(struct cli *c);
} commands[] = {
	{MODE_INSPECT, "inspect", true, false, cmd_inspect},
	{MODE_PREPARE, "prepare", true, true, cmd_lifecycle},
	{MODE_RESTORE, "restore", true, true, cmd_lifecycle},
	{MODE_ABORT, "abort", true, false, cmd_lifecycle},
	{MODE_INSPECT_STATE, "inspect-state", false, false, cmd_inspect_state},
};

static int run(int argc, char **argv)
{
	struct cli c;
	int rc = parse(argc, argv, &c);
	if (rc == 0 && c.help)
		usage(stdout);
	const struct command *cmd = NULL;
	for (size_t i = 0; rc == 0 && !c.help && i < sizeof(commands) / sizeof(commands[0]); i++)
		if (commands[i].mode == c.mode)
			cmd = &commands[i];
	if (cmd && cmd->participants && !c.ntargets)
		rc = REFUSE(EX_USAGE, "at least one --process OBS NS is needed");
	else if (cmd && cmd->dir && !c.dir)
		rc = REFUSE(EX_USAGE, "--%s needs --checkpoint-dir DIR", cmd->name);
	for (size_t i = 0; rc == 0 && cmd && cmd->participants && i < c.ntargets; i++) {
		struct coord_target *t = &c.targets[i];
		if (coord_endpoint_path(c.proc_root, c.control_dir, t->obs, t->ns, t->endpoint, sizeof(t->endpoint)) <
		    0)
			rc = REFUSE(EX_USAGE, "participant %d (ns %d): endpoint path too long", t->obs, t->ns);
	}
	if (rc == 0 && cmd)
		rc = cmd->run(&c);
	free(c.targets);
	return rc;
}

int main(int argc, char **argv)
{
	if (tool_start("snapshot-cuda-vmm"))
		return EX_USAGE;
	return fd_check_end("snapshot-cuda-vmm", run(argc, argv));
}
