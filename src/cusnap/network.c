/* SPDX-License-Identifier: MIT */
/* A checkpoint's network sockets (DESIGN.md §9.4): refused before anything
 * changes when CRIU could not dump them, recorded in the manifest ("network":
 * the tree's sockets, and after the dump the TIME_WAIT entries its own closed
 * connections left on its ports), and, before a restore on this host, the
 * ports made bindable again (inet.c). */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cusnap.h"
#include "cusnap/manifest.h"

/* How long a restore waits for a closing connection on one of its ports that
 * is not the tree's own: a TIME_WAIT lasts 60 s on Linux. */
#define PORT_WAIT_MS 65000

int network_check(const struct tree *t, const char *criu, bool tcp_established, bool config_given,
		  struct network *net)
{
	memset(net, 0, sizeof(*net));
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
}

void network_free(struct network *net)
{
	free(net->socks);
	free(net->time_wait);
	memset(net, 0, sizeof(*net));
}

static json_t *sock_json(const struct inet_sock *s, bool full)
{
	char at[80], peer[80];
	inet_endpoint_text(s, false, at, sizeof(at));
	inet_endpoint_text(s, true, peer, sizeof(peer));
	if (!full)
		return json_pack("{s:s, s:s}", "local", at, "remote", peer);
	return json_pack("{s:i, s:s, s:s, s:s, s:s, s:b}", "pid", (int)s->pid,
			 "protocol", s->proto == IPPROTO_TCP ? "tcp" : "udp", "local", at, "remote", peer, "state",
			 inet_state_name(s->proto, s->state), "netns_here", s->netns_here);
}

json_t *network_json(const struct network *net)
{
	json_t *socks = json_array(), *tw = json_array();
	for (size_t i = 0; i < net->n; i++)
		json_array_append_new(socks, sock_json(&net->socks[i], true));
	for (size_t i = 0; i < net->ntime_wait; i++)
		json_array_append_new(tw, sock_json(&net->time_wait[i], false));
	return json_pack("{s:o, s:o}", "sockets", socks, "time_wait", tw);
}

/* One recorded socket back: 0, or -EINVAL. */
static int sock_from_json(const json_t *o, bool full, struct inet_sock *s)
{
	memset(s, 0, sizeof(*s));
	const char *local = json_member_string(o, "local"), *remote = json_member_string(o, "remote");
	int fr;
	if (!local || !remote || inet_endpoint_parse(local, &s->family, s->local, &s->lport) < 0 ||
	    inet_endpoint_parse(remote, &fr, s->remote, &s->rport) < 0 || fr != s->family)
		return -EINVAL;
	s->proto = IPPROTO_TCP;
	s->state = 6; /* a TIME_WAIT entry */
	if (!full)
		return 0;
	const char *proto = json_member_string(o, "protocol"), *state = json_member_string(o, "state");
	if (!proto || !state || (strcmp(proto, "tcp") && strcmp(proto, "udp")))
		return -EINVAL;
	s->proto = strcmp(proto, "tcp") ? IPPROTO_UDP : IPPROTO_TCP;
	s->state = -1;
	for (int k = 0; k < 12 && s->state < 0; k++)
		if (!strcmp(inet_state_name(s->proto, k), state))
			s->state = k;
	s->pid = (pid_t)json_member_number(o, "pid", 0);
	s->netns_here = json_is_true(json_object_get(o, "netns_here"));
	return s->state < 0 ? -EINVAL : 0;
}

/* A list of the manifest's "network" into *out, *n: 0, or -EINVAL/-ENOMEM. */
static int list_from_json(const json_t *a, bool full, struct inet_sock **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!a)
		return 0;
	if (!json_is_array(a))
		return -EINVAL;
	size_t count = json_array_size(a);
	if (!count)
		return 0;
	if (!(*out = calloc(count, sizeof(**out))))
		return -ENOMEM;
	for (size_t i = 0; i < count; i++)
		if (sock_from_json(json_array_get(a, i), full, &(*out)[i]) < 0) {
			free(*out);
			*out = NULL;
			return -EINVAL;
		}
	*n = count;
	return 0;
}

int network_ports_free(const struct manifest *m)
{
	const json_t *o = json_object_get(m->root, "network");
	if (!o)
		return 0; /* (an older cusnap's checkpoint: CRIU says what it cannot bind) */
	struct network net = {0};
	char why[512];
	int rc = 0;
	if (!json_is_object(o) || list_from_json(json_object_get(o, "sockets"), true, &net.socks, &net.n) < 0 ||
	    list_from_json(json_object_get(o, "time_wait"), false, &net.time_wait, &net.ntime_wait) < 0)
		rc = fail(EX_USAGE, "the manifest's \"network\" is malformed; nothing done");
	else if (inet_ports_free(net.socks, net.n, net.time_wait, net.ntime_wait, PORT_WAIT_MS, why, sizeof(why)) <
		 0)
		rc = fail(EX_LEFT_RUNNING, "%s; nothing done", why);
	network_free(&net);
	return rc;
}
