/* SPDX-License-Identifier: MIT */
/* fork(): a child forked before CUDA init has its own identity and endpoint;
 * a child of a process that tracks state gets a clear refusal. */
#include <sys/stat.h>
#include <sys/wait.h>

#include "shim_util.h"

static void create_one(CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp p = emu_prop(0);
	CHECK_CU(emu_use_device(0));
	CHECK_CU(cuMemCreate(h, 2 * MiB, &p, 0));
}

static void fork_before_init(void)
{
	int up[2], down[2]; /* child -> parent: its id; parent -> child: done looking */
	CHECK_EQ(pipe(up), 0);
	CHECK_EQ(pipe(down), 0);
	pid_t pid = fork();
	if (pid == 0) {
		CUmemGenericAllocationHandle h;
		create_one(&h);
		struct topo_participant t;
		if (shim_inspect(0, &t) == 0) {
			CHECK_EQ(t.nspid, getpid());
			CHECK_EQ(t.nallocs, 1);
			CHECK(write(up[1], t.id.b, ID_LEN) == ID_LEN);
			topo_free(&t);
		}
		char c;
		close(down[1]);
		CHECK_EQ(read(down[0], &c, 1), 0); /* wait for the parent to look */
		_exit(test_failures ? 1 : 0);
	}
	close(up[1]);
	close(down[0]);
	struct cusnap_id child_id;
	CHECK_EQ(read(up[0], child_id.b, ID_LEN), ID_LEN);
	CUmemGenericAllocationHandle h;
	create_one(&h);
	struct topo_participant me, child;
	if (shim_inspect(0, &me) == 0 && shim_inspect(pid, &child) == 0) {
		CHECK(!id_equal(&me.id, &child.id)); /* its own identity */
		CHECK(id_equal(&child.id, &child_id));
		CHECK_EQ(child.nspid, pid); /* its own endpoint, named after its PID */
		CHECK_EQ(me.nallocs, 1);
		topo_free(&me);
		topo_free(&child);
	}
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/cuda-vmm-%d.sock", shim_ctl, pid);
	CHECK_EQ(access(path, F_OK), 0);
	close(up[0]);
	close(down[1]);
	int status = test_wait_child(pid, 10000);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* A child of this (tracking) process: tracked calls are refused, clearly. */
	pid = fork();
	if (pid == 0) {
		int rc = cuMemRelease(h);
		CUmemAllocationProp p = emu_prop(0);
		CUmemGenericAllocationHandle h2;
		int rc2 = cuMemCreate(&h2, 2 * MiB, &p, 0);
		_exit(rc == CUDA_ERROR_NOT_SUPPORTED && rc2 == CUDA_ERROR_NOT_SUPPORTED ? 0 : 1);
	}
	status = test_wait_child(pid, 10000);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_CU(cuMemRelease(h)); /* the parent is unaffected */
}

int main(int argc, char **argv)
{
	shim_reexec(argc, argv);
	test_run("fork before CUDA init: own identity and endpoint; fork after: refused", fork_before_init);
	return shim_done();
}
