/* SPDX-License-Identifier: MIT */
/* One worker over two simulated nodes (DESIGN.md §16): two network namespaces
 * on a bridge with addresses from 198.18.0.0/24 (the benchmark range, inside
 * this test's own network namespace), etcd listening on the bridge, each node's
 * share of the worker in its node's namespace, linked to the other's by a TCP
 * connection between the nodes, and each node's cusnap (and CRIU) run in its
 * node's namespace:
 *   - group checkpoint with --tcp-established and group restore, together: the
 *     connection comes back, a token goes both ways after restore-complete;
 *   - the same with node b restored 10 s after node a (a waits at its boundary;
 *     CRIU's lock on b drops a's packets meanwhile, no reset);
 *   - plain criu dump and restore with cusnap's plugin on each node, as one
 *     group (its settings in CRIU's environment).
 * Each restored tree verifies its bytes and sharing itself. */
#include "group_util.h"

static char criu[PATH_MAX];

/* The two trees, a listening on its node's address, b connecting to it. */
static void trees_start_linked(struct group g[2], const char *tag)
{
	int port = 20000 + (int)(getpid() % 20000);
	char listen_on[64], connect_to[64], name[2][24];
	snprintf(listen_on, sizeof(listen_on), "VMM_GROUP_TCP=listen:%s:%d", node_ip[0], port);
	snprintf(connect_to, sizeof(connect_to), "VMM_GROUP_TCP=connect:%s:%d", node_ip[0], port);
	/* (and a stream between them, a byte a millisecond: bench/two_nodes.sh reads its longest gap) */
	char *env[2][3] = {{listen_on, "VMM_GROUP_TCP_STREAM=1", NULL}, {connect_to, "VMM_GROUP_TCP_STREAM=1", NULL}};
	for (int i = 0; i < 2; i++) {
		snprintf(name[i], sizeof(name[i]), "%s-%c", tag, 'a' + i);
		const char *wrapper[] = {"/usr/bin/nsenter", node_ns[i], NULL}; /* (it execs: the root) */
		group_launch(&g[i], name[i], 1, 2, false, wrapper, env[i], NULL, false);
	}
	for (int i = 0; i < 2; i++)
		CHECK_EQ(group_wait_ready(&g[i], name[i]), 0);
}

/* The linked trees restored from dirs passed: each verifies its bytes and
 * sharing, and its stream carried a token after restore-complete too. */
static void linked_pass(struct group g[2], char dirs[2][PATH_MAX + 32], const char *tag)
{
	for (int i = 0; i < 2; i++) {
		pid_t root = restored_root(dirs[i]);
		CHECK(root > 0);
		if (root > 0)
			CHECK_EQ(restored_passes(&g[i], root), 2);
		char *text = e2e_log_all(g[i].log);
		CHECK_EQ(count_of(text, "tcp: token"), 2); /* (ready, and after restore-complete) */
		const char *gap = text ? strstr(text, "the stream's longest gap") : NULL;
		if (gap) /* (a figure for bench/two_nodes.sh; no test asserts a time) */
			printf("  %s: %.*s\n", tag, (int)strcspn(gap, "\n"), gap);
		free(text);
	}
}

/* Checkpointed together with --tcp-established, restored b stagger_s after a. */
static void across_nodes(const char *tag, int stagger_s)
{
	struct group g[2];
	trees_start_linked(g, tag);
	char ck[2][PATH_MAX + 32], pid[2][16], log[2][PATH_MAX + 32];
	pid_t p[2];
	for (int i = 0; i < 2; i++) {
		snprintf(ck[i], sizeof(ck[i]), "%s/%s-ck-%d", e2e_root, tag, i);
		snprintf(pid[i], sizeof(pid[i]), "%d", (int)g[i].root);
		const char *args[] = {"checkpoint", "--pid",
				      pid[i],       "--dir",
				      ck[i],        "--control-dir",
				      g[i].ctl,     "--criu",
				      criu,         "--tcp-established",
				      NULL};
		p[i] = on_node(i, tag, args, log[i]);
	}
	for (int i = 0; i < 2; i++)
		NODE_OK(p[i], log[i]);
	for (int i = 0; i < 2; i++)
		group_dumped(&g[i]);
	for (int i = 0; i < 2; i++) {
		if (i && stagger_s)
			sleep((unsigned)stagger_s); /* (a restored, waiting at its boundary, locked) */
		const char *args[] = {"restore", "--dir", ck[i], "--criu", criu, NULL};
		p[i] = on_node(i, tag, args, log[i]);
	}
	for (int i = 0; i < 2; i++)
		NODE_OK(p[i], log[i]);
	linked_pass(g, ck, tag);
}

static void together(void)
{
	across_nodes("tcp2", 0);
}

static void staggered(void)
{
	across_nodes("tcp10", 10);
}

/* Node b's CRIU fails after the boundary (both crossed): a holds a checkpoint,
 * b is undone and runs on; each node's results say which holds one. */
static void fails_after_boundary(void)
{
	struct group g[2];
	trees_start_linked(g, "late");
	char ck[2][PATH_MAX + 32], pid[2][16], log[2][PATH_MAX + 32], fake[PATH_MAX + 32], *out;
	snprintf(fake, sizeof(fake), "%s/fake-criu", e2e_root);
	test_write_file(fake, "#!/bin/sh\necho 'Error (fake): refusing to dump' >&2\nexit 1\n");
	chmod(fake, 0755);
	pid_t p[2];
	for (int i = 0; i < 2; i++) {
		snprintf(ck[i], sizeof(ck[i]), "%s/late-ck-%d", e2e_root, i);
		snprintf(pid[i], sizeof(pid[i]), "%d", (int)g[i].root);
		const char *args[] = {"checkpoint",
				      "--pid",
				      pid[i],
				      "--dir",
				      ck[i],
				      "--control-dir",
				      g[i].ctl,
				      "--criu",
				      i ? fake : criu,
				      "--tcp-established",
				      NULL};
		p[i] = on_node(i, "late", args, log[i]);
	}
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(node_wait(p[i], log[i], &out), i ? 1 : 0);
		CHECK_CONTAINS(out, "every one of the 2 members ready: crossing");
		CHECK_CONTAINS(out, "member n0: ok (it holds a checkpoint)");
		CHECK_CONTAINS(out, "member n1: failed: CRIU dump failed");
		free(out);
	}
	group_dumped(&g[0]);
	untouched(&g[1]); /* (undone in place: every process running, every participant active) */
	CHECK_NOTHING_SAID(g[1].ctl);
	group_kill(&g[1]);
}

/* Plain criu dump --tcp-established and criu restore with cusnap's plugin on
 * each node, as one group (its settings in CRIU's environment). */
static void plugin_across_nodes(void)
{
	struct group g[2];
	trees_start_linked(g, "plug");
	char images[2][PATH_MAX + 32];
	criu_across_nodes(g, criu, "plugged", "host", images);
	linked_pass(g, images, "plug");
}

int main(void)
{
	test_require_criu(criu, sizeof(criu));
	e2e_init("two-nodes");
	group_util_init();
	nodes_up("nodes");
	test_run("two nodes: group checkpoint --tcp-established and restore together; the link talks after", together);
	test_run("two nodes: node b restored 10 s after node a; the link talks after", staggered);
	test_run("two nodes: node b's CRIU fails after the boundary: a holds a checkpoint, b runs on; both say which",
		 fails_after_boundary);
	test_run("two nodes: plain criu dump --tcp-established and restore with the plugin, as one group",
		 plugin_across_nodes);
	return e2e_done();
}
