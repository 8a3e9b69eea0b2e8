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
#include <stdarg.h>
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

/* One demo run: what it was asked, where it works, what it measured. */
struct demo {
	const struct args *a;
	struct settings s; /* the caller's, with the demo's control directory */
	int allocs;
	unsigned long long per; /* bytes per allocation */
	bool gpu_driver;
	char gpu[128], bin[PATH_MAX], work[PATH_MAX], ctl[PATH_MAX + 16], ckpt[PATH_MAX + 16], log[PATH_MAX + 16];
	pid_t root;
	struct checkpoint_result c, r;
	double start, ms_ready, ms_kill, ms_suspend, ms_resume, ms_verify;
};

/* On the emulator: run again with cuemu on LD_LIBRARY_PATH (the dynamic loader
 * reads it at start). Returns only on failure. */
static int demo_reexec(const struct demo *d)
{
	char emu[PATH_MAX + 16];
	snprintf(emu, sizeof(emu), "%s/../emu", d->bin);
	setenv("LD_LIBRARY_PATH", emu, 1);
	setenv("CUSNAP_DEMO_REEXEC", "1", 1);
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	char procs[16], bytes[32];
	snprintf(procs, sizeof(procs), "%d", d->a->processes);
	snprintf(bytes, sizeof(bytes), "%llu", d->a->size);
	const char *argv[16] = {self, "demo", "--processes", procs, "--size", bytes};
	int k = 6;
	if (d->a->in_place)
		argv[k++] = "--in-place";
	if (d->a->keep)
		argv[k++] = "--keep", argv[k++] = d->a->keep;
	if (d->a->s->criu[0])
		argv[k++] = "--criu", argv[k++] = d->a->s->criu;
	argv[k] = NULL;
	execv(self, (char *const *)argv);
	return fail(EX_UNAVAILABLE, "cannot re-run %s: %s", self, strerror(errno));
}

/* One line in cusnap's voice, under the demo's name. */
static void demo_say(enum voice_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void demo_say(enum voice_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	voice_v("cusnap demo: ", level, fmt, ap);
	va_end(ap);
}

/* The work directory, and the workload started in it under the launcher,
 * waited for until ready: 0, or the exit code (reported). */
static int demo_start(struct demo *d)
{
	char group[PATH_MAX + 32], launcher[PATH_MAX + 32];
	snprintf(group, sizeof(group), "%s/../examples/vmm_group", d->bin);
	snprintf(launcher, sizeof(launcher), "%s/snapshot-cuda-vmm-launch", d->bin);
	if (d->a->keep) {
		snprintf(d->work, sizeof(d->work), "%s", d->a->keep);
		if (path_mkdirs(d->work) < 0)
			return fail(EX_USAGE, "--keep %s: cannot create it", d->a->keep);
	} else {
		snprintf(d->work, sizeof(d->work), "/tmp/cusnap-demo-XXXXXX");
		if (!mkdtemp(d->work))
			return fail(EX_LEFT_RUNNING, "cannot create a work directory");
	}
	snprintf(d->ctl, sizeof(d->ctl), "%s/control", d->work);
	snprintf(d->ckpt, sizeof(d->ckpt), "%s/checkpoint", d->work);
	snprintf(d->log, sizeof(d->log), "%s/workload.log", d->work);
	path_mkdirs(d->ctl);
	setenv(CONTROL_DIR_VAR, d->ctl, 1);
	d->s = *d->a->s;
	if ((size_t)snprintf(d->s.control_dir, sizeof(d->s.control_dir), "%s", d->ctl) >= sizeof(d->s.control_dir))
		return fail(EX_USAGE, "%s: the path is too long", d->ctl);
	d->s.content = PROTO_CONTENT_HOST;
	/* Restored trees are reparented to us: we wait for them to verify. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	demo_say(VOICE_INFO, "%d processes sharing %d allocations of %.0f MiB on %s; work directory %s",
		 d->a->processes, d->allocs, d->per / MiB, d->gpu_driver ? d->gpu : "the emulator (cuemu)", d->work);
	double t0 = now_ms();
	d->start = t0;
	d->root = fork();
	if (d->root == 0) {
		setsid();
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int in = open("/dev/null", O_RDONLY);
		if (fd < 0 || in < 0)
			_exit(126);
		dup2(in, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		char w[16], n[16], sz[32];
		snprintf(w, sizeof(w), "%d", d->a->processes - 1);
		snprintf(n, sizeof(n), "%d", d->allocs);
		snprintf(sz, sizeof(sz), "%llu", d->per);
		execl(launcher, launcher, group, "--workers", w, "--allocs", n, "--size", sz, "--timeout", "300",
		      (char *)NULL);
		_exit(127);
	}
	char ready[PATH_MAX + 64];
	snprintf(ready, sizeof(ready), "%s/ready-for-snapshot", d->ctl);
	while (access(ready, F_OK) != 0) {
		if (now_ms() - t0 > 60000 || waitpid(d->root, NULL, WNOHANG) == d->root) {
			kill(d->root, SIGKILL);
			return fail(EX_TERMINATED, "the workload did not get ready (log: %s)", d->log);
		}
		usleep(10000);
	}
	d->ms_ready = now_ms() - t0;
	return 0;
}

/* Suspend and resume in place, or checkpoint, kill and restore with CRIU. */
static int demo_cycle(struct demo *d)
{
	double t0 = now_ms();
	int rc;
	if (d->a->in_place) {
		rc = cmd_suspend(&(struct args){.s = &d->s, .pid = d->root, .dir = d->ckpt});
		d->ms_suspend = now_ms() - t0;
		if (rc != EX_OK)
			return rc;
		t0 = now_ms();
		rc = cmd_resume(&(struct args){.s = &d->s, .pid = d->root, .dir = d->ckpt});
		d->ms_resume = now_ms() - t0;
		char why[PATH_MAX + 256];
		if (rc == EX_OK && control_write(d->root, d->ctl, CONTROL_RESTORE_DONE, why, sizeof(why)) < 0)
			rc = fail(EX_TERMINATED, "cannot write %s", why);
		return rc;
	}
	rc = cmd_checkpoint(&(struct args){.s = &d->s, .pid = d->root, .dir = d->ckpt, .result = &d->c});
	if (rc != EX_OK)
		return rc;
	/* CRIU stopped the tree after the dump; reap all of it (the workers were
	 * reparented to us) so that its PIDs are free for the restore. */
	t0 = now_ms();
	kill(d->root, SIGKILL);
	while (waitpid(-1, NULL, 0) > 0)
		;
	d->ms_kill = now_ms() - t0;
	rc = cmd_restore(&(struct args){.s = &d->s, .dir = d->ckpt, .result = &d->r});
	d->root = d->r.restored_root;
	return rc;
}

/* The table of phases, and the verdict. */
static void demo_report(const struct demo *d, int pass, bool ok)
{
	double shared_mib = d->per * d->allocs / MiB;
	bool in_place = d->a->in_place;
	printf("\ncusnap demo: %d processes, %d shared allocations (%.0f MiB), %s, %s\n\n", d->a->processes, d->allocs,
	       shared_mib, d->gpu_driver ? d->gpu : "emulated GPUs (cuemu)",
	       in_place ? "suspended and resumed in place" : "CRIU checkpoint, kill, restore");
	printf("  %-34s %10s   %s\n", "phase", "time", "size");
	printf("  %-34s %8.1f ms\n", "start workload, wait until ready", d->ms_ready);
	if (in_place) {
		printf("  %-34s %8.1f ms   %.1f MiB device memory released\n", "suspend (prepare, lock, checkpoint)",
		       d->ms_suspend, shared_mib);
		printf("  %-34s %8.1f ms\n", "resume (restore, unlock, rebuild)", d->ms_resume);
	} else {
		printf("  %-34s %8.1f ms   %.1f MiB copied to host\n", "prepare shared memory (VMM)", d->c.ms_prepare,
		       d->c.bytes_copied / MiB);
		printf("  %-34s %8.1f ms\n", "native lock + checkpoint", d->c.ms_checkpoint);
		printf("  %-34s %8.1f ms   %.1f MiB of images\n", "CRIU dump", d->c.ms_dump, d->c.image_bytes / MiB);
		printf("  %-34s %8.1f ms\n", "kill the workload", d->ms_kill);
		printf("  %-34s %8.1f ms\n", "CRIU restore", d->r.ms_criu_restore);
		printf("  %-34s %8.1f ms\n", "native restore + unlock", d->r.ms_native_restore);
		printf("  %-34s %8.1f ms   %.1f MiB copied back\n", "rebuild shared memory (VMM)", d->r.ms_vmm_restore,
		       d->r.bytes_copied / MiB);
	}
	printf("  %-34s %8.1f ms   %d/%d processes PASS\n", "workload verifies itself", d->ms_verify, pass,
	       d->a->processes);
	printf("  %-34s %8.1f ms\n\n", "total", now_ms() - d->start);
	printf("%s: every process checked its bytes, addresses, handles and live sharing after the restore\n",
	       ok ? "PASS" : "FAIL");
}

int cmd_demo(const struct args *a)
{
	struct demo d = {.a = a, .allocs = 4};
	path_self_dir(d.bin, sizeof(d.bin));
	if (a->processes < 1 || a->processes > 33)
		return fail(EX_USAGE, "--processes %d: between 1 and 33", a->processes);
	d.per = a->size / (unsigned long long)d.allocs;
	d.per = (d.per + (2u << 20) - 1) / (2u << 20) * (2u << 20);
	if (d.per < (4u << 20))
		d.per = 4u << 20;
	char group[PATH_MAX + 32], launcher[PATH_MAX + 32];
	snprintf(group, sizeof(group), "%s/../examples/vmm_group", d.bin);
	snprintf(launcher, sizeof(launcher), "%s/snapshot-cuda-vmm-launch", d.bin);
	if (access(group, X_OK) != 0 || access(launcher, X_OK) != 0)
		return fail(EX_UNAVAILABLE, "%s or %s missing: run 'make' first", group, launcher);
	d.gpu_driver = real_driver(d.gpu, sizeof(d.gpu));
	if (!d.gpu_driver && !getenv("CUSNAP_DEMO_REEXEC"))
		return demo_reexec(&d);
	int rc = demo_start(&d);
	if (rc)
		return rc;
	rc = demo_cycle(&d);
	if (rc != EX_OK) {
		kill(d.root, SIGKILL);
		demo_say(VOICE_ERROR, "failed (exit %d); the workload log is %s", rc, d.log);
		return rc;
	}
	double t0 = now_ms();
	int status = wait_exit(d.root, 120000);
	d.ms_verify = now_ms() - t0;
	int fails = 0, pass = count_pass(d.log, &fails);
	bool ok = status == 0 && pass == a->processes && !fails;
	demo_report(&d, pass, ok);
	if (!ok)
		demo_say(VOICE_ERROR, "the workload reported failures (exit %d); its log: %s", status, d.log);
	if (!a->keep && ok) {
		char *argv[] = {"rm", "-rf", d.work, NULL};
		pid_t p = fork();
		if (p == 0) {
			execvp("rm", argv);
			_exit(127);
		}
		waitpid(p, NULL, 0);
	}
	return ok ? EX_OK : EX_TERMINATED;
}
