/* SPDX-License-Identifier: MIT */
/* Sharing through capabilities between processes under the launcher: two and
 * three processes, a capability forwarded through a process that cached a dup of
 * it, raw FDs untracked, and refusals. */
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/un.h>

#include "../emu/ckpt_util.h"
#include "shim_util.h"

static const char *launcher_argv[2];

static int under_shim(struct target *t, const char *name, const char *const *opts)
{
	return target_start_wrapped(t, name, launcher_argv, opts, NULL);
}

/* One FD from DIR/NAME.share. */
static int fetch_fd(const char *name)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s.share", target_dir, name);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(a.sun_path))
		return -1;
	memcpy(a.sun_path, path, strlen(path) + 1);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int fd = -1;
	for (int i = 0; i < 400 && fd < 0; i++) {
		if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0) {
			fd = test_recv_fd(s);
			break;
		}
		usleep(5000);
	}
	close(s);
	return fd;
}

static int count_fd_links(pid_t pid, const char *prefix)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char link[320], target[256];
		snprintf(link, sizeof(link), "%s/%s", dir, e->d_name);
		ssize_t len = readlink(link, target, sizeof(target) - 1);
		if (len > 0) {
			target[len] = '\0';
			n += strncmp(target, prefix, strlen(prefix)) == 0;
		}
	}
	if (d)
		closedir(d);
	return n;
}

static void two_processes(void)
{
	struct target a, b;
	const char *serve[] = {"--serve", "--dev", "0", NULL};
	const char *import[] = {"--import", "a", "--dev", "1", NULL};
	if (under_shim(&a, "a", serve) < 0 || under_shim(&b, "b", import) < 0)
		return;
	TARGET_EXPECT(&b, "check 1", "PASS");
	TARGET_EXPECT(&b, "fill 4", "OK");
	TARGET_EXPECT(&a, "check 4", "PASS");
	TARGET_EXPECT(&a, "fill 5", "OK");
	TARGET_EXPECT(&b, "check 5", "PASS");
	/* The importer holds its driver allocation, never the raw driver FD. */
	CHECK_EQ(count_fd_links(b.pid, "/memfd:cuemu-mem"), 1);
	struct topo_participant pa, pb;
	if (shim_inspect(a.pid, &pa) == 0 && shim_inspect(b.pid, &pb) == 0) {
		CHECK_EQ(pa.nallocs, 1);
		CHECK_EQ(pb.nallocs, 1);
		CHECK(id_equal(&pa.allocs[0].id, &pb.allocs[0].id));
		CHECK(id_equal(&pb.allocs[0].creator, &pa.id));
		CHECK_STR(topo_role_name(pa.allocs[0].role), "creator");
		CHECK_STR(topo_role_name(pb.allocs[0].role), "importer");
		CHECK(pa.allocs[0].shared && pb.allocs[0].shared);
		CHECK_EQ(pb.nmaps, 1);
		CHECK_EQ(pb.maps[0].address, b.va);
		CHECK_EQ(pb.maps[0].naccess, 1);
		CHECK_EQ(pb.maps[0].access[0].loc_id, 1);
		topo_free(&pa);
		topo_free(&pb);
	}
	target_stop(&b);
	target_stop(&a);
}

static void forwarded_through_a_third(void)
{
	struct target a, c, d, e;
	const char *serve[] = {"--serve", "--seed", "7", NULL};
	const char *forward[] = {"--forward", "fa", NULL};
	const char *import_c[] = {"--import", "fc", "--dev", "1", NULL};
	const char *import_a[] = {"--import", "fa", NULL};
	if (under_shim(&a, "fa", serve) < 0 || under_shim(&c, "fc", forward) < 0 ||
	    under_shim(&d, "fd", import_c) < 0 || under_shim(&e, "fe", import_a) < 0)
		return;
	/* d got a dup'ed, cached capability through c; it still redeems at a. */
	TARGET_EXPECT(&d, "check 7", "PASS");
	TARGET_EXPECT(&e, "check 7", "PASS");
	TARGET_EXPECT(&d, "fill 8", "OK");
	TARGET_EXPECT(&e, "check 8", "PASS");
	TARGET_EXPECT(&a, "check 8", "PASS");
	/* An importer exporting again is refused as the driver refuses it (r580:
	 * an import reports no handle types), with nothing recorded as shared. */
	int cap = -1;
	CUmemGenericAllocationHandle h;
	int fd = fetch_fd("fc");
	CHECK(fd >= 0);
	CHECK_CU(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	CHECK_CU_EQ(cuMemExportToShareableHandle(&cap, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		    CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(cap, -1);
	struct topo_participant me;
	if (shim_inspect(0, &me) == 0) {
		CHECK_EQ(me.nallocs, 1);
		CHECK_STR(topo_role_name(me.allocs[0].role), "importer");
		topo_free(&me);
	}
	CHECK_CU(cuMemRelease(h));
	target_stop(&e);
	target_stop(&d);
	target_stop(&c);
	target_stop(&a);
}

/* The creator lets go of what it exported while a peer holds it: the creator
 * forwards a cached capability to the peers its EXPORTs went to, but a peer
 * that holds only an import cannot export it (r580), so it is refused with the
 * driver's answer, naming why, and nothing is left behind; the peer's memory
 * is untouched. (After a completed restore the peer that carried it holds an
 * allocation of its own, and the capability resolves: test_suspend's
 * holders.) */
static void creator_let_go(void)
{
	struct target a, c, b;
	const char *serve[] = {"--serve", "--seed", "9", NULL};
	const char *forward[] = {"--forward", "la", NULL};
	const char *import[] = {"--import", "la", "--dev", "1", NULL};
	if (under_shim(&a, "la", serve) < 0 || under_shim(&c, "lc", forward) < 0 || under_shim(&b, "lb", import) < 0)
		return;
	TARGET_EXPECT(&b, "check 9", "PASS");
	TARGET_EXPECT(&a, "drop", "CUDA_SUCCESS");
	TARGET_EXPECT(&b, "fill 10", "OK");
	CUmemGenericAllocationHandle h = 0;
	int fd = fetch_fd("lc");
	CHECK(fd >= 0);
	CHECK_CU_EQ(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		    CUDA_ERROR_INVALID_VALUE);
	close(fd);
	struct topo_participant me;
	if (shim_inspect(0, &me) == 0) {
		CHECK_EQ(me.nallocs, 0);
		topo_free(&me);
	}
	TARGET_EXPECT(&b, "check 10", "PASS"); /* the peer's memory, as it wrote it */
	/* No one holds it any more: refused the same way. */
	TARGET_EXPECT(&b, "drop", "CUDA_SUCCESS");
	fd = fetch_fd("lc");
	CHECK_CU_EQ(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		    CUDA_ERROR_INVALID_VALUE);
	close(fd);
	target_stop(&b);
	target_stop(&c);
	target_stop(&a);
}

static void raw_fd_untracked(void)
{
	/* A process without the shim exports the driver's own FD. */
	struct target r;
	const char *serve[] = {"--serve", "--seed", "3", NULL};
	char *env[] = {"LD_PRELOAD=", NULL};
	if (target_start_wrapped(&r, "raw", NULL, serve, env) < 0)
		return;
	int fds = shim_fds_quiet();
	int fd = fetch_fd("raw");
	CHECK(fd >= 0);
	CUmemGenericAllocationHandle h;
	CHECK_CU(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	CHECK(h >> 48 != 0x5ea1); /* the driver's handle: untracked */
	CUdeviceptr va;
	CHECK_CU(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
	CHECK_CU(cuMemMap(va, 4 * MiB, 0, h, 0));
	CUmemAccessDesc acc = emu_access(0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CHECK_CU(cuMemSetAccess(va, 4 * MiB, &acc, 1));
	CHECK(emu_pattern_ok((const unsigned char *)(uintptr_t)va, 4 * MiB, 3));
	struct topo_participant me;
	if (shim_inspect(0, &me) == 0) {
		CHECK_EQ(me.nallocs, 0);
		CHECK_EQ(me.nmaps, 0);
		topo_free(&me);
	}
	emu_unmap_free(va, 4 * MiB, h);
	CHECK_EQ(shim_fds_settle(fds), fds);
	target_stop(&r);
}

static void refusals(void)
{
	int fds = shim_fds_quiet();
	CUmemGenericAllocationHandle h;
	/* A capability whose creator is gone: a clear failure, nothing leaked. */
	struct target a;
	const char *serve[] = {"--serve", NULL};
	if (under_shim(&a, "gone", serve) < 0)
		return;
	int cap = fetch_fd("gone");
	CHECK(cap >= 0);
	target_stop(&a);
	CHECK_CU_EQ(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)cap, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		    CUDA_ERROR_INVALID_VALUE);
	close(cap);
	/* Something that looks like nothing we know is passed to the driver, which refuses it. */
	int junk = memfd_create("junk", MFD_CLOEXEC);
	CHECK_EQ(write(junk, "CSCPxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 68), 68);
	CHECK_CU_EQ(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)junk,
						   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
		    CUDA_ERROR_INVALID_VALUE);
	close(junk);
	CHECK_EQ(shim_fds_settle(fds), fds);
}

int main(int argc, char **argv)
{
	shim_reexec(argc, argv);
	static char launcher[PATH_MAX];
	snprintf(launcher, sizeof(launcher), "%s/../../bin/snapshot-cuda-vmm-launch", test_exe_dir());
	launcher_argv[0] = launcher;
	CHECK_CU(cuInit(0));
	CUcontext ctx;
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK_CU(cuCtxSetCurrent(ctx));
	target_dir_make("caps");
	test_run("two processes share an allocation through a capability", two_processes);
	test_run("a capability dup'ed, cached and forwarded by a third process redeems", forwarded_through_a_third);
	test_run("the creator let go: a cached capability is refused while a peer holds only an import",
		 creator_let_go);
	test_run("a raw (non-capability) FD imports and stays untracked", raw_fd_untracked);
	test_run("capabilities of a dead creator and look-alike FDs are refused", refusals);
	target_dir_remove();
	return shim_done();
}
