/* SPDX-License-Identifier: MIT */
/* The shim tests' helpers (tests/shim/shim_util.h), compiled once. */
#include "../shim/shim_util.h"

char shim_ctl[PATH_MAX];

void shim_reexec(int argc, char **argv)
{
	(void)argc;
	const char *ctl = getenv("SNAPSHOT_CONTROL_DIR");
	if (getenv("CUSNAP_UNDER_SHIM") && ctl) {
		snprintf(shim_ctl, sizeof(shim_ctl), "%s", ctl);
		return;
	}
	char tmpl[PATH_MAX], launcher[PATH_MAX], self[PATH_MAX];
	snprintf(tmpl, sizeof(tmpl), "%s/tmp-ctl-XXXXXX", test_exe_dir());
	if (!mkdtemp(tmpl))
		SKIP("cannot make a control directory under %s", test_exe_dir());
	snprintf(launcher, sizeof(launcher), "%s/../../bin/snapshot-cuda-vmm-launch", test_exe_dir());
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	setenv("SNAPSHOT_CONTROL_DIR", tmpl, 1);
	setenv("CUSNAP_UNDER_SHIM", "1", 1);
	/* The shim must never rely on VMM calls working without a current context. */
	setenv("CUEMU_REQUIRE_CONTEXT", "1", 0);
	/* The tools it runs check that they closed what they opened (exit 70 otherwise). */
	setenv("CUSNAP_FD_CHECK", "1", 0);
	if (getenv("CUSNAP_SANITIZER")) {
		/* The shim is preloaded ahead of the sanitizer runtime. */
		setenv("ASAN_OPTIONS", "verify_asan_link_order=0", 0);
	}
	char *args[64];
	int k = 0;
	args[k++] = launcher;
	args[k++] = self;
	for (int i = 1; argv[i] && k < 63; i++)
		args[k++] = argv[i];
	args[k] = NULL;
	execv(launcher, args);
	printf("cannot exec %s\n", launcher);
	exit(1);
}

void shim_endpoint_of(pid_t pid, struct coord_target *t)
{
	t->obs = t->ns = pid;
	coord_endpoint_path("", shim_ctl, pid, pid, t->endpoint, sizeof(t->endpoint));
}

int shim_inspect(pid_t pid, struct topo_participant *p)
{
	struct coord_target t;
	shim_endpoint_of(pid ? pid : getpid(), &t);
	char err[1200];
	/* As long as the endpoint gives itself (SNAPSHOT_CUDA_VMM_DEADLINE_MS:
	 * test_scale's 100,000 records under TSan on a busy machine took over 5 s). */
	const char *dl = getenv("SNAPSHOT_CUDA_VMM_DEADLINE_MS");
	int ms = dl && atoi(dl) > 5000 ? atoi(dl) : 5000;
	int rc = coord_inspect(&t, ms, p, err, sizeof(err));
	if (rc)
		printf("  inspect: %s\n", err);
	return rc;
}

int emu_live_allocs(void)
{
	return cuemu_live_allocations();
}

unsigned long long emu_mapped_bytes(void)
{
	int ver; /* cuemu revokes unmapped ranges on the host before its next call */
	cuDriverGetVersion(&ver);
	FILE *f = fopen("/proc/self/maps", "re");
	char line[1024];
	unsigned long long total = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;
		if (strstr(line, "memfd:cuemu-mem") && sscanf(line, "%llx-%llx", &lo, &hi) == 2)
			total += hi - lo;
	}
	if (f)
		fclose(f);
	CHECK_EQ(total, cuemu_mapped_bytes(1)); /* what the host has mapped is what cuemu placed */
	return cuemu_mapped_bytes(0);
}

unsigned long long topo_mapped_bytes(const struct topo_participant *p)
{
	unsigned long long total = 0;
	for (size_t i = 0; i < p->nmaps; i++)
		total += p->maps[i].size;
	return total;
}

int shim_fds_settle(int want)
{
	int n = test_count_fds();
	for (int i = 0; i < 500 && n != want; i++) {
		usleep(10000);
		n = test_count_fds();
	}
	return n;
}

int shim_fds_quiet(void)
{
	int n = test_count_fds();
	for (int i = 0; i < 100; i++) {
		usleep(50000);
		int m = test_count_fds();
		if (m == n)
			break;
		n = m;
	}
	return n;
}

int shim_done(void)
{
	if (!test_failures && shim_ctl[0]) {
		char *argv[] = {"rm", "-rf", shim_ctl, NULL};
		test_run_cmd(argv, NULL, 30000);
	}
	return test_done();
}
