/* snapshot-cuda-vmm: the coordinator CLI (SYSTEM.md §3). A thin front over the
 * coordinator library. This version serves --inspect; --prepare, --restore and
 * --abort come with the lifecycle. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cusnap/coord.h"

#define EX_FAILED 1
#define EX_USAGE 64

static void usage(FILE *f)
{
	fprintf(f,
		"usage: snapshot-cuda-vmm --inspect [--proc-root P] [--control-dir D] [--json] [--timeout MS]\n"
		"                         --process OBS NS [--process OBS NS ...]\n"
		"\n"
		"  --inspect          print every participant's tracked CUDA VMM topology (read-only)\n"
		"  --process OBS NS   a participant: OBS its PID as seen here, NS its PID in its own namespace\n"
		"  --proc-root P      reach endpoints as P/OBS/root/<control-dir>/cuda-vmm-NS.sock\n"
		"                     (default /proc; \"\" means <control-dir>/cuda-vmm-NS.sock directly)\n"
		"  --control-dir D    the participants' control directory (default $SNAPSHOT_CONTROL_DIR,\n"
		"                     $DYN_SNAPSHOT_CONTROL_DIR, or /snapshot-control)\n"
		"  --json             one JSON object on stdout\n"
		"  --timeout MS       deadline per participant (default 10000)\n"
		"\n"
		"exit status: 0 success; 1 a participant failed (named on stderr); 64 usage error\n");
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

int main(int argc, char **argv)
{
	enum { OPT_INSPECT = 1, OPT_PROC_ROOT, OPT_CONTROL_DIR, OPT_JSON, OPT_PROCESS, OPT_TIMEOUT, OPT_HELP,
	       OPT_PREPARE, OPT_RESTORE, OPT_ABORT };
	static const struct option opts[] = {
		{"inspect", no_argument, NULL, OPT_INSPECT},
		{"proc-root", required_argument, NULL, OPT_PROC_ROOT},
		{"control-dir", required_argument, NULL, OPT_CONTROL_DIR},
		{"json", no_argument, NULL, OPT_JSON},
		{"process", required_argument, NULL, OPT_PROCESS},
		{"timeout", required_argument, NULL, OPT_TIMEOUT},
		{"help", no_argument, NULL, OPT_HELP},
		{"prepare", no_argument, NULL, OPT_PREPARE},
		{"restore", no_argument, NULL, OPT_RESTORE},
		{"abort", no_argument, NULL, OPT_ABORT},
		{0, 0, 0, 0},
	};
	const char *proc_root = "/proc", *control_dir = coord_default_control_dir();
	int mode = 0, json = 0, timeout_ms = 10000;
	struct coord_target *targets = NULL;
	size_t ntargets = 0;
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case OPT_INSPECT:
		case OPT_PREPARE:
		case OPT_RESTORE:
		case OPT_ABORT:
			mode = c;
			break;
		case OPT_PROC_ROOT: proc_root = optarg; break;
		case OPT_CONTROL_DIR: control_dir = optarg; break;
		case OPT_JSON: json = 1; break;
		case OPT_TIMEOUT:
			if (parse_int(optarg, &timeout_ms) < 0) {
				fprintf(stderr, "snapshot-cuda-vmm: --timeout %s: not a positive number of milliseconds\n", optarg);
				return EX_USAGE;
			}
			break;
		case OPT_PROCESS: {
			struct coord_target t = {0};
			if (optind >= argc || parse_int(optarg, &t.obs) < 0 || parse_int(argv[optind], &t.ns) < 0) {
				fprintf(stderr, "snapshot-cuda-vmm: --process needs two PIDs: OBS NS\n");
				return EX_USAGE;
			}
			optind++;
			struct coord_target *grown = realloc(targets, (ntargets + 1) * sizeof(*grown));
			if (!grown) {
				fprintf(stderr, "snapshot-cuda-vmm: out of memory\n");
				return EX_FAILED;
			}
			targets = grown;
			targets[ntargets++] = t;
			break;
		}
		case OPT_HELP:
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "snapshot-cuda-vmm: unexpected argument '%s'\n", argv[optind]);
		return EX_USAGE;
	}
	if (mode != OPT_INSPECT) {
		if (mode)
			fprintf(stderr, "snapshot-cuda-vmm: --%s is not available in this version (only --inspect)\n",
				mode == OPT_PREPARE ? "prepare" : mode == OPT_RESTORE ? "restore" : "abort");
		else
			usage(stderr);
		return EX_USAGE;
	}
	if (!ntargets) {
		fprintf(stderr, "snapshot-cuda-vmm: --inspect needs at least one --process OBS NS\n");
		return EX_USAGE;
	}
	struct topo_participant *parts = calloc(ntargets, sizeof(*parts));
	if (!parts) {
		fprintf(stderr, "snapshot-cuda-vmm: out of memory\n");
		return EX_FAILED;
	}
	int status = 0;
	for (size_t i = 0; i < ntargets; i++) {
		char err[1200];
		if (coord_endpoint_path(proc_root, control_dir, targets[i].obs, targets[i].ns, targets[i].endpoint,
					sizeof(targets[i].endpoint)) < 0) {
			fprintf(stderr, "snapshot-cuda-vmm: participant %d (ns %d): endpoint path too long\n", targets[i].obs,
				targets[i].ns);
			status = EX_FAILED;
			continue;
		}
		if (coord_inspect(&targets[i], timeout_ms, &parts[i], err, sizeof(err)) != PROTO_OK) {
			fprintf(stderr, "snapshot-cuda-vmm: %s\n", err);
			status = EX_FAILED;
		}
	}
	if (status == 0) {
		if (json)
			coord_print_json(stdout, targets, parts, ntargets);
		else
			coord_print_text(stdout, targets, parts, ntargets);
	}
	for (size_t i = 0; i < ntargets; i++)
		topo_free(&parts[i]);
	free(parts);
	free(targets);
	return status;
}
