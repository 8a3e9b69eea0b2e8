/* SPDX-License-Identifier: MIT */
/* The real NCCL over two simulated nodes (DESIGN.md §15, §16): one
 * communicator of 4 ranks, 2 on each node (examples/nccl/nccl_group --world 4,
 * one program per node in the node's network namespace, a different
 * NCCL_HOSTID per node: NET/Socket between the nodes, P2P within one), each
 * node's share a tree of its own under its own `cusnap run`:
 *   - group checkpoint with --tcp-established on both nodes (NCCL's bootstrap
 *     and proxy connections cross the bridge), restored together;
 *   - the same through plain criu dump and restore with cusnap's plugin on
 *     each node, as one group (its settings in CRIU's environment).
 * After restore-complete every rank checks its bytes and the marks through its
 * imports (within its node), splits a communicator off the restored one over
 * the restored bootstrap connections (across the nodes), enqueues collectives
 * on both and tears down through NCCL. */
#include "group_util.h"

static char criu[PATH_MAX], group_bin[PATH_MAX + 32], ld_path[2 * PATH_MAX + 32], topo_env[PATH_MAX + 48],
	id_file[PATH_MAX + 32];

/* Node i's share (ranks 2i, 2i + 1 of 4) under cusnap run in the node's
 * network namespace, started; both waited for until ready for a snapshot. */
static int shares_start(struct group g[2], const char *tag)
{
	char cusnap[PATH_MAX], name[2][32], hostid[2][32], first[2][4];
	cusnap_path(cusnap, sizeof(cusnap));
	unlink(id_file);
	for (int i = 0; i < 2; i++) {
		snprintf(name[i], sizeof(name[i]), "%s-%c", tag, 'a' + i);
		snprintf(hostid[i], sizeof(hostid[i]), "NCCL_HOSTID=cusnap-node-%c", 'a' + i);
		snprintf(first[i], sizeof(first[i]), "%d", 2 * i);
		const char *argv[] = {"/usr/bin/nsenter", node_ns[i], cusnap,      "run", "--",      group_bin,
				      "--ranks",          "2",        "--world",   "4",   "--first", first[i],
				      "--id-file",        id_file,    "--timeout", "180", NULL};
		/* (NCCL_MAX_NCHANNELS, NCCL_BUFFSIZE: as test_nccl, a tenth of the bytes) */
		char *env[] = {ld_path,
			       topo_env,
			       "CUEMU_DEVICES=2",
			       hostid[i],
			       i ? "CUEMU_UUID_SEED=cusnap-node-b" : "CUEMU_UUID_SEED=cusnap-node-a",
			       "NCCL_SOCKET_IFNAME=eth0",
			       "NCCL_NVLS_ENABLE=0",
			       "NCCL_MAX_NCHANNELS=2",
			       "NCCL_BUFFSIZE=262144",
			       "NCCL_DEBUG=INFO",
			       "NCCL_DEBUG_SUBSYS=INIT",
			       NULL};
		group_spawn_argv(&g[i], name[i], argv, env, NULL);
	}
	for (int i = 0; i < 2; i++)
		if (group_wait_ready(&g[i], name[i]) < 0) {
			group_kill(&g[!i]);
			return -1;
		}
	return 0;
}

/* Node i's restored share (its root) passed: every rank through its checks
 * after restore-complete, the split across the nodes included. */
static void share_passes(struct group *g, pid_t root)
{
	CHECK(root > 0);
	if (root <= 0)
		return;
	int status = test_wait_child(root, 180000);
	char *log = e2e_log_all(g->log);
	if (!(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0))
		test_fail(__FILE__, __LINE__, "the restored share did not pass; its log:\n%s", log ? log : "");
	CHECK_EQ(count_of(log, "after release: bytes, marks through imports, ncclCommSplit and collectives"), 2);
	CHECK_EQ(count_of(log, "PASS nccl_group rank"), 2);
	CHECK_EQ(count_of(log, "split off 4 ranks"), 2); /* (across the nodes) */
	/* Each rank's ring goes to the other node over NET/Socket, within a node
	 * over P2P (NCCL_DEBUG's lines for the channels it connects). */
	CHECK(count_of(log, "via NET/Socket") > 0);
	CHECK(count_of(log, "via P2P") > 0);
	if (status < 0)
		tree_kill(root);
	free(log);
}

/* cusnap checkpoint --tcp-established --group on both nodes, restored together. */
static void cusnap_group(void)
{
	struct group g[2];
	if (shares_start(g, "nccl") < 0)
		return;
	char ck[2][PATH_MAX + 32], pid[2][16], log[2][PATH_MAX + 32];
	pid_t p[2];
	for (int i = 0; i < 2; i++) {
		snprintf(ck[i], sizeof(ck[i]), "%s/nccl-ck-%d", e2e_root, i);
		snprintf(pid[i], sizeof(pid[i]), "%d", (int)g[i].root);
		const char *args[] = {"checkpoint",    "--pid",  pid[i],   "--dir", ck[i],
				      "--control-dir", g[i].ctl, "--criu", criu,    "--tcp-established",
				      "--timeout",     "60000",  NULL};
		p[i] = on_node(i, "nccl", args, log[i]);
	}
	for (int i = 0; i < 2; i++)
		NODE_OK(p[i], log[i]);
	for (int i = 0; i < 2; i++)
		group_dumped(&g[i]);
	for (int i = 0; i < 2; i++) {
		const char *args[] = {"restore", "--dir", ck[i], "--criu", criu, "--timeout", "60000", NULL};
		p[i] = on_node(i, "nccl", args, log[i]);
	}
	for (int i = 0; i < 2; i++)
		NODE_OK(p[i], log[i]);
	for (int i = 0; i < 2; i++)
		share_passes(&g[i], restored_root(ck[i]));
	reap_all();
}

/* The same through plain criu dump and restore with cusnap's plugin on each
 * node, as one group (file content, the plugin's default). */
static void plugin_group(void)
{
	struct group g[2];
	if (shares_start(g, "plug") < 0)
		return;
	char images[2][PATH_MAX + 32];
	criu_across_nodes(g, criu, "nccl-plug", "file", images);
	for (int i = 0; i < 2; i++)
		share_passes(&g[i], restored_root(images[i]));
	reap_all();
}

int main(void)
{
	test_require_criu(criu, sizeof(criu));
	e2e_init("nccl-nodes");
	if (getenv("CUSNAP_SANITIZER"))
		SKIP("NCCL and the example are not built with the sanitizers");
	snprintf(group_bin, sizeof(group_bin), "%s/nccl_group", examples_dir);
	if (access(group_bin, X_OK) != 0) /* (e2e/test_nccl says why, a failed build included) */
		SKIP("no %s: `make nccl` builds NCCL from its source", group_bin);
	group_util_init();
	snprintf(ld_path, sizeof(ld_path), "LD_LIBRARY_PATH=%s:%s/../lib", emu_dir, bin_dir);
	snprintf(id_file, sizeof(id_file), "%s/nccl-unique-id", e2e_root);
	char topo_file[PATH_MAX + 32], topo_bin[PATH_MAX + 32];
	snprintf(topo_file, sizeof(topo_file), "%s/topo-pcie-2.xml", e2e_root);
	snprintf(topo_bin, sizeof(topo_bin), "%s/cuemu-topo", bin_dir);
	snprintf(topo_env, sizeof(topo_env), "NCCL_TOPO_FILE=%s", topo_file);
	char *topo[] = {topo_bin, "--kind", "pcie", "--devices", "2", NULL};
	if (test_run_cmd(topo, topo_file, 10000) != 0)
		SKIP("cuemu-topo --kind pcie --devices 2 failed");
	nodes_up("nccl-nodes");
	test_run("NCCL, 2 ranks on each of two nodes: group checkpoint --tcp-established, restored together; split "
		 "across the nodes after",
		 cusnap_group);
	test_run("NCCL, 2 ranks on each of two nodes: plain criu dump/restore --tcp-established with the plugin, as "
		 "one group; split across the nodes after",
		 plugin_group);
	return e2e_done();
}
