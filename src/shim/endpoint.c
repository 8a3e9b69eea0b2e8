/* SPDX-License-Identifier: MIT */
/* The participant's endpoint (SYSTEM.md §4.3, §5): a Unix socket served by an
 * accept thread and one short-lived thread per connection, all with every
 * signal blocked and none calling into the application. Each connection has a
 * deadline, so a silent client cannot hold anything for longer than that.
 * Requests go to shim_serve (dispatch.c); EXPORT is served from the export
 * table (exports.c), never waiting for the table lock that wrappers hold
 * across driver calls; HELLO and INSPECT are in records.c. */
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

#define MAX_CLIENTS 64

static const struct shim_identity *me;
static int listen_fd = -1;
static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER;
static int clients;

void endpoint_after_fork_child(void)
{
	/* Threads are gone in the child; its own endpoint starts with its identity. */
	if (listen_fd >= 0)
		close(listen_fd);
	listen_fd = -1;
	me = NULL;
	clients = 0;
	pthread_mutex_init(&clients_lock, NULL);
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

static void *serve_client(void *arg)
{
	int sock = (int)(intptr_t)arg;
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
	pthread_mutex_lock(&clients_lock);
	clients--;
	pthread_mutex_unlock(&clients_lock);
	return NULL;
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
		pthread_mutex_lock(&clients_lock);
		bool room = clients < MAX_CLIENTS;
		if (room)
			clients++;
		pthread_mutex_unlock(&clients_lock);
		pthread_t t;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (!room || pthread_create(&t, &attr, serve_client, (void *)(intptr_t)sock) != 0) {
			close(sock);
			if (room) {
				pthread_mutex_lock(&clients_lock);
				clients--;
				pthread_mutex_unlock(&clients_lock);
			}
		}
		pthread_attr_destroy(&attr);
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
