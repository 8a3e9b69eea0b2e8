/* SPDX-License-Identifier: MIT */
/* cusnap run: start a program under the CUDA VMM interposer's launcher. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/control.h"
#include "cusnap/paths.h"

/* NVIDIA's cuda-checkpoint: $CUSNAP_CUDA_CHECKPOINT ("" for none), else the first on PATH. */
static bool cuda_checkpoint_tool(char *out, size_t len)
{
	const char *given = getenv("CUSNAP_CUDA_CHECKPOINT");
	if (given) {
		snprintf(out, len, "%s", given);
		return *given && access(out, X_OK) == 0;
	}
	return path_search(getenv("PATH"), "cuda-checkpoint", X_OK, out, len);
}

/* A restore-complete left in the control directory releases a new workload
 * at once (it never parks, so it can never be checkpointed whole): removed
 * when no live workload uses the directory (no endpoint there answers), else
 * refused, naming the endpoint. 0, or the exit code (reported). */
static int stale_release(const char *dir)
{
	char why[PATH_MAX + 128];
	int dfd = control_dir_open_here(dir, why, sizeof(why));
	if (dfd < 0)
		return 0; /* (not there yet: the workload makes it) */
	struct stat st;
	int rc = 0;
	if (fstatat(dfd, CONTROL_RESTORE_DONE, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		close(dfd);
		return 0;
	}
	DIR *d = fdopendir(dup(dfd));
	struct dirent *e;
	int ns;
	while (rc == 0 && d && (e = readdir(d))) {
		char end[8];
		if (sscanf(e->d_name, "cuda-vmm-%d.sock%7s", &ns, end) != 1)
			continue;
		if (control_endpoint_stale(dfd, e->d_name) == -EBUSY)
			rc = fail(EX_BUSY,
				  "%s/%s is there and %s/%s answers: a workload runs with this control directory; one "
				  "started here would not wait for a restore (give it its own --control-dir); nothing "
				  "done",
				  dir, CONTROL_RESTORE_DONE, dir, e->d_name);
	}
	if (d)
		closedir(d);
	if (rc == 0) {
		if (unlinkat(dfd, CONTROL_RESTORE_DONE, 0) < 0 && errno != ENOENT)
			rc = fail(EX_LEFT_RUNNING, "cannot remove the stale %s/%s: %s; nothing done", dir,
				  CONTROL_RESTORE_DONE, strerror(errno));
		else
			voice(VOICE_INFO, "removed the stale %s/%s (an earlier restore's; no workload uses %s)", dir,
			      CONTROL_RESTORE_DONE, dir);
	}
	close(dfd);
	return rc;
}

/* A CUDA program started without a driver its loader can find exits 127 with
 * the loader's message alone: say what is missing before it runs (a warning:
 * the program may find it its own way). */
static void driver_reachable(const struct settings *s)
{
	static const char system_dirs[] = "/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib64:/usr/lib64:"
					  "/usr/local/lib:/lib:/usr/lib:/usr/lib/wsl/lib:/usr/local/nvidia/lib64";
	char found[PATH_MAX];
	if (s->libcuda[0] || path_search(getenv("LD_LIBRARY_PATH"), "libcuda.so.1", R_OK, found, sizeof(found)) ||
	    path_search(system_dirs, "libcuda.so.1", R_OK, found, sizeof(found)))
		return;
	FILE *f = popen("/sbin/ldconfig -p 2>/dev/null", "re");
	char line[512];
	bool cached = false;
	while (f && fgets(line, sizeof(line), f))
		cached |= strstr(line, "libcuda.so.1 ") != NULL;
	if (f)
		pclose(f);
	if (!cached)
		voice(VOICE_WARN,
		      "no libcuda.so.1 where the loader looks (LD_LIBRARY_PATH, the system's library "
		      "directories): a CUDA program will not start; install the NVIDIA driver, or without a "
		      "GPU put cuemu first on LD_LIBRARY_PATH (LD_LIBRARY_PATH=build/emu)");
}

/* A workload whose session leader is outside its PID namespace (started
 * under `unshare --pid` without setsid, or in a sandbox run that way) cannot
 * be dumped by CRIU: it gets a session of its own, and with it no controlling
 * terminal. Where that is refused (this process leads its process group: an
 * interactive shell's job) it is said. */
static void session_of_its_own(void)
{
	if (getsid(0) != 0)
		return;
	if (setsid() >= 0)
		voice(VOICE_INFO, "the workload starts a session of its own (its session's leader is outside its PID "
				  "namespace, where CRIU could not dump it)");
	else
		voice(VOICE_WARN,
		      "its session's leader is outside its PID namespace and it leads its process group, so "
		      "it cannot start a session of its own: CRIU will refuse to checkpoint it (start it "
		      "with setsid)");
}

int cmd_run(const struct args *a)
{
	int argc = a->argc;
	char **argv = a->argv;
	if (argc < 1)
		return fail(EX_USAGE,
			    "run: PROGRAM missing (cusnap run [--control-dir DIR] [--launch-job] -- PROGRAM [ARG...])");
	char self[PATH_MAX], launcher[PATH_MAX + 64];
	if (!path_self_dir(self, sizeof(self)))
		return fail(EX_UNAVAILABLE, "cannot find cusnap's own directory");
	snprintf(launcher, sizeof(launcher), "%s/snapshot-cuda-vmm-launch", self);
	if (access(launcher, X_OK) != 0)
		snprintf(launcher, sizeof(launcher), "/usr/local/bin/snapshot-cuda-vmm-launch");
	if (a->control_dir_given)
		setenv(CONTROL_DIR_VAR, a->s->control_dir, 1);
	int rc = stale_release(a->s->control_dir);
	if (rc)
		return rc;
	driver_reachable(a->s);
	session_of_its_own();
	char **args = calloc((size_t)argc + 4, sizeof(*args));
	if (!args)
		return fail(EX_LEFT_RUNNING, "out of memory");
	int n = 0;
	char tool[PATH_MAX];
	if (a->launch_job && cuda_checkpoint_tool(tool, sizeof(tool))) {
		/* NVIDIA's tool makes the job file as the driver wants it. */
		args[n++] = tool;
		args[n++] = "--launch-job";
	} else if (a->launch_job) {
		char why[256];
		if (job_launch(why, sizeof(why)) < 0) {
			free(args);
			return fail(EX_UNAVAILABLE, "run --launch-job: %s", why);
		}
	}
	args[n++] = launcher;
	for (int i = 0; i < argc; i++)
		args[n++] = argv[i];
	execv(args[0], args);
	int e = errno;
	free(args);
	return fail(EX_UNAVAILABLE, "cannot run %s: %s (run 'make' or 'make install')", launcher, strerror(e));
}
