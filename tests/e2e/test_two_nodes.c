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
#include <sched.h>
#include <sys/prctl.h>

#include "group_util.h"

static char cusnap[PATH_MAX], criu[PATH_MAX], plugins[PATH_MAX], libcuda[PATH_MAX + 32];
static const char *const node_ip[2] = {"198.18.0.2", "198.18.0.3"};
static const char *const node_ns[2] = {"--net=/run/netns/cusnap-node-a", "--net=/run/netns/cusnap-node-b"};

static int sh(const char *cmd)
{
	char *out = NULL;
	int rc = tool(&out, NULL, "/bin/sh", "-ec", cmd, NULL);
	if (rc)
		printf("  `%s` exited %d: %s\n", cmd, rc, out ? out : "");
	free(out);
	return rc;
}

/* The bridge (198.18.0.1) and the two nodes on it, in network and mount
 * namespaces of this test's own (the nodes' names in a /run/netns of its
 * own): 0, or -1 (said). */
static int nodes_make(void)
{
	if (unshare(CLONE_NEWNS | CLONE_NEWNET) < 0) {
		printf("  unshare: %s\n", strerror(errno));
		return -1;
	}
	return sh("mount --make-rprivate / && mkdir -p /run/netns && mount -t tmpfs -o mode=0755 cusnap-nodes "
		  "/run/netns && "
		  "ip link add cusnap-br type bridge && ip addr add 198.18.0.1/24 dev cusnap-br && "
		  "ip link set cusnap-br up && ip link set lo up && "
		  "for n in a:2 b:3; do name=${n%:*} ip=${n#*:}; ip netns add cusnap-node-$name; "
		  "ip link add cusnap-$name type veth peer name eth0 netns cusnap-node-$name; "
		  "ip link set cusnap-$name master cusnap-br up; "
		  "ip -n cusnap-node-$name addr add 198.18.0.$ip/24 dev eth0; "
		  "ip -n cusnap-node-$name link set eth0 up; ip -n cusnap-node-$name link set lo up; done");
}

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

/* cusnap ARGS... on node i as member n<i> of group NAME (its etcd on the bridge), started. */
static pid_t on_node(int i, const char *group, const char *const *args, char log[PATH_MAX + 32])
{
	static int runs;
	const char *argv[40] = {"/usr/bin/nsenter", node_ns[i], cusnap};
	int k = 3;
	for (int j = 0; args[j]; j++)
		argv[k++] = args[j];
	const char *tail[] = {"--group", group,    "--members",       "2",     "--member", i ? "n1" : "n0",
			      "--etcd",  etcd_url, "--group-timeout", "40000", NULL};
	for (int j = 0; tail[j]; j++)
		argv[k++] = tail[j];
	argv[k] = NULL;
	snprintf(log, PATH_MAX + 32, "%s/node-%d-%d.log", e2e_root, i, ++runs);
	return test_spawn((char *const *)argv, NULL, log);
}

static int wait_out(pid_t pid, const char *log, char **out)
{
	int st = test_wait_child(pid, 150000);
	*out = test_read_file(log);
	return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define NODE_OK(pid, log)                                                                                  \
	do {                                                                                               \
		char *o_;                                                                                  \
		int rc_ = wait_out((pid), (log), &o_);                                                     \
		if (rc_ != 0)                                                                              \
			test_fail(__FILE__, __LINE__, "node's command exited %d:\n%s", rc_, o_ ? o_ : ""); \
		free(o_);                                                                                  \
	} while (0)

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
	for (int i = 0; i < 2; i++) {
		pid_t root = restored_root(ck[i]);
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
		CHECK_EQ(wait_out(p[i], log[i], &out), i ? 1 : 0);
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
	char log[2][PATH_MAX + 32], images[2][PATH_MAX + 32], pidfile[2][PATH_MAX + 32], pid[2][16], member[2][32],
		e_etcd[96];
	snprintf(e_etcd, sizeof(e_etcd), "CUSNAP_ETCD=%s", etcd_url);
	pid_t p[2];
	for (int op = 0; op < 2; op++) {
		for (int i = 0; i < 2; i++) {
			snprintf(images[i], sizeof(images[i]), "%s/plug-images-%d", e2e_root, i);
			snprintf(pidfile[i], sizeof(pidfile[i]), "%s/plug-%d.pid", e2e_root, i);
			snprintf(pid[i], sizeof(pid[i]), "%d", (int)g[i].root);
			snprintf(member[i], sizeof(member[i]), "CUSNAP_MEMBER=n%d", i);
			snprintf(log[i], sizeof(log[i]), "%s/plug-%s-%d.log", e2e_root, op ? "restore" : "dump", i);
			mkdir(images[i], 0700);
			char *env[] = {libcuda,
				       "CUSNAP_CONTENT=host",
				       "CUSNAP_GROUP=plugged",
				       "CUSNAP_MEMBERS=2",
				       member[i],
				       e_etcd,
				       "CUSNAP_GROUP_TIMEOUT_MS=40000",
				       NULL};
			char *dump[] = {"/usr/bin/nsenter",
					(char *)node_ns[i],
					criu,
					"dump",
					"-t",
					pid[i],
					"-D",
					images[i],
					"-o",
					"dump.log",
					"-v4",
					"--libdir",
					plugins,
					"--tcp-established",
					"--shell-job",
					NULL};
			char *restore[] = {"/usr/bin/nsenter",
					   (char *)node_ns[i],
					   criu,
					   "restore",
					   "-d",
					   "-D",
					   images[i],
					   "-o",
					   "restore.log",
					   "-v4",
					   "--libdir",
					   plugins,
					   "--tcp-established",
					   "--shell-job",
					   "--pidfile",
					   pidfile[i],
					   NULL};
			p[i] = test_spawn(op ? restore : dump, env, log[i]);
		}
		for (int i = 0; i < 2; i++)
			NODE_OK(p[i], log[i]);
		for (int i = 0; i < 2 && !op; i++)
			group_dumped(&g[i]);
	}
	for (int i = 0; i < 2; i++) {
		char *text = test_read_file(pidfile[i]);
		pid_t root = text ? (pid_t)atoi(text) : 0;
		free(text);
		CHECK(root > 0);
		if (root > 0)
			CHECK_EQ(restored_passes(&g[i], root), 2);
		text = e2e_log_all(g[i].log);
		CHECK_EQ(count_of(text, "tcp: token"), 2);
		free(text);
	}
}

int main(void)
{
	test_require_criu(criu, sizeof(criu));
	if (access("/usr/bin/nsenter", X_OK) || (access("/usr/sbin/ip", X_OK) && access("/sbin/ip", X_OK)))
		SKIP("nsenter or ip missing");
	e2e_init("two-nodes");
	group_util_init();
	snprintf(cusnap, sizeof(cusnap), "%s/cusnap", bin_dir);
	snprintf(plugins, sizeof(plugins), "%s/../lib/criu", bin_dir);
	snprintf(libcuda, sizeof(libcuda), "CUSNAP_LIBCUDA=%s/libcuda.so.1", emu_dir);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (nodes_make() < 0)
		SKIP("cannot make the two nodes' network namespaces here");
	etcd_host = "198.18.0.1";
	etcd_pid = etcd_launch("nodes", "http", NULL, NULL, etcd_url);
	atexit(etcd_stop);
	test_run("two nodes: group checkpoint --tcp-established and restore together; the link talks after", together);
	test_run("two nodes: node b restored 10 s after node a; the link talks after", staggered);
	test_run("two nodes: node b's CRIU fails after the boundary: a holds a checkpoint, b runs on; both say which",
		 fails_after_boundary);
	test_run("two nodes: plain criu dump --tcp-established and restore with the plugin, as one group",
		 plugin_across_nodes);
	return e2e_done();
}
