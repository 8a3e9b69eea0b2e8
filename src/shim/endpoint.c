/* SPDX-License-Identifier: MIT */
/* The participant's endpoint (SYSTEM.md §4.3, §5): a Unix socket served by an
 * accept thread and a thread per connection taken from a small pool, all with
 * every signal blocked (they inherit the accept thread's mask) and none calling
 * into the application. Each connection has a deadline, so a silent client
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
#include "shim.h"

#define MAX_CLIENTS 64 /* connections served at once; more are closed unanswered */
#define IDLE_MAX 4     /* threads kept waiting for the next connection */

static const struct shim_identity *me;
static int listen_fd = -1;

/* The connection threads. One that has served its connection waits for the
 * next (up to IDLE_MAX of them), so a connection normally costs a wake-up, not
 * a thread: a new thread is made only when none is idle. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t ready;
	int threads; /* alive, serving or idle */
	int idle;    /* waiting in pool_next */
	int queue[MAX_CLIENTS];
	int head, len; /* accepted connections not yet taken */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, {0}, 0, 0};

void endpoint_after_fork_child(void)
{
	/* Threads are gone in the child; its own endpoint starts with its identity. */
	if (listen_fd >= 0)
		close(listen_fd);
	listen_fd = -1;
	me = NULL;
	for (int i = 0; i < pool.len; i++)
		close(pool.queue[(pool.head + i) % MAX_CLIENTS]);
	pool.threads = pool.idle = pool.head = pool.len = 0;
	pthread_mutex_init(&pool.lock, NULL);
	pthread_cond_init(&pool.ready, NULL);
}

/* EXPORT: a fresh driver FD for (alloc id, token), attached to the reply. */
int serve_EXPORT(struct op_call *c)
{
	struct proto_buf *out = c->out;
	struct cusnap_id id = {{0}}, token = {{0}}, who = {{0}};
	bool have_id = false, have_token = false;
	struct proto_field_iter it;
	struct proto_rec f;
	pfield_init(&it, c->payload, c->len, REC_EXPORT);
	while (pfield_next(&it, &f)) {
		if (f.type == F_ALLOC_ID)
			have_id = prec_id(&f, &id) == 0;
		else if (f.type == F_TOKEN)
			have_token = prec_id(&f, &token) == 0;
		else if (f.type == F_ID && prec_id(&f, &who) != 0)
			memset(&who, 0, sizeof(who));
	}
	if (it.error)
		return it.error;
	if (!have_id || !have_token) {
		shim_error_reply(out, "EXPORT needs an allocation id and a token");
		return PROTO_E_MALFORMED;
	}
	struct export_request q = {.alloc_id = id, .token = token, .who = who};
	struct shim_export_info info = {0};
	char err[600];
	int rc = exports_export(&q, &info, c->fd, err, sizeof(err));
	if (rc != PROTO_OK) {
		shim_error_reply(out, "participant %d (ns %d): %s", (int)me->pid, (int)me->nspid, err);
		return rc;
	}
	size_t at = pbuf_begin(out, REC_EXPORT);
	pbuf_put_id(out, F_ALLOC_ID, &id);
	pbuf_put_u64(out, F_SIZE, info.size);
	if (info.mc_devices)
		pbuf_put_u32(out, F_MC_DEVICES, info.mc_devices);
	pbuf_end(out, at);
	return PROTO_OK;
}

/* One connection, served until the peer closes it, goes silent past the
 * deadline or sends something broken. Closes sock. */
static void serve_connection(int sock)
{
	int64_t deadline = proto_deadline(shim_deadline_ms());
	for (;;) {
		struct proto_header h;
		uint8_t *payload = NULL;
		int rc = proto_recv(sock, &h, &payload, NULL, deadline);
		if (rc == PROTO_E_IO || rc == PROTO_E_TIMEOUT || rc == PROTO_E_TRUNCATED)
			break; /* gone, silent past the deadline, or cut short: just close */
		struct proto_buf out = {0};
		int fd = -1;
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
		rc = shim_serve(h.op, payload, h.payload_len, &out, &fd);
		/* The work may have taken longer than the request's deadline. */
		deadline = proto_deadline(shim_deadline_ms());
		free(payload);
		if (rc != PROTO_OK && out.failed) {
			pbuf_free(&out);
			memset(&out, 0, sizeof(out));
		}
		reply.status = rc;
		reply.payload_len = out.failed ? 0 : (uint32_t)out.len;
		int sent = proto_send(sock, &reply, out.data, fd, deadline);
		if (fd >= 0)
			close(fd); /* the raw driver FD never stays here */
		pbuf_free(&out);
		if (sent != PROTO_OK)
			break;
		/* The next request of a batch (a restore redeems many on one
		 * connection) must come within a deadline of this reply. */
		deadline = proto_deadline(shim_deadline_ms());
	}
	close(sock);
}

/* After a connection: the next one to serve, or -1 when this thread should end
 * (enough threads are idle already). */
static int pool_next(void)
{
	pthread_mutex_lock(&pool.lock);
	if (pool.idle >= IDLE_MAX) {
		pool.threads--;
		pthread_mutex_unlock(&pool.lock);
		return -1;
	}
	pool.idle++;
	while (!pool.len)
		pthread_cond_wait(&pool.ready, &pool.lock);
	pool.idle--;
	int sock = pool.queue[pool.head];
	pool.head = (pool.head + 1) % MAX_CLIENTS;
	pool.len--;
	pthread_mutex_unlock(&pool.lock);
	return sock;
}

static void *connection_thread(void *arg)
{
	for (int sock = (int)(intptr_t)arg; sock >= 0; sock = pool_next())
		serve_connection(sock);
	return NULL;
}

/* Hand an accepted connection to an idle thread, or to a new one. */
static void dispatch_connection(int sock)
{
	pthread_mutex_lock(&pool.lock);
	if (pool.idle > pool.len) {
		pool.queue[(pool.head + pool.len++) % MAX_CLIENTS] = sock;
		pthread_cond_signal(&pool.ready);
		pthread_mutex_unlock(&pool.lock);
		return;
	}
	bool room = pool.threads < MAX_CLIENTS;
	if (room)
		pool.threads++;
	pthread_mutex_unlock(&pool.lock);
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (!room || pthread_create(&t, &attr, connection_thread, (void *)(intptr_t)sock) != 0) {
		close(sock); /* no reply: the client sees the connection close */
		if (room) {
			pthread_mutex_lock(&pool.lock);
			pool.threads--;
			pthread_mutex_unlock(&pool.lock);
		}
	}
	pthread_attr_destroy(&attr);
}

static bool peer_allowed(int sock)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return false;
	return cred.uid == 0 || cred.uid == getuid();
}

static void *accept_loop(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	for (;;) {
		int sock = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (sock < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EBADF || errno == EINVAL)
				return NULL;
			usleep(10000);
			continue;
		}
		if (!peer_allowed(sock)) {
			close(sock); /* no reply to other users */
			continue;
		}
		dispatch_connection(sock);
	}
	return NULL;
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
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &attr, accept_loop, (void *)(intptr_t)listen_fd);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		close(listen_fd);
		listen_fd = -1;
		return -rc;
	}
	LOG_AT(LOG_INFO, "endpoint %s serving", self->endpoint);
	return 0;
}
