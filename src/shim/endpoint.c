/* SPDX-License-Identifier: MIT */
/* The participant's endpoint (DESIGN.md §4.3, §5): a Unix socket served by an
 * small pool of threads, each accepting and serving a connection itself, all
 * with every signal blocked and none calling into the application. Each connection has a deadline, so a silent client
 * cannot hold anything for longer than that. Requests go to shim_serve
 * (dispatch.c); EXPORT is served from the export table (exports.c), never
 * waiting for the table lock that wrappers hold across driver calls; HELLO and
 * INSPECT are in records.c. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap/log.h"
#include "cusnap/paths.h"
#include "cusnap/proto.h"
#include "cusnap/usock.h"
#include "cusnap/request.h"
#include "shim.h"

#define MAX_THREADS 64 /* connections served at once; more wait in the listen backlog */
#define IDLE_MAX 4     /* threads kept waiting in accept */

static const struct shim_identity *me;
static int listen_fd = -1;

/* The endpoint threads: each accepts a connection and serves it itself, so a
 * connection costs no hand-off between threads; the one that takes the last
 * idle slot starts another, and one that finds enough idle after its
 * connection ends. */
static struct {
	pthread_mutex_t lock;
	int threads; /* alive */
	int busy;    /* serving a connection */
} pool = {PTHREAD_MUTEX_INITIALIZER, 0, 0};

void endpoint_after_fork_child(void)
{
	/* Threads are gone in the child; its own endpoint starts with its identity. */
	if (listen_fd >= 0)
		close(listen_fd);
	listen_fd = -1;
	me = NULL;
	pool.threads = pool.busy = 0;
	pthread_mutex_init(&pool.lock, NULL);
}

/* The next REC_EXPORT of c's request into q (the redeemer's endpoint into
 * who_endpoint[len]): 1, 0 when none is left, or a proto_status (said in the
 * reply). */
static int next_export(struct op_call *c, struct proto_iter *it, struct export_request *q, char *who_endpoint,
		       size_t len)
{
	struct req_export r;
	char err[256];
	int rc = req_export_next(it, &r, who_endpoint, len, err, sizeof(err));
	if (rc < 0)
		shim_error_reply(c->out, "%s", err);
	if (rc != 1)
		return rc;
	*q = (struct export_request){.alloc_id = r.alloc,
				     .token = r.token,
				     .who = r.who,
				     .who_endpoint = r.endpoint,
				     .hops = r.hops,
				     .keep_context = true};
	return 1;
}

/* One allocation exported: its FD appended to c->fds, its record to the reply. */
static int export_one(struct op_call *c, const struct export_request *q)
{
	struct shim_export_info info = {0};
	char err[600];
	int fd = -1;
	int rc = exports_export(q, &info, &fd, err, sizeof(err));
	if (rc != PROTO_OK) {
		shim_error_reply(c->out, "participant %d (ns %d): %s", (int)me->pid, (int)me->nspid, err);
		return rc;
	}
	c->fds->fd[c->fds->n++] = fd;
	rep_export_encode(c->out,
			  &(struct rep_export){.alloc = q->alloc_id, .size = info.size, .mc_devices = info.mc_devices});
	return PROTO_OK;
}

/* EXPORT: a fresh driver FD for (alloc id, token), attached to the reply. */
int serve_EXPORT(struct op_call *c)
{
	struct export_request q;
	char who_endpoint[4200];
	struct proto_iter it;
	piter_init(&it, c->payload, c->len);
	int rc = next_export(c, &it, &q, who_endpoint, sizeof(who_endpoint));
	if (rc == 0)
		shim_error_reply(c->out, "EXPORT needs an allocation id and a token");
	return rc == 1 ? export_one(c, &q) : rc == 0 ? PROTO_E_MALFORMED : rc;
}

/* EXPORT_MANY: one REC_EXPORT per allocation (the redeemer named in any of
 * them, for all; no forwarding), up to PROTO_MAX_FDS; the reply has a
 * REC_EXPORT and an FD for each, in the request's order. All or nothing: the
 * first that fails is the reply, and no FD goes. */
int serve_EXPORT_MANY(struct op_call *c)
{
	if (!shim_export_many) { /* answered as a shim before 1.6 does */
		shim_error_reply(c->out, "operation %d (%s) is not served by this shim", PROTO_OP_EXPORT_MANY,
				 proto_op_name(PROTO_OP_EXPORT_MANY));
		return PROTO_E_OP;
	}
	struct cusnap_id who = {{0}};
	const char *who_at = NULL;
	char who_endpoint[4200], next_endpoint[4200];
	struct proto_iter it;
	struct export_request q;
	int rc;
	piter_init(&it, c->payload, c->len);
	while ((rc = next_export(c, &it, &q, next_endpoint, sizeof(next_endpoint))) == 1) {
		if (c->fds->n == PROTO_MAX_FDS) {
			shim_error_reply(c->out, "EXPORT_MANY takes at most %d allocations", PROTO_MAX_FDS);
			rc = PROTO_E_LENGTH;
			break;
		}
		if (q.hops) {
			shim_error_reply(c->out, "EXPORT_MANY is never forwarded");
			rc = PROTO_E_MALFORMED;
			break;
		}
		/* The redeemer, named in any of them, for all. */
		if (q.who_endpoint) {
			who = q.who;
			snprintf(who_endpoint, sizeof(who_endpoint), "%s", q.who_endpoint);
			who_at = who_endpoint;
		}
		q.who = who;
		q.who_endpoint = who_at;
		if ((rc = export_one(c, &q)) != PROTO_OK)
			break;
	}
	if (rc == PROTO_OK && !c->fds->n) {
		shim_error_reply(c->out, "EXPORT_MANY names no allocation");
		rc = PROTO_E_MALFORMED;
	}
	if (rc != PROTO_OK) {
		while (c->fds->n)
			close(c->fds->fd[--c->fds->n]);
	}
	return rc;
}

/* One connection, served until the peer closes it, goes silent past the
 * deadline or sends something broken. Closes sock. */
static void serve_connection(int sock)
{
	int64_t deadline = proto_deadline(shim_deadline_ms());
	for (;;) {
		struct proto_header h;
		uint8_t *payload = NULL;
		int in_fd = -1; /* (the file of file content) */
		int rc = proto_recv(sock, &h, &payload, &in_fd, deadline);
		if (rc == PROTO_E_IO || rc == PROTO_E_TIMEOUT || rc == PROTO_E_TRUNCATED)
			break; /* gone, silent past the deadline, or cut short: just close */
		struct proto_buf out = {0};
		struct op_fds fds = {.n = 0};
		struct proto_header reply = {.magic = PROTO_MAGIC,
					     .major = PROTO_MAJOR,
					     .minor = PROTO_MINOR,
					     .flags = PROTO_FLAG_REPLY};
		if (rc != PROTO_OK) {
			/* Bad magic, version, length or an unexpected FD: a typed error, then close. */
			if (rc == PROTO_E_VERSION)
				shim_error_reply(&out, "peer speaks protocol %u.%u; this shim speaks %u.%u", h.major,
						 h.minor, PROTO_MAJOR, PROTO_MINOR);
			reply.status = rc;
			reply.op = h.op;
			reply.payload_len = (uint32_t)out.len;
			proto_send(sock, &reply, out.data, -1, deadline);
			pbuf_free(&out);
			break;
		}
		reply.op = h.op;
		reply.request_id = h.request_id;
		rc = shim_serve(h.op, payload, h.payload_len, in_fd, &out, &fds);
		if (in_fd >= 0)
			close(in_fd); /* never kept: CRIU must find no descriptor of the checkpoint here */
		/* The work may have taken longer than the request's deadline. */
		deadline = proto_deadline(shim_deadline_ms());
		free(payload);
		if (rc != PROTO_OK && out.failed) {
			pbuf_free(&out);
			memset(&out, 0, sizeof(out));
		}
		reply.status = rc;
		reply.payload_len = out.failed ? 0 : (uint32_t)out.len;
		int sent = proto_send_fds(sock, &reply, out.data, fds.fd, fds.n, deadline);
		for (size_t i = 0; i < fds.n; i++)
			close(fds.fd[i]); /* the raw driver FDs never stay here */
		pbuf_free(&out);
		if (sent != PROTO_OK)
			break;
		/* The next request of a batch (a restore redeems many on one
		 * connection) must come within a deadline of this reply. */
		deadline = proto_deadline(shim_deadline_ms());
	}
	close(sock);
	ctx_leave_all(); /* what EXPORT entered for this connection's requests */
}

static bool peer_allowed(int sock)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return false;
	return cred.uid == 0 || cred.uid == getuid();
}

static int start_thread(void);

static void *endpoint_thread(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	shim_own_thread();
	for (;;) {
		int sock = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (sock < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EBADF || errno == EINVAL)
				break;
			usleep(10000);
			continue;
		}
		if (!peer_allowed(sock)) {
			close(sock); /* no reply to other users */
			continue;
		}
		pthread_mutex_lock(&pool.lock);
		bool more = ++pool.busy == pool.threads && pool.threads < MAX_THREADS;
		pthread_mutex_unlock(&pool.lock);
		if (more)
			start_thread(); /* (when it cannot, the next connection waits for this one) */
		serve_connection(sock);
		pthread_mutex_lock(&pool.lock);
		bool leave = pool.threads - --pool.busy > IDLE_MAX;
		if (leave)
			pool.threads--;
		pthread_mutex_unlock(&pool.lock);
		if (leave)
			return NULL;
	}
	pthread_mutex_lock(&pool.lock);
	pool.threads--;
	pthread_mutex_unlock(&pool.lock);
	return NULL;
}

/* One more endpoint thread (it inherits this thread's signal mask). 0 or an errno. */
static int start_thread(void)
{
	pthread_mutex_lock(&pool.lock);
	pool.threads++;
	pthread_mutex_unlock(&pool.lock);
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&t, &attr, endpoint_thread, (void *)(intptr_t)listen_fd);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		pthread_mutex_lock(&pool.lock);
		pool.threads--;
		pthread_mutex_unlock(&pool.lock);
	}
	return rc;
}

int endpoint_start(const struct shim_identity *self)
{
	me = self;
	int rc = path_mkdirs(self->control_dir);
	if (rc < 0) {
		LOG_AT(LOG_ERROR, "control directory %s: %s", self->control_dir, strerror(-rc));
		return rc;
	}
	rc = usock_listen_mode(self->endpoint, 64, 0600);
	if (rc < 0) {
		LOG_AT(LOG_ERROR, "endpoint %s: %s", self->endpoint, strerror(-rc));
		return rc;
	}
	listen_fd = rc;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited by the endpoint threads */
	rc = start_thread();
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		close(listen_fd);
		listen_fd = -1;
		return -rc;
	}
	LOG_AT(LOG_INFO, "endpoint %s serving", self->endpoint);
	return 0;
}
