/* SPDX-License-Identifier: MIT */
/* The shim's multicast records in one process (DESIGN.md §8): a member stays
 * anchored by its bind after the application drops its handle, records go when
 * their last reference goes, and a multicast handle imported from a raw FD
 * (not a capability) makes QUIESCE refuse, since a native checkpoint would hang
 * on an object the shim cannot take down. */
#include <sys/socket.h>
#include <sys/stat.h>

#include "shim_util.h"

static char state_dir[PATH_MAX + 16];

static struct coord_options options(void)
{
	return (struct coord_options){.timeout_ms = 10000, .content = PROTO_CONTENT_HOST, .dir = state_dir};
}

static int prepare(struct coord_report *r)
{
	struct coord_target t;
	shim_endpoint_of(getpid(), &t);
	struct coord_options o = options();
	int rc = coord_prepare(&t, 1, &o, r);
	if (rc)
		printf("  prepare: %s\n", r->error);
	return rc;
}

static int rebuild(void)
{
	struct coord_target t;
	shim_endpoint_of(getpid(), &t);
	struct coord_options o = options();
	struct coord_report r;
	int rc = coord_abort(&t, 1, &o, &r);
	if (rc)
		printf("  abort: %s\n", r.error);
	return rc;
}

/* A 2 MiB multicast object on device 0 with a member allocation bound to it. */
static CUmemGenericAllocationHandle mc_with_member(CUmemGenericAllocationHandle *mem)
{
	CUmulticastObjectProp mp = {.numDevices = 1,
				    .size = 2 * MiB,
				    .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	CUmemAllocationProp p = emu_prop(0);
	CUmemGenericAllocationHandle mc = 0;
	CHECK_CU(cuMulticastCreate(&mc, &mp));
	CHECK_CU(cuMulticastAddDevice(mc, 0));
	CHECK_CU(cuMemCreate(mem, 2 * MiB, &p, 0));
	CHECK_CU(cuMulticastBindMem(mc, 0, *mem, 0, 2 * MiB, 0));
	return mc;
}

/* Inspects this process: the shim tracks so many allocations, multicast
 * objects and binds. t is left for more checks (topo_free it). */
static void inspect_expect(struct topo_participant *t, int allocs, int mcs, int binds)
{
	CHECK_EQ(shim_inspect(0, t), 0);
	CHECK_EQ(t->nallocs, allocs);
	CHECK_EQ(t->nmcs, mcs);
	CHECK_EQ(t->nbinds, binds);
}

static void member_anchored_by_bind(void)
{
	CUmemGenericAllocationHandle mem, mc = mc_with_member(&mem);
	/* The application lets go of the member: the bind holds it, and so does the shim. */
	CHECK_CU(cuMemRelease(mem));
	struct topo_participant t;
	inspect_expect(&t, 1, 1, 1);
	if (t.nallocs == 1) {
		CHECK_EQ(t.allocs[0].handles, 0);
		CHECK_EQ(t.allocs[0].binds, 1);
		CHECK_EQ(t.allocs[0].shared, 1); /* a member is shared memory */
	}
	topo_free(&t);
	CHECK_EQ(emu_live_allocs(), 1); /* the member's memory */
	/* Prepare copies it out and releases everything; the rebuild brings it back. */
	struct coord_report r;
	CHECK_EQ(prepare(&r), 0);
	CHECK_EQ(r.bytes, 2 * MiB);
	CHECK_EQ(emu_live_allocs(), 0);
	CHECK_EQ(rebuild(), 0);
	CHECK_EQ(emu_live_allocs(), 1);
	inspect_expect(&t, 1, 1, 1);
	CHECK(t.nbinds == 1 && !t.binds[0].detached);
	topo_free(&t);
	/* Unbound, nothing refers to the member any more: record and memory go. */
	CHECK_CU(cuMulticastUnbind(mc, 0, 0, 2 * MiB));
	inspect_expect(&t, 0, 1, 0);
	topo_free(&t);
	CHECK_EQ(emu_live_allocs(), 0);
	CHECK_CU(cuMemRelease(mc));
	CHECK_EQ(emu_live_allocs(), 0);
	inspect_expect(&t, 0, 0, 0);
	topo_free(&t);
}

static void object_released_while_bound(void)
{
	CUmemGenericAllocationHandle mem, mc = mc_with_member(&mem);
	/* The object goes, and its binds with it; the member stays the application's. */
	CHECK_CU(cuMemRelease(mc));
	struct topo_participant t;
	inspect_expect(&t, 1, 0, 0);
	CHECK(t.nallocs == 1 && t.allocs[0].binds == 0 && t.allocs[0].handles == 1);
	topo_free(&t);
	CHECK_CU(cuMemRelease(mem));
	CHECK_EQ(emu_live_allocs(), 0);
}

/* A process without the shim (this program again, uninterposed) makes a
 * multicast object and hands us the driver's raw FD, then waits for a byte. */
static int raw_child(int sock)
{
	CUmulticastObjectProp p = {.numDevices = 1,
				   .size = 2 * MiB,
				   .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	CUmemGenericAllocationHandle mc;
	int fd = -1;
	char byte;
	if (emu_use_device(0) || cuMulticastCreate(&mc, &p) ||
	    cuMemExportToShareableHandle(&fd, mc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) ||
	    test_send_fd(sock, fd))
		return 1;
	return read(sock, &byte, 1) == 1 ? 0 : 1;
}

static void raw_fd_multicast_refused(void)
{
	int sv[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid_t child = fork();
	if (child == 0) {
		char arg[16];
		snprintf(arg, sizeof(arg), "%d", sv[1]);
		unsetenv("LD_PRELOAD");
		execl("/proc/self/exe", "test_multicast", "--raw-multicast-child", arg, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	int fd = test_recv_fd(sv[0]);
	CHECK(fd >= 0);
	CUmemGenericAllocationHandle raw = 0;
	/* Not a capability: passed through, a raw handle the shim does not track. */
	CHECK_CU(cuMemImportFromShareableHandle(&raw, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	CHECK(write(sv[0], "x", 1) == 1);
	close(sv[0]);
	test_wait_child(child, 10000);
	CHECK(raw >> 48 != 0x5ea1);
	CHECK_CU(cuMulticastAddDevice(raw, 0)); /* in use: now the shim knows */
	struct coord_report r;
	CHECK_EQ(prepare(&r), -1);
	CHECK(strstr(r.error, "imported from raw file descriptors") != NULL);
	CHECK_EQ(r.status, PROTO_E_UNRESTORABLE);
	CHECK(strstr(r.error, "every participant was rebuilt") == NULL || r.aborted);
	/* Nothing changed: still ACTIVE; once released, prepare goes ahead. */
	struct topo_participant t;
	CHECK_EQ(shim_inspect(0, &t), 0);
	CHECK_EQ(t.phase, 1);
	topo_free(&t);
	CHECK_CU(cuMemRelease(raw));
	CHECK_EQ(prepare(&r), 0);
	CHECK_EQ(rebuild(), 0);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--raw-multicast-child"))
		return raw_child(atoi(argv[2]));
	shim_reexec(argc, argv);
	CHECK_CU(emu_use_device(0));
	snprintf(state_dir, sizeof(state_dir), "%s/state", shim_ctl);
	mkdir(state_dir, 0700);
	test_run("a bound member stays anchored after its handle is released", member_anchored_by_bind);
	test_run("releasing a bound multicast object drops its binds", object_released_while_bound);
	test_run("a multicast handle imported from a raw FD: QUIESCE refuses", raw_fd_multicast_refused);
	return shim_done();
}
