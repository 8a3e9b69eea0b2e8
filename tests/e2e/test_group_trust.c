/* SPDX-License-Identifier: MIT */
/* Groups an operator can trust (DESIGN.md §16): etcd as production runs it
 * (mutual TLS; TLS with authentication, a user granted /cusnap/groups/ alone),
 * each refusal named; a signal at the boundary; records and decisions a member
 * cannot check ignored, never followed and never blocking; one job, one group;
 * a member that crossed but cannot confirm the others says the group may be
 * split. Each case against an etcd this test starts on the loopback. */
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>

#include "cusnap/json.h"
#include "group_util.h"

static char cusnap[PATH_MAX];

/* A signal at the boundary: one member of two waits there (its peer never
 * comes, the group timeout is long); SIGINT ends it at once (not at the group
 * timeout), its tree untouched, and the decision says why. */
static void signal_at_boundary(void)
{
	struct group g;
	if (group_start_pair(&g, "sig") < 0)
		return;
	struct member m;
	in_place(&m, &g, "suspend", "sig", 2, "m0", NULL, "60000");
	/* (at the boundary once inspect --group shows it ready) */
	for (int waited = 0; waited < 200; waited++) {
		char *view = NULL;
		tool(&view, NULL, cusnap, "inspect", "--group", "sig", "--etcd", etcd_url, NULL);
		bool ready = contains(view, "member m0: suspend of 2 members, ready");
		free(view);
		if (ready)
			break;
		usleep(50000);
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	kill(m.pid, SIGINT);
	char *out;
	int rc = member_wait(&m, &out);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double took = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	CHECK_EQ(rc, 1);
	CHECK_CONTAINS(out, "interrupted by Interrupt at the boundary");
	CHECK_CONTAINS(out, "everything undone");
	if (took > 10000)
		test_fail(__FILE__, __LINE__, "the member took %.0f ms to end after SIGINT (the group timeout is 60 s)",
			  took);
	free(out);
	untouched(&g);
	group_done(&g, 2);
}

/* ---- etcd as production runs it: TLS, client certificates, authentication ---- */

static char pki[PATH_MAX];

/* A CA, a server certificate for 127.0.0.1 and a client certificate (openssl),
 * in e2e_root/pki: 0, or -1. */
static int pki_make(void)
{
	snprintf(pki, sizeof(pki), "%s/pki", e2e_root);
	mkdir(pki, 0700);
	char script[PATH_MAX * 2 + 1400];
	snprintf(script, sizeof(script),
		 "set -e; cd '%s'; o() { openssl \"$@\" 2>/dev/null; }\n"
		 "o req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -subj /CN=cusnap-test-ca -days 2\n"
		 "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > server.ext\n"
		 "printf 'extendedKeyUsage=clientAuth\\n' > client.ext\n"
		 "for w in server client; do\n"
		 "  o req -newkey rsa:2048 -nodes -keyout $w.key -out $w.csr -subj /CN=cusnap-$w\n"
		 "  o x509 -req -in $w.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $w.crt -days 2 -extfile "
		 "$w.ext\n"
		 "done\n"
		 "chmod 600 *.key\n",
		 pki);
	char *argv[] = {"/bin/sh", "-c", script, NULL};
	char log[PATH_MAX + 16];
	snprintf(log, sizeof(log), "%s/pki.log", e2e_root);
	return test_run_cmd(argv, log, 60000) == 0 ? 0 : -1;
}

/* One of etcd's gateway calls as curl makes it (the root user's token, when
 * given): 0, or -1. */
static int gateway(const char *url, const char *path, const char *body, const char *token)
{
	char ca[PATH_MAX + 16], full[160], auth[600] = "";
	snprintf(ca, sizeof(ca), "%s/ca.crt", pki);
	snprintf(full, sizeof(full), "%s%s", url, path);
	if (token)
		snprintf(auth, sizeof(auth), "Authorization: %s", token);
	char *argv[] = {"/usr/bin/curl", "-sf", "--cacert", ca, "-H", auth[0] ? auth : "X-None: 1", "-d",
			(char *)body,    full,  NULL};
	return test_run_cmd(argv, "/dev/null", 20000) == 0 ? 0 : -1;
}

/* Authentication on in the etcd at url: root, and a user "node" (password
 * "node-pw") granted read and write of /cusnap/groups/ alone. 0, or -1. */
static int auth_enable(const char *url)
{
	/* ("L2N1c25hcC9ncm91cHMv" and "L2N1c25hcC9ncm91cHMw": /cusnap/groups/ and the key past its range) */
	const char *steps[][2] = {
		{"/v3/auth/user/add", "{\"name\":\"root\",\"password\":\"root-pw\"}"},
		{"/v3/auth/role/add", "{\"name\":\"root\"}"},
		{"/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}"},
		{"/v3/auth/role/add", "{\"name\":\"groups\"}"},
		{"/v3/auth/role/grant", "{\"name\":\"groups\",\"perm\":{\"permType\":\"READWRITE\",\"key\":"
					"\"L2N1c25hcC9ncm91cHMv\",\"range_end\":\"L2N1c25hcC9ncm91cHMw\"}}"},
		{"/v3/auth/user/add", "{\"name\":\"node\",\"password\":\"node-pw\"}"},
		{"/v3/auth/user/grant", "{\"user\":\"node\",\"role\":\"groups\"}"},
		{"/v3/auth/enable", "{}"},
	};
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if (gateway(url, steps[i][0], steps[i][1], NULL) < 0) {
			printf("  etcd's gateway refused %s\n", steps[i][0]);
			return -1;
		}
	return 0;
}

/* Two trees as one group through the etcd at url with flags: suspended and
 * resumed, both members ok, both trees then passing. */
static void pair_through(const char *tag, const char *url, const char *const *flags)
{
	char saved[64];
	snprintf(saved, sizeof(saved), "%s", etcd_url);
	snprintf(etcd_url, sizeof(etcd_url), "%s", url);
	for (int i = 0; flags[i]; i++)
		etcd_extra[i] = flags[i];
	struct group g[2];
	int rc[2];
	char *out[2];
	trees_start(g, 2, tag);
	group_cmd(g, 2, "suspend", tag, NULL, NULL, rc, out);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(rc[i], 0);
		CHECK(!contains(out[i], "plain http://"));
	}
	free_all(out, 2);
	group_cmd(g, 2, "resume", tag, NULL, NULL, rc, out);
	CHECK_EQ(rc[0], 0);
	CHECK_EQ(rc[1], 0);
	free_all(out, 2);
	trees_pass(g, 2);
	memset(etcd_extra, 0, sizeof(etcd_extra));
	snprintf(etcd_url, sizeof(etcd_url), "%s", saved);
}

/* inspect --group through url with flags: its exit code, what it printed in *out. */
static int inspect_through(const char *url, const char *const *flags, char **out)
{
	const char *q[16] = {"inspect", "--group", "g", "--etcd", url};
	int n = 5;
	for (int i = 0; flags[i] && n < 15; i++)
		q[n++] = flags[i];
	q[n] = NULL;
	return tool(out, NULL, cusnap, q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10], q[11], q[12],
		    q[13], q[14], NULL);
}

/* etcd with mutual TLS (--client-cert-auth), and etcd with TLS and
 * authentication on (a user granted /cusnap/groups/ alone): a 2-member
 * suspend and resume through each; each refusal names its cause. */
static void tls_and_auth(void)
{
	if (access("/usr/bin/openssl", X_OK) || access("/usr/bin/curl", X_OK)) {
		printf("  (skipped: openssl and curl make the certificates and set etcd up)\n");
		return;
	}
	CHECK_EQ(pki_make(), 0);
	char ca[PATH_MAX + 16], scrt[PATH_MAX + 16], skey[PATH_MAX + 16], ccrt[PATH_MAX + 16], ckey[PATH_MAX + 16],
		pw[PATH_MAX + 16], bad[PATH_MAX + 16], open_pw[PATH_MAX + 16], mtls[64], authed[64], *out;
	snprintf(ca, sizeof(ca), "%s/ca.crt", pki);
	snprintf(scrt, sizeof(scrt), "%s/server.crt", pki);
	snprintf(skey, sizeof(skey), "%s/server.key", pki);
	snprintf(ccrt, sizeof(ccrt), "%s/client.crt", pki);
	snprintf(ckey, sizeof(ckey), "%s/client.key", pki);
	const char *tls[] = {"--cert-file",       scrt, "--key-file",         skey,
			     "--trusted-ca-file", ca,   "--client-cert-auth", NULL};
	const char *mine[] = {"--etcd-cacert", ca, "--etcd-cert", ccrt, "--etcd-key", ckey, NULL};
	pid_t a = etcd_launch("mtls", "https", tls, mine, mtls);
	pair_through("mtls", mtls, mine);
	const char *no_client[] = {"--etcd-cacert", ca, NULL},
		   *no_ca[] = {"--etcd-cert", ccrt, "--etcd-key", ckey, NULL};
	CHECK_SAYS(out, inspect_through(mtls, no_client, &out), 69, "client");
	CHECK_SAYS(out, inspect_through(mtls, no_ca, &out), 69, "etcd's certificate cannot be verified");
	/* (the same etcd named http://: TLS named as the cause, not "start etcd") */
	char plain[80];
	snprintf(plain, sizeof(plain), "http://%s", mtls + strlen("https://"));
	CHECK_EQ(inspect_through(plain, mine, &out), 69);
	CHECK_CONTAINS(out, "an etcd serving TLS: name it https://");
	CHECK(!contains(out, "start etcd"));
	free(out);
	kill(a, SIGKILL);
	test_wait_child(a, 10000);

	const char *tls_only[] = {"--cert-file", scrt, "--key-file", skey, NULL},
		   *ca_only[] = {"--etcd-cacert", ca, NULL};
	pid_t b = etcd_launch("auth", "https", tls_only, ca_only, authed);
	CHECK_EQ(auth_enable(authed), 0);
	snprintf(pw, sizeof(pw), "%s/node.pw", pki);
	snprintf(bad, sizeof(bad), "%s/bad.pw", pki);
	snprintf(open_pw, sizeof(open_pw), "%s/open.pw", pki);
	test_write_file(pw, "node-pw\n");
	test_write_file(bad, "guess\n");
	test_write_file(open_pw, "node-pw\n");
	chmod(pw, 0600);
	chmod(bad, 0600);
	chmod(open_pw, 0644);
	const char *user[] = {"--etcd-cacert", ca, "--etcd-user", "node", "--etcd-password-file", pw, NULL};
	pair_through("authed", authed, user);
	const char *wrong[] = {"--etcd-cacert", ca, "--etcd-user", "node", "--etcd-password-file", bad, NULL};
	CHECK_SAYS(out, inspect_through(authed, wrong, &out), 69, "authentication");
	CHECK_SAYS(out, inspect_through(authed, ca_only, &out), 69, "(authentication");
	const char *readable[] = {"--etcd-cacert", ca, "--etcd-user", "node", "--etcd-password-file", open_pw, NULL};
	CHECK_SAYS(out, inspect_through(authed, readable, &out), 64, "no one else can read");
	kill(b, SIGKILL);
	test_wait_child(b, 10000);
}

/* ---- records a member cannot check ---- */

/* sh -c script (its output into *out, malloc'ed): its exit status. */
static int sh(const char *script, char **out)
{
	char log[PATH_MAX + 16];
	snprintf(log, sizeof(log), "%s/sh.out", e2e_root);
	unlink(log);
	char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
	int rc = test_run_cmd(argv, log, 20000);
	if (out)
		*out = test_read_file(log);
	return rc;
}

/* key = value in the etcd at etcd_url, with no lease (as a stranger, or a
 * leftover, would leave it): 0, or -1. */
static int put_raw(const char *key, const char *value)
{
	char script[2048];
	snprintf(script, sizeof(script),
		 "k=$(printf %%s '%s' | base64 -w0); v=$(printf %%s '%s' | base64 -w0); "
		 "curl -sf %s/v3/kv/put -d \"{\\\"key\\\":\\\"$k\\\",\\\"value\\\":\\\"$v\\\"}\"",
		 key, value, etcd_url);
	return sh(script, NULL) == 0 ? 0 : -1;
}

/* The value of key in the etcd at etcd_url (malloc'ed), or NULL. */
static char *get_raw(const char *key)
{
	char script[2048], *out = NULL;
	snprintf(script, sizeof(script),
		 "k=$(printf %%s '%s' | base64 -w0); curl -sf %s/v3/kv/range -d \"{\\\"key\\\":\\\"$k\\\"}\" | "
		 "sed -n 's/.*\"value\":\"\\([^\"]*\\)\".*/\\1/p' | base64 -d",
		 key, etcd_url);
	if (sh(script, &out) != 0 || !out || !*out) {
		free(out);
		return NULL;
	}
	return out;
}

/* Until inspect --group G shows member M in phase (at most 10 s): true when it did. */
static bool member_phase(const char *group, const char *member, const char *phase)
{
	char want[256];
	snprintf(want, sizeof(want), "member %s: ", member);
	for (int i = 0; i < 200; i++) {
		char *view = NULL;
		tool(&view, NULL, cusnap, "inspect", "--group", group, "--etcd", etcd_url, NULL);
		const char *at = view ? strstr(view, want) : NULL;
		const char *eol = at ? strchr(at, '\n') : NULL;
		bool found = at && strstr(at, phase) && (!eol || strstr(at, phase) < eol);
		free(view);
		if (found)
			return true;
		usleep(50000);
	}
	return false;
}

/* A leftover record (malformed, kept by no lease) under a group's members: a
 * 2-member suspend and resume go through, it is warned about and shown by
 * inspect with how to clear it (it blocked the group for good: 75). A member
 * record forged for the other member (no lease), and a forged "go": never
 * followed; the member alone times out and undoes (it crossed alone before). */
static void records_not_trusted(void)
{
	CHECK_EQ(put_raw("/cusnap/groups/junk/members/junk", "{not json"), 0);
	struct group g[2];
	int rc[2];
	char *out[2], *view = NULL;
	trees_start(g, 2, "junk");
	group_cmd(g, 2, "suspend", "junk", NULL, NULL, rc, out);
	CHECK_EQ(rc[0], 0);
	CHECK_EQ(rc[1], 0);
	CHECK_CONTAINS(out[0], "/cusnap/groups/junk/members/junk is not a member's record");
	free_all(out, 2);
	group_cmd(g, 2, "resume", "junk", NULL, NULL, rc, out);
	CHECK_EQ(rc[0] | rc[1], 0);
	free_all(out, 2);
	CHECK_EQ(tool(&view, NULL, cusnap, "inspect", "--group", "junk", "--etcd", etcd_url, NULL), 0);
	CHECK_CONTAINS(view, "`etcdctl del /cusnap/groups/junk/members/junk` clears it");
	free(view);
	trees_pass(g, 2);

	/* A forged member record, then a forged decision, for a member alone. */
	for (int forge = 0; forge < 2; forge++) {
		struct group t;
		if (group_start_pair(&t, forge ? "forged-go" : "forged-m") < 0)
			return;
		const char *name = forge ? "fgo" : "fm";
		struct member m;
		in_place(&m, &t, "suspend", name, 2, "m0", NULL, "3000");
		char key[128], *mine = NULL;
		snprintf(key, sizeof(key), "/cusnap/groups/%s/members/m0", name);
		for (int i = 0; i < 100 && !(mine = get_raw(key)); i++)
			usleep(50000);
		json_t *j = mine ? json_loads(mine, 0, NULL) : NULL;
		const char *opid = json_string_value(json_object_get(j, "opid"));
		CHECK(opid != NULL);
		char forged[512];
		if (!forge) {
			snprintf(key, sizeof(key), "/cusnap/groups/%s/members/m1", name);
			snprintf(forged, sizeof(forged),
				 "{\"operation\":\"suspend\",\"members\":2,\"opid\":\"%s\",\"phase\":\"ready\","
				 "\"names\":\"\"}",
				 opid ? opid : "");
		} else {
			snprintf(key, sizeof(key), "/cusnap/groups/%s/ops/%s/decision", name, opid ? opid : "");
			snprintf(forged, sizeof(forged), "{\"go\":true,\"why\":\"\",\"by\":\"m1\"}");
		}
		CHECK_EQ(put_raw(key, forged), 0);
		json_decref(j);
		free(mine);
		char *o;
		CHECK_EQ(member_wait(&m, &o), 1);
		CHECK_CONTAINS(o, "everything undone");
		CHECK_CONTAINS(o, forge ? "not followed" : "kept by no lease");
		free(o);
		untouched(&t);
		group_done(&t, 2);
	}
}

/* Two jobs under one group name (--members NAME,NAME): the second job's
 * member is refused (75) and joins nothing; the first job's members go
 * through, one naming them in another order; a --member not in the list is
 * a usage error. */
static void two_jobs(void)
{
	struct group a[2], b;
	trees_start(a, 2, "jobA");
	if (group_start_pair(&b, "jobB") < 0)
		return;
	struct member ma[2], mb;
	char pid[16], dir[PATH_MAX + 16], *out;
	const char *argv[12];
	tree_args(&a[0], "suspend", pid, dir, argv);
	const char *job_a[] = {"suspend", "--pid",     pid,     "--dir",           dir,     "--control-dir",
			       a[0].ctl,  "--members", "a0,a1", "--group-timeout", "20000", NULL};
	(void)argv;
	member_start(&ma[0], "shared", 2, "a0", NULL, job_a);
	CHECK(member_phase("shared", "a0", "ready"));
	char pid_b[16], dir_b[PATH_MAX + 16];
	tree_args(&b, "suspend", pid_b, dir_b, argv);
	const char *job_b[] = {"suspend",       "--pid", pid_b,       "--dir", dir_b,
			       "--control-dir", b.ctl,   "--members", "b0,b1", NULL};
	member_start(&mb, "shared", 2, "b0", NULL, job_b);
	CHECK_EQ(member_wait(&mb, &out), 75);
	CHECK_CONTAINS(out, "another job uses this group name");
	free(out);
	untouched(&b);
	char pid1[16], dir1[PATH_MAX + 16];
	tree_args(&a[1], "suspend", pid1, dir1, argv);
	const char *job_a1[] = {"suspend",       "--pid",  pid1,        "--dir", dir1,
				"--control-dir", a[1].ctl, "--members", "a1,a0", NULL};
	member_start(&ma[1], "shared", 2, "a1", NULL, job_a1);
	MEMBER_OK(&ma[0]);
	MEMBER_OK(&ma[1]);
	const char *stranger[] = {"suspend", "--pid", pid_b, "--control-dir", b.ctl, "--members", "a0,a1", NULL};
	member_start(&mb, "shared2", 2, "x9", NULL, stranger);
	CHECK_EQ(member_wait(&mb, &out), 64);
	CHECK_CONTAINS(out, "is not one of --members a0,a1");
	free(out);
	for (int i = 0; i < 2; i++) {
		char *o = NULL;
		CHECK_EQ(group_resume(&a[i], &o, NULL), 0);
		free(o);
		restore_complete(&a[i]);
		CHECK_EQ(group_finish(&a[i]), 2);
	}
	group_done(&b, 2);
}

/* Two trees (TAG0, TAG1), and member m1's `suspend` of group TAG on the
 * second started with fault (CUSNAP_FAULT=...) and group timeout timeout. */
static void m1_with(struct group g[2], struct member m[2], const char *tag, const char *fault, const char *timeout)
{
	trees_start(g, 2, tag);
	char *env[] = {(char *)fault, NULL};
	in_place(&m[1], &g[1], "suspend", tag, 2, "m1", env, timeout);
}

/* etcd lost between the decision and another member's reading of it: m0
 * crossed; m1 (held after it said it was ready) cannot read the decision,
 * tries within its bound, then undoes alone saying the group may be split;
 * m0 cannot confirm m1's result and says so, naming it (not itself), exit 2
 * (it exited 0 saying "0 of 2 members reported"); m1 says the results cannot
 * be read (it said "0 of 2 reported within 3000 ms" at once). */
static void split(void)
{
	struct group g[2];
	struct member m[2];
	m1_with(g, m, "split", "CUSNAP_FAULT=group-waiting:stop", "3000");
	CHECK(wait_stopped(m[1].pid, 20000));
	in_place(&m[0], &g[0], "suspend", "split", 2, "m0", NULL, "3000");
	CHECK(member_phase("split", "m0", "done"));
	etcd_stop();
	kill(m[1].pid, SIGCONT);
	char *out[2];
	int rc0 = member_wait(&m[0], &out[0]), rc1 = member_wait(&m[1], &out[1]);
	CHECK_EQ(rc0, 2);
	CHECK_CONTAINS(out[0], "the group may be split");
	CHECK_CONTAINS(out[0], "member(s) m1 ("); /* (not itself) */
	CHECK_EQ(rc1, 1);
	CHECK_CONTAINS(out[1], "the group may be split");
	/* (no result to read: said so, its own named, no "within" it never waited) */
	CHECK_CONTAINS(out[1], "the members' results cannot be read");
	CHECK_CONTAINS(out[1], "member m1: failed");
	CHECK(!contains(out[1], "reported within"));
	CHECK_CONTAINS(out[1], "cusnap: (group: at the boundary) "); /* (its ticker while it tries) */
	free_all(out, 2);
	/* (etcd back, on a new port, for whatever comes next) */
	etcd_pid = etcd_launch("trust2", "http", NULL, NULL, etcd_url);
	char *o = NULL;
	CHECK_EQ(group_resume(&g[0], &o, NULL), 0); /* m0's tree was suspended: it crossed */
	free(o);
	trees_pass(g, 2);
}

/* The decision found at the first look: m1 says it is ready and is held
 * before it reads the decision; m0 sees both ready, decides "go", crosses and
 * dies (after its native lock) before it writes its result. m1, let go while
 * m0's lease still lives, finds "go" at once and crosses: it saw m0 ready, so
 * when no result of m0's comes it says the group may be split and exits 2
 * (it exited 0: a member that found the decision at once recorded no one). */
static void split_at_first_look(void)
{
	struct group g[2];
	struct member m[2];
	m1_with(g, m, "firstlook", "CUSNAP_FAULT=group-waiting:stop", "3000");
	char *die[] = {"CUSNAP_FAULT=kill-after-lock:self", NULL};
	CHECK(wait_stopped(m[1].pid, 20000));
	in_place(&m[0], &g[0], "suspend", "firstlook", 2, "m0", die, "3000");
	char *out[2];
	int rc0 = member_wait(&m[0], &out[0]);
	CHECK_EQ(rc0, -1); /* (killed by its fault, after its lock) */
	kill(m[1].pid, SIGCONT);
	int rc1 = member_wait(&m[1], &out[1]);
	CHECK_EQ(rc1, 2);
	CHECK_CONTAINS(out[1], "the group may be split");
	CHECK_CONTAINS(out[1], "m0");
	free_all(out, 2);
	char *o = NULL;
	CHECK_EQ(group_resume(&g[1], &o, NULL), 0); /* m1 crossed: its tree is suspended */
	free(o);
	CHECK_EQ(group_resume(&g[0], &o, NULL), 0); /* m0's, locked when it died */
	free(o);
	for (int i = 0; i < 2; i++) {
		untouched(&g[i]);
		restore_complete(&g[i]);
		group_done(&g[i], 2);
	}
}

/* SIGINT after the boundary, while a member waits for the others' results
 * (m1 stopped after its lock, before its result): the member stops waiting
 * at once and says so, its own result standing (it waited, silent, for the
 * group timeout). Both trees crossed: both resumed. */
static void signal_after_boundary(void)
{
	struct group g[2];
	struct member m[2];
	m1_with(g, m, "after", "CUSNAP_FAULT=kill-after-lock:stop", "60000");
	in_place(&m[0], &g[0], "suspend", "after", 2, "m0", NULL, "60000");
	CHECK(wait_stopped(m[1].pid, 20000));
	CHECK(member_phase("after", "m0", "done"));
	kill(m[0].pid, SIGINT);
	char *out[2];
	CHECK_EQ(member_wait(&m[0], &out[0]), 0);
	CHECK_CONTAINS(out[0], "interrupted by Interrupt while waiting for the members' results (1 of 2 read; none yet "
			       "from m1)");
	CHECK_CONTAINS(out[0], "member m0: ok");
	kill(m[1].pid, SIGCONT);
	member_wait(&m[1], &out[1]); /* (its lease may have lapsed meanwhile: whatever it says) */
	free_all(out, 2);
	for (int i = 0; i < 2; i++) {
		char *o = NULL;
		CHECK_EQ(group_resume(&g[i], &o, NULL), 0);
		free(o);
		untouched(&g[i]);
		restore_complete(&g[i]);
		group_done(&g[i], 2);
	}
}

int main(void)
{
	e2e_init("group-trust");
	group_util_init();
	snprintf(cusnap, sizeof(cusnap), "%s/cusnap", bin_dir);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	etcd_pid = etcd_launch("trust", "http", NULL, NULL, etcd_url);
	atexit(etcd_stop);
	test_run("SIGINT at the boundary: the member undoes at once, its tree untouched", signal_at_boundary);
	test_run("SIGINT after the boundary, waiting for the others' results: said, the member's result stands",
		 signal_after_boundary);
	test_run("etcd with mutual TLS, and with TLS and a user granted its prefix: a group through each; refusals "
		 "named",
		 tls_and_auth);
	test_run("records and decisions a member cannot check: ignored, never followed, never blocking",
		 records_not_trusted);
	test_run("two jobs under one group name: the stranger refused (75), the job goes through", two_jobs);
	test_run("etcd lost between the decision and a member's reading of it: both say the group may be split", split);
	test_run("the decision found at a member's first look: it still knows whom it saw, and says the group may "
		 "be split",
		 split_at_first_look);
	etcd_stop();
	return e2e_done();
}
