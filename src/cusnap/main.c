/* SPDX-License-Identifier: MIT */
/* cusnap: the node tool (DESIGN.md §9). This file parses the command line and
 * dispatches; each command lives in a file of its own, and its row below says
 * what it takes and how its usage line reads. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/fault.h"
#include "cusnap.h"
#include "cusnap/control.h"
#include "cusnap/fdcheck.h"
#include "cusnap/json.h"
#include "cusnap/request.h"

/* Every option of every command, once: its name, whether it takes an
 * argument, and its letter for take(). A command's row names those it takes as
 * a mask of these (O(PID) | ...): a misspelt option does not compile. */
#define CUSNAP_OPTIONS(X)                                                   \
	X(PID, "pid", required_argument, 'p')                               \
	X(DIR, "dir", required_argument, 'd')                               \
	X(CONTENT, "content", required_argument, 'c')                       \
	X(JSON, "json", no_argument, 'j')                                   \
	X(TIMEOUT, "timeout", required_argument, 't')                       \
	X(CONTROL_DIR, "control-dir", required_argument, 'C')               \
	X(HELP, "help", no_argument, 'h')                                   \
	X(LEAVE_RUNNING, "leave-running", no_argument, 'L')                 \
	X(CRIU, "criu", required_argument, 'R')                             \
	X(WAIT_READY, "wait-ready", no_argument, 'W')                       \
	X(DEVICE_MAP, "device-map", required_argument, 'M')                 \
	X(PROCESSES, "processes", required_argument, 'P')                   \
	X(SIZE, "size", required_argument, 'S')                             \
	X(IN_PLACE, "in-place", no_argument, 'I')                           \
	X(KEEP, "keep", required_argument, 'K')                             \
	X(DISCARD_STATE, "discard-state", no_argument, 'D')                 \
	X(REQUIRE_INTERPOSER, "require-interposer", no_argument, 'N')       \
	X(JOB_FILE, "job-file", required_argument, 'J')                     \
	X(LAUNCH_JOB, "launch-job", no_argument, 'G')                       \
	X(TCP_ESTABLISHED, "tcp-established", no_argument, 'T')             \
	X(TCP_CLOSE, "tcp-close", no_argument, 'y')                         \
	X(UNLOCK_NETWORK, "unlock-network", no_argument, 'u')               \
	X(CRIU_CONFIG, "criu-config", required_argument, 'F')               \
	X(GROUP, "group", required_argument, 'g')                           \
	X(MEMBERS, "members", required_argument, 'm')                       \
	X(ETCD, "etcd", required_argument, 'e')                             \
	X(GROUP_TIMEOUT, "group-timeout", required_argument, 'o')           \
	X(MEMBER, "member", required_argument, 'n')                         \
	X(ETCD_CACERT, "etcd-cacert", required_argument, 'A')               \
	X(ETCD_CERT, "etcd-cert", required_argument, 'B')                   \
	X(ETCD_KEY, "etcd-key", required_argument, 'E')                     \
	X(ETCD_USER, "etcd-user", required_argument, 'U')                   \
	X(ETCD_PASSWORD_FILE, "etcd-password-file", required_argument, 'X') \
	X(QUIET, "quiet", no_argument, 'q')                                 \
	X(VERIFY, "verify", no_argument, 'V')                               \
	X(METRICS_DIR, "metrics-dir", required_argument, 'Z')

enum option_id {
#define X(id, name, arg, letter) OPTION_##id,
	CUSNAP_OPTIONS(X)
#undef X
		OPTION_COUNT
};
_Static_assert(OPTION_COUNT <= 64, "a command's options are a 64-bit mask");
#define O(id) (1ull << OPTION_##id)
/* What every command that works with a group takes. */
#define GROUP_OPTIONS                                                                                   \
	(O(GROUP) | O(MEMBERS) | O(ETCD) | O(ETCD_CACERT) | O(ETCD_CERT) | O(ETCD_KEY) | O(ETCD_USER) | \
	 O(ETCD_PASSWORD_FILE) | O(GROUP_TIMEOUT) | O(MEMBER))

struct command {
	const char *name;
	int (*run)(const struct args *a);
	unsigned long long takes; /* its options, a mask of O(...) */
	const char *usage;        /* its usage line, after the name */
	const char *help;         /* what it does */
};

static const struct command commands[] = {
	{"run", cmd_run, O(CONTROL_DIR) | O(LAUNCH_JOB), "[--control-dir DIR] [--launch-job] -- PROGRAM [ARG...]",
	 "start PROGRAM under the CUDA VMM interposer (snapshot-cuda-vmm-launch); --launch-job: in\n"
	 "a new checkpoint job (CUDA_CHECKPOINT_JOB_FILE; through NVIDIA's cuda-checkpoint when it\n"
	 "is on PATH), which driver 610 needs to checkpoint native legacy IPC"},
	{"checkpoint", cmd_checkpoint,
	 O(PID) | O(DIR) | O(LEAVE_RUNNING) | O(CONTENT) | O(CRIU) | O(WAIT_READY) | O(REQUIRE_INTERPOSER) | O(JSON) |
		 O(TIMEOUT) | O(CONTROL_DIR) | O(JOB_FILE) | O(TCP_ESTABLISHED) | O(TCP_CLOSE) | O(CRIU_CONFIG) |
		 GROUP_OPTIONS | O(QUIET) | O(METRICS_DIR),
	 "--pid PID --dir DIR [--leave-running] [--content file|host|native]\n"
	 "            [--criu PATH] [--wait-ready] [--require-interposer] [--job-file F]\n"
	 "            [--tcp-established | --tcp-close] [--criu-config FILE] [GROUP] [--json] [--quiet]\n"
	 "            [--metrics-dir DIR]",
	 "dump the process tree rooted at PID to DIR with CRIU: save every allocation the interposer\n"
	 "tracks (shared and private; --content file, the default, writes them beside the images),\n"
	 "lock and checkpoint every CUDA process natively (what the interposer does not track:\n"
	 "contexts, modules, memory without the POSIX FD handle type, pools), dump; the tree is\n"
	 "gone afterwards unless --leave-running (then it is resumed in place and\n"
	 "snapshot-complete is written);\n"
	 "--tcp-established: CRIU dumps the tree's established TCP connections (NCCL's\n"
	 "bootstrap keeps some between ranks) and the restore brings them back, CRIU's network\n"
	 "lock holding them meanwhile (recorded: see inspect --unlock-network);\n"
	 "--tcp-close: the connections are dumped closed and come back closed (no lock: for a\n"
	 "checkpoint meant to move elsewhere);\n"
	 "--criu-config FILE: further CRIU options (CRIU's own --config file; yours or root's,\n"
	 "writable by no one else)"},
	{"restore", cmd_restore,
	 O(DIR) | O(DEVICE_MAP) | O(CRIU) | O(JSON) | O(TIMEOUT) | O(JOB_FILE) | O(CRIU_CONFIG) | GROUP_OPTIONS |
		 O(QUIET) | O(METRICS_DIR),
	 "--dir DIR [--device-map auto|OLD=NEW,...] [--criu PATH] [--job-file F] [--criu-config FILE]\n"
	 "            [GROUP] [--json] [--quiet] [--metrics-dir DIR]",
	 "restore DIR with CRIU, then the GPU state (--device-map remaps GPUs: OLD and NEW GPU UUIDs or\n"
	 "ordinals, every GPU of the checkpoint named once; auto: those here keep theirs, the others\n"
	 "go in order onto the GPUs left) and the shared memory, then write restore-complete"},
	{"suspend", cmd_suspend,
	 O(PID) | O(DIR) | O(CONTENT) | O(REQUIRE_INTERPOSER) | O(JSON) | O(TIMEOUT) | O(CONTROL_DIR) | O(JOB_FILE) |
		 GROUP_OPTIONS | O(QUIET) | O(METRICS_DIR),
	 "--pid PID [--dir DIR] [--content host|file|native] [--require-interposer] [--job-file F]\n"
	 "            [GROUP] [--json] [--quiet] [--metrics-dir DIR]",
	 "release all GPU memory of the process tree rooted at PID, in place: prepare shared\n"
	 "VMM memory (when the tree runs under the interposer), then lock and checkpoint\n"
	 "every CUDA process natively; the state goes to DIR (default a private directory\n"
	 "under /run/cusnap for root, printed on stderr)"},
	{"resume", cmd_resume,
	 O(PID) | O(DIR) | O(DISCARD_STATE) | O(JSON) | O(TIMEOUT) | O(CONTROL_DIR) | O(JOB_FILE) | GROUP_OPTIONS |
		 O(QUIET) | O(METRICS_DIR),
	 "--pid PID [--dir DIR] [--discard-state] [--job-file F] [GROUP] [--json] [--quiet]\n"
	 "            [--metrics-dir DIR]",
	 "bring a suspended tree back, or finish what an interrupted command left: native\n"
	 "restore and unlock, then rebuild the sharing (--discard-state: without the state\n"
	 "file, from each process's own records)"},
	{"inspect", cmd_inspect,
	 O(PID) | O(DIR) | O(JSON) | O(TIMEOUT) | O(CONTROL_DIR) | O(GROUP) | O(ETCD) | O(ETCD_CACERT) | O(ETCD_CERT) |
		 O(ETCD_KEY) | O(ETCD_USER) | O(ETCD_PASSWORD_FILE) | O(UNLOCK_NETWORK) | O(DEVICE_MAP) | O(VERIFY),
	 "(--pid PID | --dir DIR [--device-map auto|OLD=NEW,...] [--unlock-network] [--verify] |\n"
	 "             --group NAME --etcd URL[,URL...] [--etcd-cacert F] [--etcd-cert F --etcd-key F]\n"
	 "             [--etcd-user U --etcd-password-file F]) [--json]",
	 "show the tree's CUDA processes and what they share, a command working on it, a\n"
	 "checkpoint directory (whether it restores here, with --device-map as a restore would take\n"
	 "it; the network lock its --tcp-established dump left, which --unlock-network removes where\n"
	 "it was made; --verify: every byte of its images and file content's files against the\n"
	 "manifest's digests, which a restore reads only as it copies them back), or a group's\n"
	 "members and its operations' results"},
	{"demo", cmd_demo, O(PROCESSES) | O(SIZE) | O(IN_PLACE) | O(KEEP) | O(CRIU) | O(TIMEOUT),
	 "[--processes N] [--size BYTES] [--in-place] [--keep DIR] [--criu PATH]",
	 "run the example process group under the interposer, checkpoint, kill and restore it\n"
	 "(on cuemu when there is no GPU) and print the phases"},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const struct option options[] = {
#define X(id, name, arg, letter) {name, arg, NULL, letter},
	CUSNAP_OPTIONS(X)
#undef X
		{0, 0, 0, 0},
};

static void usage(FILE *f)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "%s cusnap %s %s\n", i ? "      " : "usage:", commands[i].name, commands[i].usage);
	fputc('\n', f);
	for (size_t i = 0; i < NCOMMANDS; i++) {
		fprintf(f, "  %-10s ", commands[i].name);
		for (const char *p = commands[i].help; *p; p++)
			fputs(*p == '\n' ? "\n             " : (char[]){*p, '\0'}, f);
		fputc('\n', f);
	}
	fprintf(f, "\n"
		   "options: --json (summary on stdout)\n"
		   "         --quiet: no progress lines (errors and warnings only); on a terminal a long step\n"
		   "         shows one line that moves (time, bytes, rate), elsewhere a plain line each second\n"
		   "         --metrics-dir DIR: cusnap.prom holds counters by operation and result, failures by\n"
		   "         reason, each phase's time and bytes, the last success per tree or checkpoint\n"
		   "         --timeout and --control-dir go with every command that works on a tree (run takes\n"
		   "         --control-dir only); any other option a command's line does not show is refused (64).\n"
		   "         DIR, and every directory on the way to it, must be owned by you or root and\n"
		   "         writable by no one else (ssh's StrictModes; /tmp's sticky bit is accepted on the way).\n"
		   "         With a checkpoint job (--job-file), cusnap joins it, takes one process at a time in\n"
		   "         the job's order, and keeps a copy of the file with the checkpoint.\n"
		   "         GROUP: --group NAME --members N --etcd URL[,URL...] [--group-timeout MS]\n"
		   "         [--member NAME] [--etcd-cacert F] [--etcd-cert F --etcd-key F]\n"
		   "         [--etcd-user NAME --etcd-password-file F]: one worker over N nodes, each running this "
		   "command on its own\n"
		   "         tree; they meet in etcd (its v3 JSON gateway) and none crosses its destructive\n"
		   "         boundary (suspend, checkpoint: the native checkpoint; restore: restore-complete)\n"
		   "         until every one is ready; a member that fails, goes away or does not come within\n"
		   "         --group-timeout (default --timeout) makes every member undo (exit 1, or kill the\n"
		   "         restored tree). Past the boundary each member reports its own result; every\n"
		   "         member's is printed (--json: one object) and kept in etcd for an hour. --member\n"
		   "         names this node in the group (default HOST:PID, or HOST:DIR for restore).\n"
		   "         One operation per group at a time: another is refused (75); etcd unreachable: 69.\n"
		   "         etcd as production runs it: https:// URLs with --etcd-cacert FILE (the CA of etcd's\n"
		   "         certificate), --etcd-cert FILE --etcd-key FILE (a client certificate, for etcd's\n"
		   "         --client-cert-auth), --etcd-user NAME --etcd-password-file FILE (etcd's\n"
		   "         authentication; the file yours or root's, readable by no one else); plain http://\n"
		   "         without a user is warned about: anyone who can reach etcd can steer the group.\n"
		   "         SIGINT/SIGTERM/SIGHUP at the boundary: this member undoes at once, the others too.\n"
		   "environment: CUSNAP_RUN_DIR: the run directory (locks, state notes) instead of /run/cusnap (root)\n"
		   "         or $XDG_RUNTIME_DIR/cusnap or /tmp/cusnap-UID; root's and a tree owner's commands\n"
		   "         see each other's locks\n"
		   "         CUSNAP_CUDA_CHECKPOINT: NVIDIA's cuda-checkpoint for run --launch-job (default: the\n"
		   "         first on PATH; empty: none, cusnap makes the job file itself)\n"
		   "\n"
		   "settings (the option where a command takes it, the CRIU plugin's key, the environment\n"
		   "variable; an option wins over the environment):\n");
	settings_help(f);
	fprintf(f, "\n"
		   "exit status: 0 success; 1 failed, the workload was left or put back running as before;\n"
		   "2 failed, the workload was terminated or its state is unknown; 64 usage error (a directory\n"
		   "others control, another user's tree and CRIU without root included); 69 a required\n"
		   "component is missing (the CUDA driver, CRIU), with the fix named; 75 another command is\n"
		   "working on the tree (nothing done)\n");
}

static bool takes(const struct command *c, int index)
{
	return index >= 0 && index < OPTION_COUNT && (c->takes >> index & 1);
}

/* A whole number from lo to hi, or -1. */
static long number(const char *s, long lo, long hi)
{
	char *end;
	long v = strtol(s, &end, 10);
	return end != s && !*end && v >= lo && v <= hi ? v : -1;
}

/* --name's argument, a whole number from lo to hi, into *out: 0, or 64 (said). */
static int int_option(const char *name, const char *arg, long lo, long hi, int *out)
{
	long v = number(arg, lo, hi);
	if (v < 0)
		return fail(EX_USAGE, "--%s %s: not a number from %ld to %ld", name, arg, lo, hi);
	*out = (int)v;
	return 0;
}

/* A path option made absolute (CRIU runs in its image directory, so a
 * relative --dir would name another place there) into out: 0, or 64 (said). */
static int absolute_into(const char *name, const char *arg, char out[PATH_MAX])
{
	char cwd[PATH_MAX];
	if (!*arg)
		return fail(EX_USAGE, "--%s: an empty path", name);
	if (arg[0] != '/' && !getcwd(cwd, sizeof(cwd)))
		return fail(EX_USAGE, "--%s %s: a relative path, and the current directory is unknown: %s", name, arg,
			    strerror(errno));
	int n = arg[0] == '/' ? snprintf(out, PATH_MAX, "%s", arg) : snprintf(out, PATH_MAX, "%s/%s", cwd, arg);
	if (n < 0 || n >= PATH_MAX)
		return fail(EX_USAGE, "--%s %s: the path is too long", name, arg);
	return 0;
}

/* The same, kept for the process's life in one of a few slots (an option
 * given again takes another). */
static int absolute(const char *name, const char *arg, const char **out)
{
	static char kept[8][PATH_MAX];
	static size_t used;
	if (used == sizeof(kept) / sizeof(kept[0]))
		return fail(EX_USAGE, "--%s %s: too many path options", name, arg);
	int rc = absolute_into(name, arg, kept[used]);
	if (rc == 0)
		*out = kept[used++];
	return rc;
}

/* --option ARG for a row of settings.def (a path made absolute first): 0, or
 * 64 (said). */
static int setting_option_take(const struct setting *d, const char *name, const char *arg, struct settings *s)
{
	char path[PATH_MAX], why[256];
	const char *value = setting_is_flag(d) ? "yes" : arg;
	if (setting_is_path(d) && arg[0] != '/') {
		int rc = absolute_into(name, arg, path);
		if (rc)
			return rc;
		value = path;
	}
	if (setting_set(s, d, value, why, sizeof(why)) < 0)
		return fail(EX_USAGE, "--%s %s: %s", name, arg ? arg : "", why);
	return 0;
}

/* The option c with its argument into a (those of settings.def go by
 * setting_option_take); 0 or an exit code. */
static int take(int c, const char *arg, struct args *a)
{
	long v;
	switch (c) {
	case 'p':
		if ((v = number(arg, 1, 1 << 30)) < 0)
			return fail(EX_USAGE, "--pid %s: not a PID", arg);
		a->pid = (pid_t)v;
		break;
	case 'd': return absolute("dir", arg, &a->dir);
	case 'j': a->json = true; break;
	case 'L': a->leave_running = true; break;
	case 'W': a->wait_ready = true; break;
	case 'P': return int_option("processes", arg, 1, 64, &a->processes);
	case 'D': a->discard_state = true; break;
	case 'G': a->launch_job = true; break;
	case 'T': a->tcp_established = true; break;
	case 'y': a->tcp_close = true; break;
	case 'u': a->unlock_network = true; break;
	case 'V': a->verify = true; break;
	case 'F': return absolute("criu-config", arg, &a->criu_config);
	case 'S': {
		char *end;
		a->size = strtoull(arg, &end, 0);
		if (*end == 'M' || *end == 'm')
			a->size <<= 20, end++;
		else if (*end == 'G' || *end == 'g')
			a->size <<= 30, end++;
		if (*end || !a->size)
			return fail(EX_USAGE, "--size %s: a number of bytes (K/M/G suffixes: M, G)", arg);
		break;
	}
	case 'I': a->in_place = true; break;
	case 'q': a->quiet = true; break;
	case 'K': return absolute("keep", arg, &a->keep);
	default: usage(stderr); return EX_USAGE;
	}
	return 0;
}

/* --metrics-dir: the operation's result for node_exporter (a warning when it
 * cannot be written: the operation's own result stands). */
static void metrics_after(const struct args *a, const char *op, int rc, double seconds)
{
	char target[PATH_MAX + 32], why[PATH_MAX + 200];
	if (a->dir && (!strcmp(op, "checkpoint") || !strcmp(op, "restore")))
		snprintf(target, sizeof(target), "%s", a->dir);
	else
		snprintf(target, sizeof(target), "pid %d", (int)a->pid);
	if (metrics_write(a->s->metrics_dir, op, rc, seconds, target, why, sizeof(why)) < 0)
		voice(VOICE_WARN, "metrics not written: %s", why);
}

/* The command line's command, run; with --json, its error too as a JSON
 * object on stdout (*json). */
static int run(int argc, char **argv, bool *json)
{
	if (argc < 2) {
		usage(stderr);
		return EX_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return EX_OK;
	}
	const struct command *cmd = NULL;
	for (size_t i = 0; i < NCOMMANDS && !cmd; i++)
		if (!strcmp(argv[1], commands[i].name))
			cmd = &commands[i];
	if (!cmd)
		return fail(EX_USAGE, "unknown command '%s' (cusnap --help)", argv[1]);
	struct settings s = settings_default();
	struct args a = {.s = &s, .processes = 3, .size = 64ull << 20};
	int c, index, rc;
	char why[PATH_MAX + 256];
	if (settings_environment(&s, environ, why, sizeof(why)) < 0)
		return fail(EX_USAGE, "the environment: %s", why);
	optind = 2;
	while ((c = getopt_long(argc, argv, "+", options, &index)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return EX_OK;
		}
		if (c != '?' && !takes(cmd, index))
			return fail(EX_USAGE, "%s does not take --%s (cusnap --help)", cmd->name, options[index].name);
		const struct setting *d = c == '?' ? NULL : setting_by_option(options[index].name);
		if ((rc = d ? setting_option_take(d, options[index].name, optarg, &s) : take(c, optarg, &a)))
			return rc;
		a.control_dir_given |= c == 'C';
	}
	if (!s.control_dir[0])
		snprintf(s.control_dir, sizeof(s.control_dir), "%s", control_dir_from_env());
	int fd = s.metrics_dir[0] ? dir_open_trusted(s.metrics_dir, false, why, sizeof(why)) : -1;
	if (s.metrics_dir[0] && fd < 0)
		return fail(EX_USAGE,
			    "--metrics-dir: %s (as ssh's StrictModes: owned by you or root, writable by no one else); "
			    "nothing done",
			    why);
	if (fd >= 0)
		close(fd);
	/* (--group and its kin, or CUSNAP_GROUP and its kin from the environment) */
	struct group_spec spec;
	int grouped = group_spec_from(&s, a.pid, a.dir, &spec, why, sizeof(why));
	if (grouped < 0)
		return fail(EX_USAGE, "%s", why);
	if (grouped && !(cmd->takes & O(GROUP)))
		return fail(EX_USAGE, "%s takes no group (CUSNAP_GROUP is set: unset it)", cmd->name);
	*json = a.json && !grouped; /* (a group prints its own result) */
	a.argc = argc - optind;
	a.argv = argv + optind;
	if (cmd->run != cmd_run && a.argc)
		return fail(EX_USAGE, "%s: unexpected argument '%s'", cmd->name, a.argv[0]);
	if (grouped && cmd->run == cmd_inspect)
		return group_inspect(&a, &spec);
	progress_quiet(a.quiet);
	double t0 = now_ms();
	rc = grouped ? group_run(cmd->run, &a, &spec, cmd->name) : cmd->run(&a);
	if (s.metrics_dir[0])
		metrics_after(&a, cmd->name, rc, (now_ms() - t0) / 1000.0);
	return rc;
}

/* The option list against the settings table (src/node/settings.def): each
 * setting's --option is one of CUSNAP_OPTIONS, taking a value unless the
 * setting is a flag. A row added to one and not the other fails every command
 * (and so every test that runs one) until both say the same. 0, or 70 (said). */
static int options_match_settings(void)
{
	bool flag;
	const char *name;
	for (size_t i = 0; (name = settings_option_at(i, &flag)); i++) {
		const struct option *o = options;
		while (*name && o->name && strcmp(o->name, name))
			o++;
		if (*name && !o->name)
			return fail(EX_SOFTWARE,
				    "internal: the setting --%s is not in CUSNAP_OPTIONS (src/cusnap/main.c)", name);
		if (*name && (o->has_arg == no_argument) != flag)
			return fail(EX_SOFTWARE, "internal: --%s takes %s in CUSNAP_OPTIONS, not in settings.def", name,
				    flag ? "a value" : "none");
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (tool_start("cusnap"))
		return EX_USAGE;
	if (options_match_settings())
		return EX_SOFTWARE;
	bool json = false;
	int rc = run(argc, argv, &json);
	if (rc && json)
		json_emit(stdout, json_pack("{s:b, s:i, s:o}", "ok", 0, "exit", rc, "error",
					    json_text(*report_error() ? report_error() : "failed")));
	return fd_check_end("cusnap", rc);
}
