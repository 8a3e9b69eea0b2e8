/* SPDX-License-Identifier: MIT */
/* Workers with network connections through cusnap checkpoint and restore
 * (DESIGN.md §9.4): the example group's parent holding a TCP listener and a
 * connection of its own, with TIME_WAIT entries of its earlier connections on
 * its port (as NCCL's bootstrap leaves a rank; VMM_GROUP_TCP=self). A CRIU
 * that cannot dump inet sockets on this kernel, and a connection without
 * --tcp-established, are refused with nothing done; checkpointed with
 * --tcp-established, the group is restored at once on the same host (its own
 * TIME_WAIT entries cleared), talks over its restored connection and accepts
 * on its restored listener; a port another process took is named, nothing
 * made; restored again at once after its first restore exited, it passes
 * again. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/utsname.h>

#include "cusnap/json.h"
#include "cusnap/manifest.h"
#include "e2e_util.h"

static char cusnap[PATH_MAX], criu[PATH_MAX];
static char *tcp_self[] = {"VMM_GROUP_TCP=self", NULL};

static int checkpoint(struct group *g, const char *dir, const char *criu_bin, bool tcp, char **out)
{
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", g->root);
	return tool(out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", dir, "--control-dir", g->ctl, "--criu",
		    criu_bin, "--timeout", "60000", tcp ? "--tcp-established" : NULL, NULL);
}

static int restore(const char *dir, char **out)
{
	return tool(out, NULL, cusnap, "restore", "--dir", dir, "--criu", criu, "--timeout", "60000", NULL);
}

/* The port the group's parent listens on (its log says), or 0. */
static int listening_port(struct group *g)
{
	char *log = e2e_log_all(g->log);
	const char *at = log ? strstr(log, "tcp: listening on 127.0.0.1:") : NULL;
	int port = at ? atoi(at + strlen("tcp: listening on 127.0.0.1:")) : 0;
	free(log);
	return port;
}

/* The manifest's network record of dir: how many TIME_WAIT entries and
 * sockets it lists (-1: none). */
static int recorded(const char *dir, const char *what)
{
	struct manifest m;
	char err[512];
	if (manifest_load(dir, &m, err, sizeof(err)) < 0)
		return -1;
	const json_t *net = json_object_get(m.root, "network");
	int n = json_is_object(net) ? (int)json_array_size(json_object_get(net, what)) : -1;
	manifest_free(&m);
	return n;
}

/* The sockets of the manifest's network record with SO_REUSEPORT set, or -1. */
static int recorded_reuseport(const char *dir)
{
	struct manifest m;
	char err[512];
	if (manifest_load(dir, &m, err, sizeof(err)) < 0)
		return -1;
	const json_t *socks = json_object_get(json_object_get(m.root, "network"), "sockets");
	int n = 0;
	for (size_t i = 0; i < json_array_size(socks); i++)
		n += json_is_true(json_object_get(json_array_get(socks, i), "reuseport"));
	manifest_free(&m);
	return n;
}

/* This kernel as MAJOR * 1000 + MINOR. */
static int kernel_version(void)
{
	struct utsname u;
	int major = 0, minor = 0;
	if (uname(&u) == 0)
		sscanf(u.release, "%d.%d", &major, &minor);
	return major * 1000 + minor;
}

/* The group ran on after a refusal: it verifies itself when released. */
static void untouched_then_done(struct group *g)
{
	char *json = group_inspect(g);
	CHECK_EQ(count_of(json, "\"state\":\"running\""), 2);
	free(json);
	CHECK_EQ(group_finish(g), 2);
	group_kill(g);
}

/* CRIU 4.1.x on a kernel >= 6.16 cannot dump an inet socket: refused (69)
 * before anything changes, naming the socket and the fix. */
static void criu_too_old(void)
{
	char old[PATH_MAX];
	if (kernel_version() < 6016) {
		printf("  (skipped: kernels before 6.16 let CRIU 4.1 dump inet sockets)\n");
		return;
	}
	if (test_find_criu_old(old, sizeof(old)) != 0 || test_criu_version(old) >= 4002000) {
		printf("  (skipped: no CRIU 4.1 provisioned beside the current one)\n");
		return;
	}
	struct group g;
	if (group_start(&g, "old", 1, 2, false, NULL, tcp_self, NULL) < 0)
		return;
	char dir[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_EQ(checkpoint(&g, dir, old, true, &out), 69);
	CHECK_CONTAINS(out, "holds TCP 127.0.0.1:");
	CHECK_CONTAINS(out, "cannot dump inet sockets on kernel");
	CHECK_CONTAINS(out, "nothing done");
	CHECK_EQ(recorded(dir, "sockets"), -1); /* no manifest */
	free(out);
	untouched_then_done(&g);
}

/* A connection without --tcp-established: refused (64) before anything
 * changes (CRIU would fail after the prepare and the native checkpoint). */
static void needs_tcp_established(void)
{
	struct group g;
	if (group_start(&g, "plain", 1, 2, false, NULL, tcp_self, NULL) < 0)
		return;
	char dir[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	CHECK_SAYS(out, checkpoint(&g, dir, criu, false, &out), 64, "only with --tcp-established");
	untouched_then_done(&g);
}

/* A socket of this process on port (SO_REUSEADDR: TIME_WAIT entries on it do
 * not stop it; SO_REUSEPORT too when reuseport), listening: its descriptor, or -1. */
static int take_port_as(int port, bool reuseport)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int one = 1, s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (reuseport)
		setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (s >= 0 && (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 1) < 0)) {
		close(s);
		s = -1;
	}
	return s;
}

static int take_port(int port)
{
	return take_port_as(port, false);
}

/* Checkpointed with its connections, restored at once on this host (its own
 * TIME_WAIT entries cleared), passing; then its port taken by this process:
 * the restore names it and makes nothing; freed, restored again at once (the
 * first restore's connection closed into TIME_WAIT as it exited), passing. */
static void restore_at_once(void)
{
	struct group g;
	if (group_start(&g, "tcp", 1, 2, false, NULL, tcp_self, NULL) < 0)
		return;
	int port = listening_port(&g);
	CHECK(port > 0);
	char dir[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	int rc = checkpoint(&g, dir, criu, true, &out);
	if (!group_dump_ok(&g, rc, out))
		return;
	CHECK(recorded(dir, "sockets") >= 3);   /* the listener, both ends of the connection */
	CHECK(recorded(dir, "time_wait") >= 1); /* its earlier connections, still in TIME_WAIT */
	for (int round = 0; round < 3; round++) {
		if (round == 1) {
			/* Another process on the port: named, nothing made. (The tree's
			 * own TIME_WAIT entries would stop this bind: ss -K clears them.) */
			char filter[64];
			snprintf(filter, sizeof(filter), "( sport = :%d )", port);
			char *ss[] = {"/usr/bin/ss", "-K", "-t", "state", "time-wait", filter, NULL};
			CHECK_EQ(test_run_cmd(ss, "/dev/null", 10000), 0);
			int taken = take_port(port);
			CHECK(taken >= 0);
			char mine[48];
			snprintf(mine, sizeof(mine), "is taken by process %d", (int)getpid());
			char pidfile[PATH_MAX + 48];
			snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", dir);
			unlink(pidfile); /* (the first restore's) */
			CHECK_EQ(restore(dir, &out), 1);
			CHECK_CONTAINS(out, mine);
			CHECK_CONTAINS(out, "nothing done");
			free(out);
			CHECK(restored_root(dir) <= 0);
			close(taken);
			continue;
		}
		CHECK_EQ(restore(dir, &out), 0);
		if (round == 0)
			CHECK_CONTAINS(out, "TIME_WAIT entries of the checkpointed tree's own connections cleared");
		free(out);
		pid_t root = restored_root(dir);
		CHECK(root > 0);
		if (root <= 0)
			return;
		CHECK_EQ(restored_passes(&g, root), 2 * (round / 2 + 1)); /* (the log's lines so far) */
		char *log = e2e_log_all(g.log);
		CHECK_EQ(count_of(log, "token restored exchanged"), round / 2 + 1);
		CHECK_EQ(count_of(log, "the listener accepted a new connection"), round / 2 + 1);
		free(log);
	}
}

/* A listener with SO_REUSEPORT (NCCL's RAS port in every rank): the
 * checkpoint records it, and a restore goes on beside another listener of the
 * same uid on that port that set it too, as the kernel and plain CRIU allow
 * (before: "taken by process N", nothing made); one without it is still named. */
static void reuseport_peer(void)
{
	static char *env[] = {"VMM_GROUP_TCP=self", "VMM_GROUP_TCP_REUSEPORT=1", NULL};
	struct group g;
	if (group_start(&g, "reuse", 1, 2, false, NULL, env, NULL) < 0)
		return;
	int port = listening_port(&g);
	CHECK(port > 0);
	char dir[PATH_MAX + 32], *out, filter[64];
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	int rc = checkpoint(&g, dir, criu, true, &out);
	if (!group_dump_ok(&g, rc, out))
		return;
	CHECK_EQ(recorded_reuseport(dir), 1);
	snprintf(filter, sizeof(filter), "( sport = :%d )", port);
	char *ss[] = {"/usr/bin/ss", "-K", "-t", "state", "time-wait", filter, NULL};
	CHECK_EQ(test_run_cmd(ss, "/dev/null", 10000), 0);
	int plain = take_port_as(port, false);
	CHECK(plain >= 0);
	CHECK_SAYS(out, restore(dir, &out), 1, "is taken by process");
	close(plain);
	int peer = take_port_as(port, true);
	CHECK(peer >= 0);
	CHECK_EQ(restore(dir, &out), 0);
	free(out);
	pid_t root = restored_root(dir);
	CHECK(root > 0);
	if (root > 0)
		CHECK_EQ(restored_passes(&g, root), 2);
	close(peer);
}

/* CRIU's network lock accounted for: a --tcp-established checkpoint records it
 * (this namespace, CRIU's method); inspect --dir lists what of it still drops
 * the connections here; restored in another network namespace (a fresh one,
 * its loopback up; first down, refused with the fix), the restore removes the stale lock here (it was left for
 * good: 308 rules piled up on one machine), and inspect says none is left.
 * --unlock-network removes a lock no restore will lift (a checkpoint moved or
 * discarded); --tcp-close dumps the connections closed, with no lock. */
static void network_lock(void)
{
	static char *env[] = {"VMM_GROUP_TCP=self", NULL};
	struct group g;
	char dir[PATH_MAX + 32], *out, pid[16];
	if (group_start(&g, "lock", 1, 2, false, NULL, env, NULL) < 0)
		return;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	int rc = checkpoint(&g, dir, criu, true, &out);
	if (!group_dump_ok(&g, rc, out))
		return;
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "inspect", "--dir", dir, NULL), 0, "still drop");
	char script[4 * PATH_MAX];
	/* (its loopback down, as a new namespace's is: refused with the fix, nothing made) */
	snprintf(script, sizeof(script), "exec %s restore --dir %s --criu %s --timeout 60000", cusnap, dir, criu);
	CHECK_SAYS(out, tool(&out, NULL, "/usr/bin/unshare", "-n", "/bin/sh", "-c", script, NULL), 1,
		   "the loopback of this network namespace is down (`ip link set lo up` in it); nothing done");
	CHECK(restored_root(dir) <= 0);
	snprintf(script, sizeof(script), "ip link set lo up && exec %s restore --dir %s --criu %s --timeout 60000",
		 cusnap, dir, criu);
	CHECK_SAYS(out, tool(&out, NULL, "/usr/bin/unshare", "-n", "/bin/sh", "-c", script, NULL), 0,
		   "of the dump's lock removed from its network namespace");
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "inspect", "--dir", dir, NULL), 0, "network lock: none left");
	pid_t root = restored_root(dir);
	CHECK(root > 0);
	if (root > 0)
		CHECK_EQ(restored_passes(&g, root), 2);
	/* A checkpoint never restored: its lock removed on the operator's word. */
	struct group h;
	if (group_start(&h, "lock2", 1, 2, false, NULL, env, NULL) < 0)
		return;
	char dir2[PATH_MAX + 32];
	snprintf(dir2, sizeof(dir2), "%s/ckpt", h.ctl);
	rc = checkpoint(&h, dir2, criu, true, &out);
	if (!group_dump_ok(&h, rc, out))
		return;
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "inspect", "--dir", dir2, "--unlock-network", NULL), 0, "removed");
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "inspect", "--dir", dir2, NULL), 0, "network lock: none left");
	/* --tcp-close: no lock, the connection back closed (the group says so and passes). */
	struct group k;
	if (group_start(&k, "close", 1, 2, false, NULL, env, NULL) < 0)
		return;
	char dir3[PATH_MAX + 32];
	snprintf(dir3, sizeof(dir3), "%s/ckpt", k.ctl);
	snprintf(pid, sizeof(pid), "%d", k.root);
	rc = tool(&out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", dir3, "--control-dir", k.ctl, "--criu", criu,
		  "--timeout", "60000", "--tcp-close", NULL);
	if (!group_dump_ok(&k, rc, out))
		return;
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "inspect", "--dir", dir3, NULL), 0, "restorable here: yes");
	CHECK_SAYS(out,
		   tool(&out, NULL, cusnap, "checkpoint", "--pid", pid, "--dir", dir3, "--tcp-close",
			"--tcp-established", NULL),
		   64, "one or the other");
	tree_kill(k.root);
}

/* Images of a newer CRIU: a restore with an older one is refused (69) before
 * anything is made (4.1.1 cannot read 4.2's page maps). */
static void newer_images(void)
{
	char old[PATH_MAX];
	if (test_find_criu_old(old, sizeof(old)) != 0 || test_criu_version(old) >= test_criu_version(criu)) {
		printf("  (skipped: no older CRIU provisioned beside the current one)\n");
		return;
	}
	struct group g;
	if (group_start_pair(&g, "newer") < 0)
		return;
	char dir[PATH_MAX + 32], *out;
	snprintf(dir, sizeof(dir), "%s/ckpt", g.ctl);
	int rc = checkpoint(&g, dir, criu, false, &out);
	if (!group_dump_ok(&g, rc, out))
		return;
	CHECK_SAYS(out, tool(&out, NULL, cusnap, "restore", "--dir", dir, "--criu", old, NULL), 69,
		   "cannot read a newer CRIU's images");
	CHECK(restored_root(dir) <= 0);
	CHECK_EQ(restore(dir, &out), 0); /* (the images are unchanged) */
	free(out);
	RESTORED_PASSES(&g, dir, 2);
}

int main(void)
{
	test_require_criu(criu, sizeof(criu));
	e2e_init("network");
	cusnap_path(cusnap, sizeof(cusnap));
	if (kernel_version() >= 6016 && test_criu_version(criu) < 4002000)
		SKIP("CRIU at %s is older than 4.2, which this kernel needs for inet sockets (make test provisions "
		     "one)",
		     criu);
	test_run("a CRIU that cannot dump inet sockets on this kernel: refused (69), nothing done", criu_too_old);
	test_run("a connection without --tcp-established: refused (64), nothing done", needs_tcp_established);
	test_run("checkpoint --tcp-established, restore at once on this host; a port taken named; restored again at "
		 "once",
		 restore_at_once);
	test_run("an SO_REUSEPORT listener restored beside another of the same uid that set it too", reuseport_peer);
	test_run("CRIU's network lock: recorded, listed, removed when restored in another namespace or on the "
		 "operator's word; --tcp-close takes none",
		 network_lock);
	test_run("images of a newer CRIU: a restore with an older one refused (69), nothing made", newer_images);
	return e2e_done();
}
