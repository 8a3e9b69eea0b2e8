/* SPDX-License-Identifier: MIT */
/* A checkpoint's network sockets (DESIGN.md §9.4): refused before anything
 * changes when CRIU could not dump them, recorded in the manifest ("network":
 * the tree's sockets, and after the dump the TIME_WAIT entries its own closed
 * connections left on its ports), and, before a restore on this host, the
 * ports made bindable again (inet.c). */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cusnap.h"
#include "cusnap/json.h"
#include "cusnap/manifest.h"

int network_check(const struct tree *t, const char *criu, bool tcp_established, bool config_given, struct network *net)
{
	memset(net, 0, sizeof(*net));
	if (written_files_of(t->procs, t->nprocs, &net->written) < 0 ||
	    !(net->written_json = written_files_json(&net->written)))
		return fail(EX_LEFT_RUNNING, "out of memory; nothing done");
	ssize_t n = inet_of_tree(t->procs, t->nprocs, &net->socks);
	if (n < 0)
		return fail(EX_LEFT_RUNNING, "cannot read the tree's sockets: %s; nothing done", strerror((int)-n));
	net->n = (size_t)n;
	if (!n)
		return 0;
	const struct inet_sock *s = &net->socks[0];
	char at[80], peer[80], version[64], why[512];
	inet_endpoint_text(s, false, at, sizeof(at));
	criu_version(criu, version, sizeof(version));
	if (!criu_dumps_inet(version, why, sizeof(why)))
		return fail(EX_UNAVAILABLE, "process %d holds %s %s (%s): %s; nothing done", (int)s->pid,
			    s->proto == IPPROTO_TCP ? "TCP" : "UDP", at, inet_state_name(s->proto, s->state), why);
	bool connected = false;
	for (size_t i = 0; i < net->n; i++)
		connected |= inet_needs_tcp_established(&net->socks[i]);
	if (connected && tcp_established)
		net->lock = criu_network_lock() ? criu_network_lock() : "iptables";
	for (size_t i = 0; i < net->n && !tcp_established && !config_given; i++) {
		s = &net->socks[i];
		if (!inet_needs_tcp_established(s))
			continue;
		inet_endpoint_text(s, false, at, sizeof(at));
		inet_endpoint_text(s, true, peer, sizeof(peer));
		return fail(EX_USAGE,
			    "process %d holds a connected TCP socket (%s to %s, %s): CRIU dumps connections only "
			    "with --tcp-established (they are then restored as they were); nothing done",
			    (int)s->pid, at, peer, inet_state_name(s->proto, s->state));
	}
	return 0;
}

/* CRIU's lock as its dump log shows it: an nftables table ("inet CRIU-..."),
 * then its name into net (a --criu-config may choose either method). */
static void lock_table_of(struct network *net, const char *log)
{
	FILE *f = net->lock ? fopen(log, "re") : NULL;
	char line[1024];
	while (f && !net->lock_table[0] && fgets(line, sizeof(line), f)) {
		const char *t = strstr(line, "inet CRIU-");
		if (t)
			snprintf(net->lock_table, sizeof(net->lock_table), "%.*s", (int)strcspn(t + 5, " ]\n") + 5, t);
	}
	if (f)
		fclose(f);
	if (net->lock_table[0])
		net->lock = "nftables";
}

void network_after_dump(struct network *net, const char *log)
{
	lock_table_of(net, log);
	ssize_t n = net->n ? inet_time_wait_of(net->socks, net->n, &net->time_wait) : 0;
	net->ntime_wait = n > 0 ? (size_t)n : 0;
	written_files_sized(&net->written);
	json_t *w = written_files_json(&net->written);
	if (w) {
		json_decref(net->written_json);
		net->written_json = w;
	}
}

void network_free(struct network *net)
{
	free(net->socks);
	free(net->time_wait);
	written_files_free(&net->written);
	json_decref(net->written_json);
	memset(net, 0, sizeof(*net));
}

json_t *network_json(const struct network *net)
{
	json_t *o = inet_record(net->socks, net->n, net->time_wait, net->ntime_wait);
	if (o && net->lock) /* (what a restore elsewhere or an operator lifts, DESIGN.md §9.4) */
		json_object_set_new(o, "lock",
				    json_pack("{s:s, s:I, s:s}", "method", net->lock, "netns",
					      (json_int_t)netlock_netns_here(), "table", net->lock_table));
	return o;
}

int network_ports_free(const struct manifest *m)
{
	if (!m->network)
		return 0; /* (an older cusnap's checkpoint: CRIU says what it cannot bind) */
	char why[512];
	struct inet_rec r;
	int rc = inet_record_decode(m->network, &r, why, sizeof(why));
	if (rc == -EINVAL)
		return fail(EX_USAGE, "the manifest's \"network\": %s; nothing done", why);
	if (rc == 0)
		rc = inet_record_ports_free(&r, INET_PORT_WAIT_MS, why, sizeof(why));
	inet_record_free(&r);
	if (rc < 0)
		return fail(EX_LEFT_RUNNING, "%s; nothing done", why);
	return 0;
}

int network_files_ready(const struct manifest *m, struct set_aside *done)
{
	char why[PATH_MAX + 400];
	if (m->written_files && written_files_ready(m->written_files, done, why, sizeof(why)) < 0)
		return fail(EX_LEFT_RUNNING, "%s; nothing done", why);
	return 0;
}

/* The rules of m's lock still in its namespace: 1 (rules, count, netns set),
 * 0 none recorded or left, -ENOENT its namespace gone, -EINVAL malformed. */
static int lock_rules(const struct manifest *m, unsigned long *netns, char method[16], char *rules, size_t len,
		      size_t *count)
{
	struct inet_sock *conns = NULL;
	struct inet_rec r;
	char why[128];
	*count = 0;
	method[0] = '\0';
	if (!m->network)
		return 0;
	if (inet_record_decode(m->network, &r, why, sizeof(why)) < 0)
		return -EINVAL;
	snprintf(method, 16, "%s", r.lock_method);
	*netns = r.lock_netns;
	ssize_t n = r.lock_method[0] ? inet_record_locked(&r, &conns) : 0;
	int rc = n < 0 ? -EINVAL : r.lock_method[0] ? 1 : 0;
	if (rc > 0 && strcmp(method, "iptables") == 0) {
		rc = netlock_rules(*netns, conns, (size_t)n, rules, len, count) < 0 ? -ENOENT : *count > 0;
	} else if (rc > 0) { /* nftables: one table, named */
		int there = r.lock_table[0] ? netlock_nft_table(*netns, r.lock_table, false) : -EIO;
		rc = there == -ENOENT ? -ENOENT : there < 0 ? -EINVAL : there;
		*count = (size_t)(there > 0);
		snprintf(rules, len, "%s", there > 0 ? r.lock_table : "");
	}
	free(conns);
	inet_record_free(&r);
	return rc;
}

/* Remove what lock_rules found: 0, or -errno; *removed. */
static int lock_remove(unsigned long netns, const char *method, const char *rules, size_t *removed)
{
	if (strcmp(method, "iptables") == 0)
		return netlock_remove(netns, rules, removed);
	int rc = netlock_nft_table(netns, rules, true);
	*removed = rc > 0;
	return rc < 0 ? rc : 0;
}

void network_lock_lifted(const struct manifest *m)
{
	unsigned long netns = 0;
	char method[16] = "";
	static char rules[1 << 14];
	size_t count = 0, removed = 0;
	if (lock_rules(m, &netns, method, rules, sizeof(rules), &count) <= 0 || netns == netlock_netns_here())
		return; /* (none, or CRIU's restore here lifted it) */
	int rc = lock_remove(netns, method, rules, &removed);
	if (rc == 0)
		progress("network lock", 0,
			 "%zu rule%s of the dump's lock removed from its network namespace (%lu): the connections "
			 "live here now",
			 removed, removed == 1 ? "" : "s", netns);
	else
		voice(VOICE_WARN,
		      "%zu of %zu rules of the dump's network lock could not be removed from network "
		      "namespace %lu: `cusnap inspect --dir DIR --unlock-network` there",
		      count - removed, count, netns);
}

int network_lock_inspect(const struct manifest *m, bool unlock, FILE *out)
{
	unsigned long netns = 0;
	char method[16] = "";
	static char rules[1 << 14];
	size_t count = 0, removed = 0;
	int rc = lock_rules(m, &netns, method, rules, sizeof(rules), &count);
	if (rc == 0 && !method[0])
		return 0;
	if (rc == -EINVAL)
		return fprintf(out, "network lock: the record is malformed\n"), 0;
	if (rc == -ENOENT) {
		fprintf(out,
			"network lock: CRIU's %s lock in network namespace %lu, which no process is in any more: "
			"gone with it\n",
			method, netns);
		return 0;
	}
	if (!count) {
		fprintf(out, "network lock: none left (network namespace %lu)\n", netns);
		return 0;
	}
	if (!unlock) {
		fprintf(out,
			"network lock: %s still drop%s the dumped connections in network namespace %lu (a "
			"restore there lifts it; `--unlock-network` removes it):\n%s%s",
			strcmp(method, "iptables") ? "CRIU's nftables table"
			: count == 1               ? "1 rule of CRIU's"
						   : "rules of CRIU's",
			strcmp(method, "iptables") || count == 1 ? "s" : "", netns, rules,
			strcmp(method, "iptables") ? "\n" : "");
		return 0;
	}
	rc = lock_remove(netns, method, rules, &removed);
	fprintf(out, "network lock: %zu of %zu rule%s removed from network namespace %lu\n", removed, count,
		count == 1 ? "" : "s", netns);
	return rc < 0 ? EX_LEFT_RUNNING : 0;
}
