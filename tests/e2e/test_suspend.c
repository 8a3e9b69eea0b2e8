/* SPDX-License-Identifier: MIT */
/* cusnap suspend/resume in place: both content modes, the host-mode arena,
 * r615, --json whatever the paths hold, a long control directory and a tree
 * without the interposer. The recovery cases are in test_recovery, the
 * refusals and the agent's argv in test_contracts, the countdown sweeps in
 * test_sweep_suspend. */
#include <dirent.h>
#include <stdint.h>

#include "sweep.h"
#include "cusnap/counters.h"
#include "cusnap/json.h"
#include "cusnap/layout.h"

static char cusnap[PATH_MAX], coord[PATH_MAX + 32];

static void round_trip(const char *content)
{
	struct group g;
	if (group_start(&g, content, 2, 4, false, NULL, NULL, NULL) < 0)
		return;
	CHECK(group_device_mappings(&g, "memfd:cuemu") > 0);
	/* cusnap's own driver calls: the checkpoint API, and never cuInit (as
	 * NVIDIA's cuda-checkpoint: a controller needs no CUDA state of its own). */
	char trace[PATH_MAX], env_trace[PATH_MAX + 16];
	snprintf(trace, sizeof(trace), "%s/%s-calls", e2e_root, content);
	snprintf(env_trace, sizeof(env_trace), "CUEMU_TRACE=%s", trace);
	char *out, *tool_env[] = {env_trace, NULL};
	CHECK_EQ(group_suspend(&g, content, &out, tool_env), 0);
	free(out);
	char *calls = test_read_file(trace);
	CHECK_CONTAINS(calls, "cuCheckpointProcessCheckpoint");
	CHECK(!contains(calls, "cuInit"));
	free(calls);
	/* Every process released all device memory. */
	CHECK_EQ(group_device_mappings(&g, "memfd:cuemu"), 0);
	char *json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"state\":\"checkpointed\""), 3);
	free(json);
	CHECK_SAYS(out, group_resume(&g, &out, NULL), 0, "topology identical");
	/* Same addresses, same bytes, old handles, sharing both ways: the workload checks. */
	group_done(&g, 3);
}

static void host_content(void)
{
	round_trip("host");
}

static void native_content(void)
{
	round_trip("native");
}

/* File content: the shared bytes in files of their own beside the state file
 * (the parent's, the only creator here), none in the processes (no arena made;
 * one kept from a host-content suspend given back); back where they were at
 * each resume (the workload checks every byte). */
static void file_content(void)
{
	struct group g;
	char *env[] = {"SNAPSHOT_CUDA_VMM_LOG=2", NULL};
	if (group_start(&g, "file", 2, 4, false, NULL, env, NULL) < 0)
		return;
	char *out, state[PATH_MAX + 16];
	CHECK_SAYS(out, group_suspend(&g, "file", &out, NULL), 0, "(file content)");
	snprintf(state, sizeof(state), "%s/state", g.ctl);
	int files;
	long long bytes = e2e_content_files(state, &files);
	CHECK_EQ(files, 1);
	CHECK(bytes >= 4LL * (long long)e2e_alloc_bytes());
	char *log = test_read_file(g.log);
	CHECK(log && !contains(log, "host-mode arena of"));
	CHECK(log && contains(log, "through the file"));
	free(log);
	CHECK_SAYS(out, group_resume(&g, &out, NULL), 0, "topology identical");
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	free(out);
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	free(out);
	CHECK_EQ(group_suspend(&g, "file", &out, NULL), 0);
	free(out);
	log = test_read_file(g.log);
	CHECK(log && contains(log, "given back (file content keeps no copy)"));
	free(log);
	CHECK_SAYS(out, group_resume(&g, &out, NULL), 0, "topology identical");
	group_done(&g, 3);
}

/* The one file of file content in dir into path (NULL: none). */
static const char *content_file(const char *dir, char *path, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	const char *found = NULL;
	while (d && !found && (e = readdir(d)))
		if (layout_content_name(e->d_name) && snprintf(path, len, "%s/%s", dir, e->d_name) < (int)len)
			found = path;
	if (d)
		closedir(d);
	return found;
}

/* File content damaged while the group is suspended: a resume refuses it,
 * naming what is wrong (the allocation's CRC32C when it is damaged; the file
 * too short, nothing made, when it is truncated), and leaves the group parked;
 * with the file as written, the next resume completes and the workload checks
 * every byte. */
static void file_content_damaged(void)
{
	struct group g;
	if (group_start(&g, "filebad", 1, 2, false, NULL, NULL, NULL) < 0)
		return;
	char *out, state[PATH_MAX + 16], path[PATH_MAX + 96], saved[PATH_MAX + 112];
	CHECK_EQ(group_suspend(&g, "file", &out, NULL), 0);
	free(out);
	snprintf(state, sizeof(state), "%s/state", g.ctl);
	CHECK(content_file(state, path, sizeof(path)) != NULL);
	snprintf(saved, sizeof(saved), "%s.saved", path);
	char *cp[] = {"cp", path, saved, NULL};
	CHECK_EQ(test_run_cmd(cp, NULL, 30000), 0);
	int fd = open(path, O_WRONLY);
	CHECK(fd >= 0);
	CHECK_EQ(pwrite(fd, "damage", 6, (off_t)e2e_alloc_bytes() + 100), 6); /* the second allocation */
	close(fd);
	char at[96];
	snprintf(at, sizeof(at), ".bytes is damaged at %zu: ", e2e_alloc_bytes()); /* (the file and the block named) */
	CHECK_SAYS(out, group_resume(&g, &out, NULL), 2, at);
	char *back[] = {"cp", saved, path, NULL};
	CHECK_EQ(test_run_cmd(back, NULL, 30000), 0);
	CHECK_EQ(truncate(path, (off_t)e2e_alloc_bytes()), 0);
	CHECK_SAYS(out, group_resume(&g, &out, NULL), 2, "(truncated): nothing made");
	CHECK_EQ(rename(saved, path), 0);
	CHECK_SAYS(out, group_resume(&g, &out, NULL), 0, "topology identical");
	group_done(&g, 2);
}

/* Private memory through cusnap's path (DESIGN.md §6.2): weights from
 * cuMemAlloc (the adapter's chunks), an expandable segment of three
 * allocations and a KV cache barely used, in each process, suspended and
 * resumed in each content; each process checks its bytes, pointers, handles
 * and access. In file content every byte of it is in the files, the KV cache's
 * unused blocks as holes: the files are sparse and come back as zeros. */
static void private_memory(void)
{
	char *env[] = {"VMM_GROUP_PRIVATE=1", NULL}, *out, state[PATH_MAX + 16];
	static const char *const contents[] = {"file", "host", "native"};
	for (int c = 0; c < 3; c++) {
		struct group g;
		if (group_start(&g, "private", 1, 2, false, NULL, env, NULL) < 0)
			return;
		CHECK_EQ(group_suspend(&g, contents[c], &out, NULL), 0);
		free(out);
		if (c == 0) {
			snprintf(state, sizeof(state), "%s/state", g.ctl);
			DIR *d = opendir(state);
			struct dirent *e;
			long long size = 0, stored = 0;
			while (d && (e = readdir(d))) {
				struct stat st;
				if (layout_content_name(e->d_name) && fstatat(dirfd(d), e->d_name, &st, 0) == 0)
					size += st.st_size, stored += (long long)st.st_blocks * 512;
			}
			if (d)
				closedir(d);
			/* (each process: 6 MiB of its KV cache never written) */
			CHECK(size >= (long long)(2 * 3 * (2u << 20)));
			if (stored > size - (long long)(2 * 3 * (2u << 20)))
				test_fail(__FILE__, __LINE__, "the files hold %lld bytes of their %lld: not sparse",
					  stored, size);
		}
		CHECK_SAYS(out, group_resume(&g, &out, NULL), 0, "topology identical");
		CHECK_EQ(group_finish(&g), 2);
		char *log = test_read_file(g.log);
		CHECK_EQ(count_of(log, "private memory (weights, an expandable segment, a KV cache) intact"), 2);
		free(log);
		group_kill(&g);
	}
}

/* A creator that let go of what it shared (DESIGN.md §6.2): the first worker
 * carries each allocation, the other is rebuilt as its importer, and the
 * parent's exports, cached from before, resolve after the resume (the
 * workload checks bytes, addresses, handles and sharing both ways). */
static void creator_let_go(const char *content, bool ipc)
{
	struct group g;
	char *env[] = {"VMM_GROUP_RELEASE=1", ipc ? "VMM_GROUP_IPC=1" : NULL, NULL};
	if (group_start(&g, content, 2, 4, false, NULL, env, NULL) < 0)
		return;
	char *out;
	CHECK_SAYS(out, group_suspend(&g, content, &out, NULL), 0, "importers carry what their creators let go");
	char *json = group_inspect(&g);
	CHECK_EQ(count_of(json, "\"role\":\"creator\""), ipc ? 2 : 0); /* (the workers' own chunks) */
	/* One worker, each allocation once (with --ipc also the adapter chunk of
	 * the parent's cuMemAlloc buffers). */
	CHECK_EQ(count_of(json, "\"holder\":true"), ipc ? 5 : 4);
	free(json);
	CHECK_SAYS(out, group_resume(&g, &out, NULL), 0, "topology identical");
	group_done(&g, 3);
}

static void let_go_host(void)
{
	creator_let_go("host", false);
}

static void let_go_native(void)
{
	creator_let_go("native", false);
	/* The adapter's cuMemAlloc memory over legacy IPC, its creator's chunk freed. */
	creator_let_go("native", true);
}

/* Resume completes children before parents: the restores run concurrently,
 * then each process is unlocked after every process below it in the tree
 * (cuemu's CUEMU_CKPT_LOG records the order the driver saw). */
static void children_unlocked_first(void)
{
	char log[PATH_MAX], env_log[PATH_MAX + 32];
	snprintf(log, sizeof(log), "%s/unlock-order", e2e_root);
	snprintf(env_log, sizeof(env_log), "CUEMU_CKPT_LOG=%s", log);
	char *env[] = {env_log, NULL}, *out;
	struct group g;
	if (group_start(&g, "order", 3, 2, false, NULL, env, NULL) < 0)
		return;
	pid_t pids[8];
	group_pids(&g, pids, 4);
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	free(out);
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	free(out);
	group_done(&g, 4);
	/* The unlock lines, in the order they were served. */
	char *text = test_read_file(log);
	pid_t order[8];
	int unlocked = 0, restored = 0;
	for (char *line = text, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		int pid = 0;
		char op[16] = "";
		if (sscanf(line, "%d %15s", &pid, op) != 2)
			continue;
		restored += !strcmp(op, "restore");
		if (!strcmp(op, "unlock") && unlocked < 8)
			order[unlocked++] = pid;
	}
	free(text);
	CHECK_EQ(restored, 4);
	CHECK_EQ(unlocked, 4);
	/* The root (every other process is below it) last of all. */
	if (unlocked == 4 && order[3] != g.root)
		test_fail(__FILE__, __LINE__, "the root %d was unlocked before a process below it (order %d %d %d %d)",
			  (int)g.root, order[0], order[1], order[2], order[3]);
}

/* cuemu's entry points, in the order of the counters (counters.h). */
static const char *const emu_calls[] = {
#define X(sym, name, ver, flags) #sym,
#include "../../emu/api.def"
#undef X
};

/* What the group counted during a suspend and resume of content mode with
 * allocs allocations (CUSNAP_COUNT: every process adds to one table), into
 * delta; extra: one more environment entry for the group, or NULL. */
static void counts_over_suspend_resume(int allocs, const char *content, const char *extra, uint64_t delta[COUNT_SLOTS])
{
	char path[PATH_MAX], env_count[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/counts-%s-%d%s", e2e_root, content, allocs, extra ? "-extra" : "");
	snprintf(env_count, sizeof(env_count), "CUSNAP_COUNT=%s", path);
	char *env[] = {env_count, (char *)extra, NULL}, *out;
	struct group g;
	memset(delta, 0, sizeof(uint64_t) * COUNT_SLOTS);
	if (group_start(&g, "counts", 2, allocs, false, NULL, env, NULL) < 0)
		return;
	uint64_t before[COUNT_SLOTS] = {0}, after[COUNT_SLOTS] = {0};
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0 && pread(fd, before, sizeof(before), 0) == (ssize_t)sizeof(before));
	char *counted[] = {env_count, NULL}; /* (cusnap's requests counted too) */
	CHECK_EQ(group_suspend(&g, content, &out, counted), 0);
	free(out);
	CHECK_EQ(group_resume(&g, &out, counted), 0);
	free(out);
	CHECK(fd >= 0 && pread(fd, after, sizeof(after), 0) == (ssize_t)sizeof(after));
	if (fd >= 0)
		close(fd);
	group_done(&g, 3);
	for (size_t i = 0; i < COUNT_SLOTS; i++)
		delta[i] = after[i] - before[i];
}

/* How many times the group called sym during a suspend and resume. */
static long calls_with(int allocs, const char *content, const char *extra, const char *sym)
{
	uint64_t delta[COUNT_SLOTS];
	counts_over_suspend_resume(allocs, content, extra, delta);
	for (size_t i = 0; i < sizeof(emu_calls) / sizeof(emu_calls[0]); i++)
		if (!strcmp(emu_calls[i], sym))
			return (long)delta[COUNT_CALLS + i];
	return -1;
}

static long calls_over_suspend_resume(int allocs, const char *content, const char *sym)
{
	return calls_with(allocs, content, NULL, sym);
}

/* Mappings the application laid back to back with the same access (PyTorch's
 * expandable segments) get their access back in one cuMemSetAccess per
 * process: vmm_group --contiguous maps its 8 allocations so in each of its 3
 * processes. */
static void contiguous_access_in_one_call(void)
{
	if (getenv("TSAN_OPTIONS")) {
		printf("     skipped under TSan: the plain and ASan passes count\n");
		return;
	}
	const char *content = "host";
	long access = calls_with(8, content, "VMM_GROUP_CONTIGUOUS=1", "cuMemSetAccess");
	printf("     %s content: cuMemSetAccess %ld times for 3 processes x 8 contiguous mappings\n", content, access);
	CHECK_EQ(access, 3);
}

/* A restore redeems an importer's capabilities of one creator in EXPORT_MANY
 * batches: the requests between shims do not grow with the allocations. A
 * creator that serves EXPORT only (a shim before protocol 1.6) is redeemed one
 * EXPORT each, and the group comes back all the same. */
static void restore_redeems_in_batches(void)
{
	if (getenv("TSAN_OPTIONS")) {
		/* The counts do not depend on the sanitizer; every restore under TSan
		 * redeems in batches (its threads are covered there). */
		printf("     skipped under TSan: the plain and ASan passes count\n");
		return;
	}
	const char *content = "host";
	uint64_t few[COUNT_SLOTS], many[COUNT_SLOTS], old[COUNT_SLOTS];
	counts_over_suspend_resume(4, content, NULL, few);
	counts_over_suspend_resume(32, content, NULL, many);
	counts_over_suspend_resume(32, content, "SNAPSHOT_CUDA_VMM_EXPORT_MANY=0", old);
	printf("     requests between shims: %llu for 4 allocations, %llu for 32, %llu for 32 one EXPORT each\n",
	       (unsigned long long)few[COUNT_SHIM_REQUESTS], (unsigned long long)many[COUNT_SHIM_REQUESTS],
	       (unsigned long long)old[COUNT_SHIM_REQUESTS]);
	CHECK(few[COUNT_SHIM_REQUESTS] > 0);
	CHECK_EQ(many[COUNT_SHIM_REQUESTS], few[COUNT_SHIM_REQUESTS]);
	/* The coordinator's requests to each of the 3 participants of a parked
	 * group: suspend HELLO (finding the tree), INSPECT, QUIESCE (answered
	 * with the count of changes that INSPECT answered: no INSPECT again),
	 * PREPARE, INSPECT for the state file; resume HELLO, INSPECT,
	 * RESTORE_CREATORS, RESTORE_IMPORTERS, INSPECT to compare, RESUME. */
	printf("     coordinator requests: %llu for 3 participants\n", (unsigned long long)many[COUNT_COORD_REQUESTS]);
	CHECK_EQ(many[COUNT_COORD_REQUESTS], 3 * 11);
	/* Each of the two workers redeems at least the 32 shared allocations. */
	CHECK(old[COUNT_SHIM_REQUESTS] >= many[COUNT_SHIM_REQUESTS] + 2 * 31);
}

/* Context switches are per device and step, not per allocation: the shim
 * works through its allocations device by device, so 8 times the allocations
 * (spread over both devices) make no more cuCtxSetCurrent calls. A mapping's
 * access is granted again in one call, whatever the number of devices. */
static void context_switches_do_not_grow(void)
{
	static const char *const modes[] = {"host", "native"};
	if (getenv("TSAN_OPTIONS")) {
		/* The counts do not depend on the sanitizer (three groups took 40 s
		 * there); every suspend and resume under TSan switches contexts. */
		printf("     skipped under TSan: the plain and ASan passes count\n");
		return;
	}
	for (size_t m = 0; m < 2; m++) {
		long few = calls_over_suspend_resume(4, modes[m], "cuCtxSetCurrent");
		long many = calls_over_suspend_resume(32, modes[m], "cuCtxSetCurrent");
		printf("     %s content: cuCtxSetCurrent %ld times for 4 allocations, %ld for 32\n", modes[m], few,
		       many);
		/* vmm_group grants two devices access to most mappings: one call
		 * regrants both. Native content: exactly the 3 x 8 mappings rebuilt;
		 * host content adds at most one per copy through a reservation. */
		long access = calls_over_suspend_resume(8, modes[m], "cuMemSetAccess");
		printf("     %s content: cuMemSetAccess %ld times for 3 x 8 mappings\n", modes[m], access);
		if (m == 1)
			CHECK_EQ(access, 24);
		else
			CHECK(access >= 24 && access <= 32);
		CHECK(few > 0);
		if (many > few + 2)
			test_fail(__FILE__, __LINE__,
				  "%s: cuCtxSetCurrent grows with the allocations: %ld for 4, %ld for 32", modes[m],
				  few, many);
	}
}

/* The host-mode arenas a workload's shims report in its log ("host-mode arena
 * of N bytes at 0xADDR", one line each time one is made and populated): how
 * many were made, and the last one's process, address and size. */
struct arena_seen {
	int made;
	pid_t pid;
	unsigned long addr;
	size_t bytes;
};

static struct arena_seen arena_seen(const char *log_path)
{
	struct arena_seen a = {0};
	char *log = test_read_file(log_path);
	for (char *line = log, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		const char *at = strstr(line, "host-mode arena");
		const char *size = at ? strpbrk(at, "0123456789") : NULL;
		const char *pid = strchr(line, '[');
		if (!size || !pid)
			continue;
		a.made++;
		a.pid = (pid_t)atoi(pid + 1);
		a.bytes = strtoull(size, NULL, 10);
		const char *addr = strstr(size, " at ");
		a.addr = addr ? strtoul(addr + 4, NULL, 16) : 0;
	}
	free(log);
	return a;
}

/* How many pages of [addr, addr + bytes) are resident in pid (its pagemap). */
static long resident_pages(pid_t pid, unsigned long addr, size_t bytes)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = bytes / page;
	uint64_t *e = calloc(pages ? pages : 1, sizeof(*e));
	ssize_t got = e ? pread(fd, e, pages * sizeof(*e), (off_t)(addr / page * sizeof(*e))) : -1;
	close(fd);
	long n = got == (ssize_t)(pages * sizeof(*e)) ? 0 : -1;
	for (size_t i = 0; n >= 0 && i < pages; i++)
		n += (long)(e[i] >> 63); /* bit 63: present */
	free(e);
	return n;
}

/* Host content copies into one arena per process (DESIGN.md §6.2), as the
 * shim reports it and its pages show: one mapping of the shared bytes (at most
 * 1.1x), populated when made, and a second suspend of the same shape writes
 * into it instead of making and populating another. */
static void arena_reused(void)
{
	enum { ALLOCS = 16 };
	const size_t shared = ALLOCS * e2e_alloc_bytes();
	const long page = sysconf(_SC_PAGESIZE);
	struct group g;
	char *env[] = {"SNAPSHOT_CUDA_VMM_LOG=2", NULL};
	if (group_start(&g, "arena", 1, ALLOCS, false, NULL, env, NULL) < 0)
		return;
	char *out;
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	free(out);
	struct arena_seen first = arena_seen(g.log);
	CHECK_EQ(first.made, 1);
	CHECK(first.addr != 0);
	CHECK(first.bytes >= shared);
	CHECK(first.bytes <= shared * 11 / 10);
	CHECK_EQ(resident_pages(first.pid, first.addr, first.bytes), (long)(first.bytes / (size_t)page));
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	free(out);
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	free(out);
	struct arena_seen second = arena_seen(g.log);
	CHECK_EQ(second.made, 1); /* made once, populated once */
	CHECK_EQ(second.addr, first.addr);
	CHECK_EQ(resident_pages(first.pid, first.addr, first.bytes), (long)(first.bytes / (size_t)page));
	CHECK_EQ(group_resume(&g, &out, NULL), 0);
	free(out);
	group_done(&g, 2);
}

static void r615(void)
{
	char *env[] = {"CUEMU_PROFILE=r615", NULL};
	struct group g;
	if (group_start(&g, "r615n", 1, 2, false, NULL, env, NULL) < 0)
		return;
	char *out;
	CHECK_EQ(group_suspend(&g, "native", &out, NULL), 0);
	free(out);
	/* Natively restored exportable allocations cannot be exported again. */
	CHECK_EQ(group_resume(&g, &out, NULL), 2);
	CHECK_CONTAINS(out, "CUDA_ERROR_INVALID_VALUE");
	CHECK_CONTAINS(out, "allocation ");
	free(out);
	group_kill(&g);
	if (group_start(&g, "r615h", 1, 2, false, NULL, env, NULL) < 0)
		return;
	group_round_trip(&g);
}

/* Every --json output is valid JSON whatever the paths hold: a state directory
 * named with a quote, a backslash, a newline and a tab. */
static void json_odd_paths(void)
{
	struct group g;
	if (group_start_pair(&g, "json") < 0)
		return;
	char dir[PATH_MAX + 64], pid[16], *out;
	snprintf(dir, sizeof(dir), "%s/a \"quoted\" \\back\\slash\nnew\tline", e2e_root);
	snprintf(pid, sizeof(pid), "%d", g.root);
	struct {
		const char *what;
		int want;
		char *argv[12];
	} runs[] = {
		{"suspend", 0, {cusnap, "suspend", "--json", "--pid", pid, "--dir", dir, "--control-dir", g.ctl, NULL}},
		{"inspect --dir", 0, {cusnap, "inspect", "--json", "--dir", dir, NULL}},
		{"snapshot-cuda-vmm --inspect-state", 0, {coord, "--inspect-state", dir, "--json", NULL}},
		/* --pid alone: the state directory recorded by suspend, newline and all */
		{"resume --pid alone", 0, {cusnap, "resume", "--json", "--pid", pid, "--control-dir", g.ctl, NULL}},
		{"a failure", 64, {cusnap, "suspend", "--json", "--pid", "1", "--dir", dir, NULL}},
	};
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		char *argv[12] = {0};
		memcpy(argv, runs[i].argv, sizeof(argv));
		char log[PATH_MAX];
		snprintf(log, sizeof(log), "%s/json.out", e2e_root);
		pid_t c = fork();
		if (c == 0) {
			int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			dup2(fd, 1);
			int nul = open("/dev/null", O_WRONLY);
			dup2(nul, 2);
			execv(argv[0], argv);
			_exit(127);
		}
		int status = test_wait_child(c, 60000);
		int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		out = test_read_file(log);
		char err[256] = "";
		json_error_t je;
		json_t *j = out ? json_loads(out, 0, &je) : NULL;
		if (!j)
			snprintf(err, sizeof(err), "%s", out ? je.text : "no output");
		if (rc != runs[i].want || !j)
			test_fail(__FILE__, __LINE__, "%s --json: exit %d, %s:\n%s", runs[i].what, rc,
				  j ? "valid" : err, out ? out : "");
		const char *d = json_member_string(j, "dir");
		if (j && d && strcmp(d, dir) != 0)
			test_fail(__FILE__, __LINE__, "%s --json: the dir read back differs", runs[i].what);
		json_decref(j);
		free(out);
	}
	group_done(&g, 2);
}

static void long_control_dir(void)
{
	/* An endpoint path beyond the 107 bytes of a socket address. */
	char ctl[PATH_MAX];
	snprintf(ctl, sizeof(ctl),
		 "%s/a-control-directory-with-a-deliberately-long-name-to-push-the-socket-path-beyond-"
		 "one-hundred-and-seven-bytes",
		 e2e_root);
	struct group g;
	if (group_start(&g, "long", 1, 2, false, NULL, NULL, ctl) < 0)
		return;
	group_round_trip(&g);
}

static void native_only(void)
{
	/* Without the interposer: refused with --require-interposer; else the
	 * native steps only, with a warning: the driver checkpoints the importer
	 * and then refuses its restore (r580, as cuemu models it), and the resume
	 * says so, naming the process. */
	struct group g;
	if (group_start(&g, "plain", 1, 2, true, NULL, NULL, NULL) < 0)
		return;
	char *out;
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", g.root);
	CHECK_EQ(tool(&out, NULL, cusnap, "suspend", "--pid", pid, "--control-dir", g.ctl, "--require-interposer",
		      NULL),
		 1);
	CHECK_CONTAINS(out, "--require-interposer");
	CHECK_CONTAINS(out, "nothing done");
	free(out);
	CHECK_EQ(group_suspend(&g, "host", &out, NULL), 0);
	CHECK_CONTAINS(out, "native steps only");
	CHECK_CONTAINS(out, "refuses to restore the importer");
	free(out);
	CHECK_EQ(group_device_mappings(&g, "memfd:cuemu"), 0);
	CHECK_EQ(group_resume(&g, &out, NULL), 2);
	CHECK_CONTAINS(out, "failed: CUDA_ERROR_NOT_SUPPORTED");
	CHECK_CONTAINS(out, "half-done");
	free(out);
	group_kill(&g);
}

/* A workload that is not parked (churn: its VMM_GROUP_CHURN) suspended and
 * resumed rounds times, the contents by turns (the first ncontents of host,
 * native, file), each suspend landing pause_us to 4 * pause_us into its work
 * and each resume pause_us after: its calls wait at the gate while the tree is
 * not active (and QUIESCE drains the ones under way) and go on after, none
 * fails, its own checks pass and its log never says never. */
static void busy_rounds(const char *churn, int rounds, int ncontents, unsigned pause_us, const char *never)
{
	char env0[48], *env[] = {env0, NULL}, *out;
	snprintf(env0, sizeof(env0), "VMM_GROUP_CHURN=%s", churn);
	struct group g;
	if (group_start(&g, strcmp(churn, "1") ? churn : "churn", 1, 2, false, NULL, env, NULL) < 0)
		return;
	static const char *const contents[] = {"host", "native", "file"};
	for (int round = 0; round < rounds; round++) {
		usleep(pause_us * (unsigned)(round % 4 + 1)); /* (working: the suspend lands anywhere in a round) */
		int rc = group_suspend(&g, contents[round % ncontents], &out, NULL);
		CHECK_EQ(rc, 0);
		if (rc)
			fprintf(stderr, "  suspend (%s content): %s\n", contents[round % ncontents], out);
		free(out);
		usleep(pause_us); /* (the work waits) */
		CHECK_EQ(group_resume(&g, &out, NULL), 0);
		free(out);
	}
	CHECK_EQ(group_finish(&g), 2);
	char *log = test_read_file(g.log);
	CHECK_EQ(count_of(log, " 0 failed calls"), 2);
	CHECK(!contains(log, never));
	free(log);
	group_kill(&g);
}

/* Both processes allocate, map and release VMM memory in a loop (their calls
 * failed with CUDA_ERROR_NOT_READY within a second), host and native content. */
static void churning(void)
{
	busy_rounds("1", 2, 2, 200000, "refused while a checkpoint is under way");
}

/* Copying into memory it exported, as an engine serving requests does, ten
 * rounds over the three contents: no copy fails and no round reads back wrong
 * bytes (before: a failed cuMemcpyHtoD, or the process killed, in 10 of 10
 * rounds). */
static void copying(void)
{
	busy_rounds("copy", 10, 3, 20000, "FAIL");
}

int main(void)
{
	e2e_init("suspend");
	snprintf(cusnap, sizeof(cusnap), "%s/cusnap", bin_dir);
	snprintf(coord, sizeof(coord), "%s/snapshot-cuda-vmm", bin_dir);
	test_run("suspend/resume, host content: 3 processes, 4 shared allocations, 2 devices", host_content);
	test_run("suspend/resume, native content", native_content);
	test_run("suspend/resume, file content: the bytes in a file beside the state file, none in the processes",
		 file_content);
	test_run("file content damaged or truncated while suspended: refused, parked; resumed from the file as written",
		 file_content_damaged);
	test_run("private memory (cuMemAlloc weights, an expandable segment, a KV cache barely used) in each content; "
		 "file content's holes",
		 private_memory);
	test_run("a creator that let go: an importer carries, host content", let_go_host);
	test_run("a creator that let go: an importer carries, native content (also legacy IPC)", let_go_native);
	test_run("resume unlocks children before their parents", children_unlocked_first);
	test_run("context switches per device and step, one cuMemSetAccess per mapping", context_switches_do_not_grow);
	test_run("a restore redeems in batches; one EXPORT each from a creator before 1.6", restore_redeems_in_batches);
	test_run("contiguous mappings with the same access: one cuMemSetAccess per process",
		 contiguous_access_in_one_call);
	test_run("host content: one arena of the shared bytes, reused by a second suspend", arena_reused);
	test_run("r615: native content fails at restore naming the error; host content works", r615);
	test_run("--json is valid for a directory named with a quote, a backslash and a newline", json_odd_paths);
	test_run("a control directory path longer than a socket address", long_control_dir);
	test_run("a workload without the interposer: native steps only", native_only);
	test_run("a churning workload (not parked) suspended and resumed: its calls wait, none fails", churning);
	test_run("a copying workload (not parked) suspended and resumed 10 times: copies wait, none fails", copying);
	return e2e_done();
}
