/* SPDX-License-Identifier: MIT */
/* cusnap demo: the main job on the embedded default. Runs examples/vmm_group
 * under the interposer (on cuemu, or on the real driver when libcuda.so.1 is
 * one), checkpoints it with CRIU, kills it, restores it, lets it verify itself
 * and prints a table of phases. --in-place: suspend and resume instead. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cusnap.h"
#include "cusnap/control.h"

#define MiB (1024.0 * 1024.0)

/* Is libcuda.so.1, as this process would load it, a GPU driver (not cuemu)? */
static bool real_driver(char *name, size_t len)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return false;
	CUresult (*init)(unsigned) = NULL;
	CUresult (*dev_name)(char *, int, CUdevice) = NULL;
	*(void **)&init = dlsym(lib, "cuInit");
	*(void **)&dev_name = dlsym(lib, "cuDeviceGetName");
	bool gpu = init && dev_name && init(0) == CUDA_SUCCESS && dev_name(name, (int)len, 0) == CUDA_SUCCESS &&
		   strcmp(name, "cuemu") != 0;
	dlclose(lib);
	return gpu;
}

static int count_pass(const char *log, int *fails)
{
	FILE *f = fopen(log, "re");
	int pass = 0;
	*fails = 0;
	char line[1024];
	while (f && fgets(line, sizeof(line), f)) {
		pass += !strncmp(line, "PASS vmm_group", 14);
		*fails += !strncmp(line, "FAIL vmm_group", 14);
	}
	if (f)
		fclose(f);
	return pass;
}

static int wait_exit(pid_t pid, int timeout_ms)
{
	for (int waited = 0; waited <= timeout_ms; waited += 10) {
		int status;
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
		if (r < 0)
			return -1;
		usleep(10000);
	}
	return -2;
}

int cmd_demo(const struct args *a)
{
	int processes = a->processes;
	unsigned long long size = a->size;
	bool in_place = a->in_place;
	const char *keep = a->keep, *criu_arg = a->criu;
	char bin[PATH_MAX], emu[PATH_MAX + 16], group[PATH_MAX + 32], launcher[PATH_MAX + 32], gpu[128] = "";
	path_self_dir(bin, sizeof(bin));
	snprintf(emu, sizeof(emu), "%s/../emu", bin);
	snprintf(group, sizeof(group), "%s/../examples/vmm_group", bin);
	snprintf(launcher, sizeof(launcher), "%s/snapshot-cuda-vmm-launch", bin);
	if (processes < 1 || processes > 33)
		return fail(EX_USAGE, "--processes %d: between 1 and 33", processes);
	int allocs = 4;
	unsigned long long per = size / (unsigned long long)allocs;
	per = (per + (2u << 20) - 1) / (2u << 20) * (2u << 20);
	if (per < (4u << 20))
		per = 4u << 20;
	if (access(group, X_OK) != 0 || access(launcher, X_OK) != 0)
		return fail(EX_UNAVAILABLE, "%s or %s missing: run 'make' first", group, launcher);
	bool gpu_driver = real_driver(gpu, sizeof(gpu));
	if (!gpu_driver && !getenv("CUSNAP_DEMO_REEXEC")) {
		/* The emulator: the dynamic loader reads LD_LIBRARY_PATH at start, so run again with it. */
		setenv("LD_LIBRARY_PATH", emu, 1);
		setenv("CUSNAP_DEMO_REEXEC", "1", 1);
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		self[n > 0 ? n : 0] = '\0';
		char procs[16], bytes[32];
		snprintf(procs, sizeof(procs), "%d", processes);
		snprintf(bytes, sizeof(bytes), "%llu", size);
		const char *argv[16] = {self, "demo", "--processes", procs, "--size", bytes};
		int k = 6;
		if (in_place)
			argv[k++] = "--in-place";
		if (keep)
			argv[k++] = "--keep", argv[k++] = keep;
		if (criu_arg)
			argv[k++] = "--criu", argv[k++] = criu_arg;
		argv[k] = NULL;
		execv(self, (char *const *)argv);
		return fail(EX_UNAVAILABLE, "cannot re-run %s: %s", self, strerror(errno));
	}
	char work[PATH_MAX];
	if (keep) {
		snprintf(work, sizeof(work), "%s", keep);
		if (path_mkdirs(work) < 0)
			return fail(EX_USAGE, "--keep %s: cannot create it", keep);
	} else {
		snprintf(work, sizeof(work), "/tmp/cusnap-demo-XXXXXX");
		if (!mkdtemp(work))
			return fail(EX_LEFT_RUNNING, "cannot create a work directory");
	}
	char ctl[PATH_MAX + 16], ckpt[PATH_MAX + 16], log[PATH_MAX + 16];
	snprintf(ctl, sizeof(ctl), "%s/control", work);
	snprintf(ckpt, sizeof(ckpt), "%s/checkpoint", work);
	snprintf(log, sizeof(log), "%s/workload.log", work);
	path_mkdirs(ctl);
	setenv("SNAPSHOT_CONTROL_DIR", ctl, 1);
	settings.control_dir = strdup(ctl);
	/* Restored trees are reparented to us: we wait for them to verify. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	fprintf(stderr, "cusnap demo: %d processes sharing %d allocations of %.0f MiB on %s; work directory %s\n",
		processes, allocs, per / MiB, gpu_driver ? gpu : "the emulator (cuemu)", work);
	double t0 = now_ms(), start = t0;
	pid_t root = fork();
	if (root == 0) {
		setsid();
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int in = open("/dev/null", O_RDONLY);
		if (fd < 0 || in < 0)
			_exit(126);
		dup2(in, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		char w[16], n[16], s[32];
		snprintf(w, sizeof(w), "%d", processes - 1);
		snprintf(n, sizeof(n), "%d", allocs);
		snprintf(s, sizeof(s), "%llu", per);
		execl(launcher, launcher, group, "--workers", w, "--allocs", n, "--size", s, "--timeout", "300",
		      (char *)NULL);
		_exit(127);
	}
	char ready[PATH_MAX + 64];
	snprintf(ready, sizeof(ready), "%s/ready-for-snapshot", ctl);
	while (access(ready, F_OK) != 0) {
		if (now_ms() - t0 > 60000 || waitpid(root, NULL, WNOHANG) == root) {
			kill(root, SIGKILL);
			return fail(EX_TERMINATED, "the workload did not get ready (log: %s)", log);
		}
		usleep(10000);
	}
	double ms_ready = now_ms() - t0;
	struct checkpoint_result c = {0}, r = {0};
	int rc;
	double ms_kill = 0, ms_suspend = 0, ms_resume = 0;
	if (in_place) {
		t0 = now_ms();
		rc = cmd_suspend(&(struct args){.pid = root, .dir = ckpt, .content = PROTO_CONTENT_HOST});
		ms_suspend = now_ms() - t0;
		if (rc == EX_OK) {
			t0 = now_ms();
			rc = cmd_resume(&(struct args){.pid = root, .dir = ckpt});
			ms_resume = now_ms() - t0;
			char why[PATH_MAX + 256];
			if (rc == EX_OK && control_write(root, CONTROL_RESTORE_DONE, why, sizeof(why)) < 0)
				rc = fail(EX_TERMINATED, "cannot write %s", why);
		}
	} else {
		rc = cmd_checkpoint(&(struct args){.pid = root,
						   .dir = ckpt,
						   .content = PROTO_CONTENT_HOST,
						   .criu = criu_arg,
						   .result = &c});
		if (rc == EX_OK) {
			/* CRIU stopped the tree after the dump; reap all of it (the workers
			 * were reparented to us) so that its PIDs are free for the restore. */
			t0 = now_ms();
			kill(root, SIGKILL);
			while (waitpid(-1, NULL, 0) > 0)
				;
			ms_kill = now_ms() - t0;
			rc = cmd_restore(&(struct args){.dir = ckpt, .criu = criu_arg, .result = &r});
			root = r.restored_root;
		}
	}
	if (rc != EX_OK) {
		kill(root, SIGKILL);
		fprintf(stderr, "cusnap demo: failed (exit %d); the workload log is %s\n", rc, log);
		return rc;
	}
	t0 = now_ms();
	int status = wait_exit(root, 120000);
	double ms_verify = now_ms() - t0;
	int fails = 0, pass = count_pass(log, &fails);
	bool ok = status == 0 && pass == processes && !fails;
	double shared_mib = per * allocs / MiB;
	printf("\ncusnap demo: %d processes, %d shared allocations (%.0f MiB), %s, %s\n\n", processes, allocs,
	       shared_mib, gpu_driver ? gpu : "emulated GPUs (cuemu)",
	       in_place ? "suspended and resumed in place" : "CRIU checkpoint, kill, restore");
	printf("  %-34s %10s   %s\n", "phase", "time", "size");
	printf("  %-34s %8.1f ms\n", "start workload, wait until ready", ms_ready);
	if (in_place) {
		printf("  %-34s %8.1f ms   %.1f MiB device memory released\n", "suspend (prepare, lock, checkpoint)",
		       ms_suspend, shared_mib);
		printf("  %-34s %8.1f ms\n", "resume (restore, unlock, rebuild)", ms_resume);
	} else {
		printf("  %-34s %8.1f ms   %.1f MiB copied to host\n", "prepare shared memory (VMM)", c.ms_prepare,
		       c.bytes_copied / MiB);
		printf("  %-34s %8.1f ms\n", "native lock + checkpoint", c.ms_checkpoint);
		printf("  %-34s %8.1f ms   %.1f MiB of images\n", "CRIU dump", c.ms_dump, c.image_bytes / MiB);
		printf("  %-34s %8.1f ms\n", "kill the workload", ms_kill);
		printf("  %-34s %8.1f ms\n", "CRIU restore", r.ms_criu_restore);
		printf("  %-34s %8.1f ms\n", "native restore + unlock", r.ms_native_restore);
		printf("  %-34s %8.1f ms   %.1f MiB copied back\n", "rebuild shared memory (VMM)", r.ms_vmm_restore,
		       r.bytes_copied / MiB);
	}
	printf("  %-34s %8.1f ms   %d/%d processes PASS\n", "workload verifies itself", ms_verify, pass, processes);
	printf("  %-34s %8.1f ms\n\n", "total", now_ms() - start);
	printf("%s: every process checked its bytes, addresses, handles and live sharing after the restore\n",
	       ok ? "PASS" : "FAIL");
	if (!ok)
		fprintf(stderr, "cusnap demo: the workload reported failures (exit %d); its log: %s\n", status, log);
	if (!keep && ok) {
		char *argv[] = {"rm", "-rf", work, NULL};
		pid_t p = fork();
		if (p == 0) {
			execvp("rm", argv);
			_exit(127);
		}
		waitpid(p, NULL, 0);
	}
	return ok ? EX_OK : EX_TERMINATED;
}
