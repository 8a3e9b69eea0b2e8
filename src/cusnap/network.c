/* SPDX-License-Identifier: MIT */
/* A checkpoint's network sockets (DESIGN.md §9.4): refused before anything
 * changes when CRIU could not dump them, recorded in the manifest ("network":
 * the tree's sockets, and after the dump the TIME_WAIT entries its own closed
 * connections left on its ports), and, before a restore on this host, the
 * ports made bindable again (inet.c). */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cusnap.h"
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

void network_after_dump(struct network *net)
{
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
	return inet_record(net->socks, net->n, net->time_wait, net->ntime_wait);
}

int network_ports_free(const struct manifest *m)
{
	const json_t *o = m->network;
	if (!o)
		return 0; /* (an older cusnap's checkpoint: CRIU says what it cannot bind) */
	char why[512];
	int rc = inet_record_ports_free(o, INET_PORT_WAIT_MS, why, sizeof(why));
	if (rc == -EINVAL)
		return fail(EX_USAGE, "the manifest's \"network\": %s; nothing done", why);
	if (rc < 0)
		return fail(EX_LEFT_RUNNING, "%s; nothing done", why);
	return 0;
}

int network_files_ready(const struct manifest *m)
{
	char why[PATH_MAX + 400];
	if (m->written_files && written_files_ready(m->written_files, why, sizeof(why)) < 0)
		return fail(EX_LEFT_RUNNING, "%s; nothing done", why);
	return 0;
}
