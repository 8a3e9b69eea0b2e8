/* SPDX-License-Identifier: MIT */
/* Redeeming capabilities at their creators' endpoints (DESIGN.md §4.2, §5):
 * one EXPORT for an application's import; for a restore, every capability a
 * process holds of one creator on one connection, in EXPORT_MANY batches of up
 * to PROTO_MAX_FDS, or EXPORT pipelined when the creator's shim predates
 * protocol 1.6 and refuses the batch. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cusnap/counters.h"
#include "cusnap/proto.h"
#include "cusnap/usock.h"
#include "cusnap/request.h"
#include "shim.h"

int shim_connect(const char *endpoint)
{
	count_add(COUNT_SHIM_CONNECTIONS);
	return usock_connect(endpoint);
}

/* The REC_EXPORT of an allocation and its token; who: with the redeemer's id
 * and endpoint (a creator lists its multicast importers and its peers). */
static void put_export(struct proto_buf *req, const struct cusnap_id *alloc, const struct cusnap_id *token, bool who,
		       unsigned hops)
{
	const struct shim_identity *me = shim_self();
	struct req_export q = {.alloc = *alloc, .token = *token, .hops = hops};
	if (who && me) {
		q.who = me->id;
		q.endpoint = me->endpoint;
	}
	req_export_encode(req, &q);
}

static int send_request(int sock, int op, struct proto_buf *req)
{
	count_add(COUNT_SHIM_REQUESTS);
	struct proto_header h = {.magic = PROTO_MAGIC,
				 .major = PROTO_MAJOR,
				 .minor = PROTO_MINOR,
				 .op = (uint16_t)op,
				 .request_id = 1,
				 .payload_len = (uint32_t)req->len};
	int rc = req->failed ? PROTO_E_INTERNAL
			     : proto_send(sock, &h, req->data, -1, proto_deadline(shim_deadline_ms()));
	pbuf_free(req);
	return rc;
}

int cap_export_send(int sock, const struct shim_cap *cap)
{
	return cap_export_send_hop(sock, cap, 0);
}

static int send_export(int sock, const struct cusnap_id *alloc, const struct cusnap_id *token, unsigned hops)
{
	struct proto_buf req = {0};
	put_export(&req, alloc, token, true, hops);
	return send_request(sock, PROTO_OP_EXPORT, &req);
}

int cap_export_send_hop(int sock, const struct shim_cap *cap, unsigned hops)
{
	return send_export(sock, &cap->alloc_id, &cap->token, hops);
}

/* A failed reply's message, after "EXPORT from <endpoint>: <status>". */
static void reply_error(const uint8_t *payload, size_t len, int rc, const char *endpoint, char *err, size_t errlen)
{
	char msg[512] = "";
	struct proto_field_iter it;
	struct proto_rec f;
	pfield_init(&it, payload, payload ? len : 0, REC_ERROR);
	while (pfield_next(&it, &f))
		if (f.type == F_MESSAGE)
			prec_str(&f, msg, sizeof(msg));
	snprintf(err, errlen, "EXPORT from %s: %s%s%s", endpoint, proto_status_name(rc), msg[0] ? ": " : "", msg);
}

/* The next REC_EXPORT of a reply: the allocation it names must be want. */
static int read_reply(struct proto_iter *it, const struct cusnap_id *want, struct shim_export_info *info)
{
	struct rep_export r;
	int rc = rep_export_next(it, &r);
	if (rc == PROTO_OK && !id_equal(&r.alloc, want))
		rc = PROTO_E_MALFORMED;
	info->size = (size_t)r.size;
	info->mc_devices = r.mc_devices;
	return rc;
}

/* The reply to one EXPORT of alloc at endpoint: its FD, or -1 (why in err). */
static int recv_export(int sock, const struct cusnap_id *alloc, const char *endpoint, struct shim_export_info *info,
		       char *err, size_t errlen)
{
	struct proto_header h;
	int fd = -1;
	uint8_t *payload = NULL;
	int rc = proto_recv(sock, &h, &payload, &fd, proto_deadline(shim_deadline_ms()));
	if (rc == PROTO_OK && h.status != PROTO_OK)
		rc = h.status;
	if (rc == PROTO_OK && fd < 0)
		rc = PROTO_E_FD;
	if (rc == PROTO_OK) {
		struct proto_iter it;
		piter_init(&it, payload, h.payload_len);
		rc = read_reply(&it, alloc, info);
	}
	if (rc != PROTO_OK) {
		reply_error(payload, h.payload_len, rc, endpoint, err, errlen);
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	free(payload);
	return fd;
}

int cap_export_recv(int sock, const struct shim_cap *cap, struct shim_export_info *info, char *err, size_t errlen)
{
	return recv_export(sock, &cap->alloc_id, cap->endpoint, info, err, errlen);
}

int cap_redeem_on(int *sockp, const struct shim_cap *cap, struct shim_export_info *info, char *err, size_t errlen)
{
	if (*sockp < 0) {
		*sockp = shim_connect(cap->endpoint);
		if (*sockp < 0) {
			snprintf(err, errlen, "creator endpoint %s: %s", cap->endpoint, strerror(-*sockp));
			*sockp = -1;
			return -1;
		}
	}
	int rc = cap_export_send(*sockp, cap);
	int fd = -1;
	if (rc == PROTO_OK)
		fd = cap_export_recv(*sockp, cap, info, err, errlen);
	else
		snprintf(err, errlen, "EXPORT to %s: %s", cap->endpoint, proto_status_name(rc));
	if (fd < 0) {
		/* After a failure the connection is not reused. */
		close(*sockp);
		*sockp = -1;
	}
	return fd;
}

/* ---- a restore: many capabilities of one creator ---- */

/* How many FDs one batch brings: PROTO_MAX_FDS, fewer when this process may
 * open few descriptors (two batches are in flight, and the application's own
 * descriptors need room). */
static size_t batch_size(void)
{
	struct rlimit rl;
	size_t n = PROTO_MAX_FDS;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur / 8 < n)
		n = rl.rlim_cur / 8;
	return n ? n : 1;
}

enum { WHY_MAX = 700 }; /* a reason, formatted before it is kept */

/* why it failed, kept (NULL when there is no memory for it). */
static void set_err(struct redeem *it, const char *why)
{
	free(it->err);
	it->err = strdup(why);
}

/* "<prefix> <endpoint>: <what>" for each of it[0..n). */
static void fail_all(struct redeem *it, size_t n, const char *prefix, const char *what)
{
	char why[WHY_MAX];
	for (size_t i = 0; i < n; i++) {
		snprintf(why, sizeof(why), "%s %.500s: %s", prefix, it[i].endpoint, what);
		set_err(&it[i], why);
	}
}

/* it redeemed (its FD, or -1 and the reason): the caller's turn, then the FD
 * and the reason go. */
static void finish(struct redeem *it, redeem_done done, void *arg)
{
	done(it, arg);
	if (it->fd >= 0)
		close(it->fd);
	it->fd = -1;
	free(it->err);
	it->err = NULL;
}

static int send_many(int sock, const struct redeem *it, size_t n)
{
	struct proto_buf req = {0};
	for (size_t i = 0; i < n; i++)
		put_export(&req, &it[i].alloc_id, &it[i].token, i == 0, 0);
	return send_request(sock, PROTO_OP_EXPORT_MANY, &req);
}

/* The reply to send_many(it, n): each item's FD and info, or every item's
 * error. Returns a proto_status (PROTO_E_OP: a creator before 1.6). */
static int recv_many(int sock, struct redeem *it, size_t n)
{
	struct proto_header h = {0};
	uint8_t *payload = NULL;
	int fds[PROTO_MAX_FDS];
	size_t nfds = 0;
	int rc = proto_recv_fds(sock, &h, &payload, fds, n, &nfds, proto_deadline(shim_deadline_ms()));
	if (rc == PROTO_OK && h.status != PROTO_OK)
		rc = h.status;
	if (rc == PROTO_OK && nfds != n)
		rc = PROTO_E_FD;
	struct proto_iter recs;
	piter_init(&recs, payload, rc == PROTO_OK ? h.payload_len : 0);
	/* The replies come in the request's order, each naming its allocation. */
	for (size_t i = 0; rc == PROTO_OK && i < n; i++)
		rc = read_reply(&recs, &it[i].alloc_id, &it[i].info);
	if (rc == PROTO_OK) {
		for (size_t i = 0; i < n; i++)
			it[i].fd = fds[i];
	} else {
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		char why[WHY_MAX];
		for (size_t i = 0; i < n; i++) {
			reply_error(payload, h.payload_len, rc, it[i].endpoint, why, sizeof(why));
			set_err(&it[i], why);
		}
	}
	free(payload);
	return rc;
}

/* A creator before 1.6: EXPORT for each, up to WINDOW requests in flight
 * (replies come back in order; a bounded window keeps both sides' socket
 * buffers from filling up). Closes sock. */
static void redeem_pipelined(int sock, struct redeem *it, size_t n, redeem_done done, void *arg)
{
	enum { WINDOW = 32 };
	size_t sent = 0;
	for (size_t got = 0; got < n; got++) {
		while (sock >= 0 && sent < n && sent - got < WINDOW &&
		       send_export(sock, &it[sent].alloc_id, &it[sent].token, 0) == PROTO_OK)
			sent++;
		char why[WHY_MAX];
		if (got < sent) {
			it[got].fd = recv_export(sock, &it[got].alloc_id, it[got].endpoint, &it[got].info, why,
						 sizeof(why));
			if (it[got].fd < 0)
				set_err(&it[got], why);
		} else {
			fail_all(&it[got], 1, "EXPORT to", "the connection failed");
		}
		finish(&it[got], done, arg);
	}
	if (sock >= 0)
		close(sock);
}

/* Every capability of it[0..n) names one creator: one connection, batches of
 * batch_size(), two in flight, so that the creator exports the next while
 * this process imports one. */
static void redeem_one_creator(struct redeem *it, size_t n, redeem_done done, void *arg)
{
	int sock = shim_connect(it[0].endpoint);
	if (sock < 0) {
		fail_all(it, n, "creator endpoint", strerror(-sock));
		for (size_t i = 0; i < n; i++)
			finish(&it[i], done, arg);
		return;
	}
	enum { IN_FLIGHT = 2 };
	size_t batch = batch_size(), flight[IN_FLIGHT], head = 0, queued = 0, sent = 0, got = 0;
	while (got < n) {
		while (sock >= 0 && sent < n && queued < IN_FLIGHT) {
			size_t k = n - sent < batch ? n - sent : batch;
			if (send_many(sock, &it[sent], k) != PROTO_OK) {
				close(sock);
				sock = -1;
				break;
			}
			flight[(head + queued++) % IN_FLIGHT] = k;
			sent += k;
		}
		size_t k = queued ? flight[head] : n - got;
		int rc = PROTO_E_IO;
		if (queued) {
			head = (head + 1) % IN_FLIGHT;
			queued--;
			rc = recv_many(sock, &it[got], k);
		} else {
			fail_all(&it[got], k, "EXPORT to", "the connection failed");
		}
		if (rc == PROTO_E_OP && got == 0) {
			/* Refused by a shim before 1.6: the batch in flight is refused too. */
			if (queued && recv_many(sock, &it[sent - flight[head]], flight[head]) != PROTO_E_OP) {
				close(sock);
				sock = -1;
			}
			redeem_pipelined(sock, it, n, done, arg);
			return;
		}
		if (rc != PROTO_OK && sock >= 0) {
			close(sock); /* after a failure the connection is not reused */
			sock = -1;
		}
		for (size_t i = got; i < got + k; i++)
			finish(&it[i], done, arg);
		got += k;
	}
	if (sock >= 0)
		close(sock);
}

void cap_redeem_all(struct redeem *it, size_t n, redeem_done done, void *arg)
{
	for (size_t i = 0; i < n; i++) {
		it[i].fd = -1;
		it[i].err = NULL;
	}
	for (size_t start = 0; start < n;) {
		size_t end = start + 1;
		while (end < n && !strcmp(it[end].endpoint, it[start].endpoint))
			end++;
		redeem_one_creator(&it[start], end - start, done, arg);
		start = end;
	}
}
