/* SPDX-License-Identifier: MIT */
/* Two simulated nodes (tests/e2e/group_util.h, DESIGN.md §16): network
 * namespaces on a bridge of this test's own, cusnap run in a node's. */
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "../e2e/group_util.h"

const char *const node_ip[2] = {"198.18.0.2", "198.18.0.3"};
const char *const node_ns[2] = {"--net=/run/netns/cusnap-node-a", "--net=/run/netns/cusnap-node-b"};

static int sh(const char *cmd)
{
	char *out = NULL;
	int rc = tool(&out, NULL, "/bin/sh", "-ec", cmd, NULL);
	if (rc)
		printf("  `%s` exited %d: %s\n", cmd, rc, out ? out : "");
	free(out);
	return rc;
}

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

void nodes_up(const char *name)
{
	if (access("/usr/bin/nsenter", X_OK) || (access("/usr/sbin/ip", X_OK) && access("/sbin/ip", X_OK)))
		SKIP("nsenter or ip missing");
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (nodes_make() < 0)
		SKIP("cannot make the two nodes' network namespaces here");
	etcd_host = "198.18.0.1";
	etcd_pid = etcd_launch(name, "http", NULL, NULL, etcd_url);
	atexit(etcd_stop);
}

pid_t on_node(int i, const char *group, const char *const *args, char log[PATH_MAX + 32])
{
	static int runs;
	char cusnap[PATH_MAX];
	cusnap_path(cusnap, sizeof(cusnap));
	const char *argv[40] = {"/usr/bin/nsenter", node_ns[i], cusnap};
	int k = 3;
	for (int j = 0; args[j] && k < 28; j++)
		argv[k++] = args[j];
	const char *tail[] = {"--group", group,    "--members",       "2",     "--member", i ? "n1" : "n0",
			      "--etcd",  etcd_url, "--group-timeout", "40000", NULL};
	for (int j = 0; tail[j]; j++)
		argv[k++] = tail[j];
	argv[k] = NULL;
	snprintf(log, PATH_MAX + 32, "%s/node-%d-%d.log", e2e_root, i, ++runs);
	return test_spawn((char *const *)argv, NULL, log);
}

int node_wait(pid_t pid, const char *log, char **out)
{
	int st = test_wait_child(pid, 150000);
	*out = test_read_file(log);
	return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

pid_t criu_on_node(int i, bool restore, const char *criu, const char *group, pid_t pid, const char *images,
		   const char *content, char log[PATH_MAX + 32])
{
	static int runs;
	char plugins[PATH_MAX + 16], libcuda[PATH_MAX + 32], member[32], e_group[300], e_etcd[96], e_content[64],
		tree[16], pidfile[PATH_MAX + 32];
	snprintf(plugins, sizeof(plugins), "%s/../lib/criu", bin_dir);
	snprintf(libcuda, sizeof(libcuda), "CUSNAP_LIBCUDA=%s/libcuda.so.1", emu_dir);
	snprintf(member, sizeof(member), "CUSNAP_MEMBER=n%d", i);
	snprintf(e_group, sizeof(e_group), "CUSNAP_GROUP=%s", group);
	snprintf(e_etcd, sizeof(e_etcd), "CUSNAP_ETCD=%s", etcd_url);
	snprintf(e_content, sizeof(e_content), "CUSNAP_CONTENT=%s", content);
	snprintf(tree, sizeof(tree), "%d", (int)pid);
	snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", images);
	snprintf(log, PATH_MAX + 32, "%s/criu-node-%d-%d.log", e2e_root, i, ++runs);
	mkdir(images, 0700);
	char *env[] = {libcuda, e_content, e_group, "CUSNAP_MEMBERS=2", member, e_etcd, "CUSNAP_GROUP_TIMEOUT_MS=40000",
		       NULL};
	const char *argv[26] = {"/usr/bin/nsenter",
				node_ns[i],
				criu,
				restore ? "restore" : "dump",
				"-D",
				images,
				"-o",
				restore ? "restore.log" : "dump.log",
				"-v4",
				"--libdir",
				plugins,
				"--tcp-established",
				"--shell-job",
				"--network-lock",
				"nftables"};
	int k = 15; /* (nftables: a machine without iptables, CI's before podman brings it, locks so too) */
	if (restore) {
		argv[k++] = "-d";
		argv[k++] = "--pidfile";
		argv[k++] = pidfile;
	} else {
		argv[k++] = "-t";
		argv[k++] = tree;
	}
	argv[k] = NULL;
	return test_spawn((char *const *)argv, env, log);
}

void criu_across_nodes(struct group g[2], const char *criu, const char *group, const char *content,
		       char images[2][PATH_MAX + 32])
{
	char log[2][PATH_MAX + 32];
	pid_t p[2];
	for (int op = 0; op < 2; op++) {
		for (int i = 0; i < 2; i++) {
			snprintf(images[i], PATH_MAX + 32, "%s/%s-images-%d", e2e_root, group, i);
			p[i] = criu_on_node(i, op, criu, group, g[i].root, images[i], content, log[i]);
		}
		for (int i = 0; i < 2; i++)
			NODE_OK(p[i], log[i]);
		for (int i = 0; i < 2 && !op; i++)
			group_dumped(&g[i]);
	}
}
