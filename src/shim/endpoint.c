/* SPDX-License-Identifier: MIT */
/* The participant's endpoint (SYSTEM.md §4.3, §5): a Unix socket served by an
 * accept thread and one short-lived thread per connection, all with every
 * signal blocked and none calling into the application. Each connection has a
 * deadline, so a silent client cannot hold anything for longer than that, and
 * EXPORT is served from its own table under its own lock: it never waits for the
 * table lock that wrappers hold across driver calls. */
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
#define CAPS_NONE 0ull

/* ---- exports ---- */

struct export_entry {
	struct cusnap_id alloc_id;
	struct cusnap_id token;
	CUmemGenericAllocationHandle driver; /* 0: not exportable now */
	size_t size;
	unsigned mc_devices;         /* a multicast object's numDevices; 0: memory */
	int device;                  /* whose primary context serves the export */
	struct cusnap_id *importers; /* multicast objects: the participants that redeemed it */
	size_t nimporters;
};

static pthread_mutex_t exp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hmap exports; /* id_hash(alloc id) -> export_entry */

int exports_put(const struct cusnap_id *alloc_id, const struct cusnap_id *token, CUmemGenericAllocationHandle driver,
		size_t size, unsigned mc_devices, int device)
{
	int rc = 0;
	pthread_mutex_lock(&exp_lock);
	struct export_entry *e = hmap_get(&exports, id_hash(alloc_id));
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e || hmap_put(&exports, id_hash(alloc_id), e) < 0) {
			free(e);
			rc = -ENOMEM;
			goto out;
		}
	}
	e->alloc_id = *alloc_id;
	e->token = *token;
	e->driver = driver;
	e->size = size;
	e->mc_devices = mc_devices;
	e->device = device;
out:
	pthread_mutex_unlock(&exp_lock);
	return rc;
}

void exports_drop(const struct cusnap_id *alloc_id)
{
	pthread_mutex_lock(&exp_lock);
	struct export_entry *e = hmap_del(&exports, id_hash(alloc_id));
	if (e)
		free(e->importers);
	free(e);
	pthread_mutex_unlock(&exp_lock);
}

/* Remember that participant who redeemed multicast object e. Caller holds exp_lock. */
static void note_importer(struct export_entry *e, const struct cusnap_id *who)
{
	for (size_t i = 0; i < e->nimporters; i++)
		if (id_equal(&e->importers[i], who))
			return;
	struct cusnap_id *grown = realloc(e->importers, (e->nimporters + 1) * sizeof(*grown));
	if (!grown)
		return; /* unlisted: validation then cannot tell this importer was left out */
	e->importers = grown;
	e->importers[e->nimporters++] = *who;
}

/* The importers of a multicast object this participant created, as F_MC_IMPORTER fields. */
static void put_importers(struct proto_buf *b, const struct cusnap_id *alloc_id)
{
	pthread_mutex_lock(&exp_lock);
	const struct export_entry *e = hmap_get(&exports, id_hash(alloc_id));
	for (size_t i = 0; e && id_equal(&e->alloc_id, alloc_id) && i < e->nimporters; i++)
		pbuf_put_id(b, F_MC_IMPORTER, &e->importers[i]);
	pthread_mutex_unlock(&exp_lock);
}

void exports_lock_for_fork(bool take)
{
	if (take)
		pthread_mutex_lock(&exp_lock);
	else
		pthread_mutex_unlock(&exp_lock);
}

/* ---- the server ---- */

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

static void put_identity(struct proto_buf *b, uint16_t type)
{
	size_t at = pbuf_begin(b, type);
	pbuf_put_id(b, F_ID, &me->id);
	pbuf_put_u32(b, F_NSPID, (uint32_t)me->nspid);
	pbuf_put_u32(b, F_PID, (uint32_t)me->pid);
	pbuf_put_u32(b, F_PHASE, (uint32_t)shim_phase());
	pbuf_put_u32(b, F_MAJOR_MIN, PROTO_MAJOR);
	pbuf_put_u32(b, F_MAJOR_MAX, PROTO_MAJOR);
	pbuf_put_u32(b, F_MINOR, PROTO_MINOR);
	pbuf_put_u64(b, F_CAPS, CAPS_NONE);
	pbuf_put_str(b, F_ENDPOINT, me->endpoint);
	pbuf_end(b, at);
}

static void put_alloc(struct proto_buf *b, const struct shim_alloc *a)
{
	size_t at = pbuf_begin(b, REC_ALLOCATION);
	pbuf_put_u64(b, F_KEY, a->key);
	pbuf_put_id(b, F_ALLOC_ID, &a->id);
	pbuf_put_id(b, F_CREATOR, &a->creator);
	pbuf_put_u32(b, F_ROLE, (uint32_t)a->role);
	pbuf_put_u32(b, F_SHARED, a->shared);
	pbuf_put_u32(b, F_SHARED_TYPES, a->shared_types);
	pbuf_put_u64(b, F_SIZE, a->size);
	pbuf_put_u32(b, F_ALLOC_TYPE, (uint32_t)a->prop.type);
	pbuf_put_u32(b, F_LOC_TYPE, (uint32_t)a->prop.location.type);
	pbuf_put_u32(b, F_DEVICE, (uint32_t)a->prop.location.id);
	pbuf_put_u32(b, F_HANDLE_TYPES, (uint32_t)a->prop.requestedHandleTypes);
	pbuf_put_u32(b, F_ALLOC_FLAGS,
		     (uint32_t)a->prop.allocFlags.compressionType |
			     (uint32_t)a->prop.allocFlags.gpuDirectRDMACapable << 8 |
			     (uint32_t)a->prop.allocFlags.usage << 16);
	pbuf_put_u32(b, F_HANDLES, (uint32_t)a->handles);
	pbuf_put_u32(b, F_MAPPINGS, (uint32_t)a->mappings);
	pbuf_put_u64(b, F_GRANULARITY, a->granularity);
	pbuf_put_u32(b, F_DETACHED, a->detached);
	pbuf_put_u32(b, F_BINDS, (uint32_t)a->mc_binds);
	pbuf_end(b, at);
}

static void put_multicast(struct proto_buf *b, const struct shim_alloc *a)
{
	const struct shim_mc *mc = a->mc;
	size_t at = pbuf_begin(b, REC_MULTICAST);
	pbuf_put_u64(b, F_KEY, a->key);
	pbuf_put_id(b, F_ALLOC_ID, &a->id);
	pbuf_put_id(b, F_CREATOR, &a->creator);
	pbuf_put_u32(b, F_ROLE, (uint32_t)a->role);
	pbuf_put_u64(b, F_SIZE, mc->prop.size);
	pbuf_put_u64(b, F_MC_USED, mc->used);
	pbuf_put_u32(b, F_MC_DEVICES, mc->prop.numDevices);
	pbuf_put_u32(b, F_HANDLE_TYPES, (uint32_t)mc->prop.handleTypes);
	pbuf_put_u32(b, F_SHARED_TYPES, a->shared_types);
	pbuf_put_u64(b, F_GRANULARITY, a->granularity);
	pbuf_put_u32(b, F_HANDLES, (uint32_t)a->handles);
	pbuf_put_u32(b, F_MAPPINGS, (uint32_t)a->mappings);
	pbuf_put_u32(b, F_DETACHED, a->detached);
	for (size_t i = 0; i < mc->nadded; i++)
		pbuf_put_u32(b, F_MC_ADDED, (uint32_t)mc->added[i]);
	if (a->role == SHIM_ROLE_CREATOR && !id_is_zero(&a->token))
		put_importers(b, &a->id);
	pbuf_end(b, at);
	for (size_t i = 0; i < mc->nbinds; i++) {
		const struct shim_mc_bind *x = &mc->binds[i];
		at = pbuf_begin(b, REC_MC_BIND);
		pbuf_put_u64(b, F_KEY, a->key);
		pbuf_put_id(b, F_ALLOC_ID, &a->id);
		pbuf_put_u32(b, F_DEVICE, (uint32_t)x->device);
		pbuf_put_u64(b, F_MC_OFFSET, x->mc_offset);
		pbuf_put_u64(b, F_SIZE, x->size);
		if (x->member)
			pbuf_put_id(b, F_MEMBER, &x->member->id);
		pbuf_put_u64(b, F_MEMBER_OFFSET, x->member_offset);
		pbuf_put_u64(b, F_ADDRESS, x->member_va);
		pbuf_put_u32(b, F_DETACHED, x->detached);
		pbuf_end(b, at);
	}
}

static void put_mapping(struct proto_buf *b, const struct shim_mapping *m)
{
	size_t at = pbuf_begin(b, REC_MAPPING);
	pbuf_put_u64(b, F_KEY, m->alloc->key);
	pbuf_put_id(b, F_ALLOC_ID, &m->alloc->id);
	pbuf_put_u64(b, F_ADDRESS, m->node.start);
	pbuf_put_u64(b, F_SIZE, m->node.end - m->node.start);
	pbuf_put_u64(b, F_OFFSET, m->offset);
	pbuf_put_u64(b, F_MAP_FLAGS, m->flags);
	pbuf_put_u32(b, F_DETACHED, m->detached);
	for (size_t i = 0; i < m->naccess; i++) {
		uint8_t acc[12];
		const struct shim_access *x = &m->access[i];
		uint32_t v[3] = {(uint32_t)x->location.type, (uint32_t)x->location.id, (uint32_t)x->flags};
		for (int j = 0; j < 3; j++)
			for (int k = 0; k < 4; k++)
				acc[j * 4 + k] = (uint8_t)(v[j] >> (8 * k));
		pbuf_put(b, F_ACCESS, acc, sizeof(acc));
	}
	pbuf_end(b, at);
}

int serve_HELLO(struct op_call *c)
{
	put_identity(c->out, REC_HELLO);
	return c->out->failed ? PROTO_E_INTERNAL : PROTO_OK;
}

int serve_INSPECT(struct op_call *c)
{
	struct proto_buf *out = c->out;
	put_identity(out, REC_PARTICIPANT);
	pthread_mutex_lock(&tbl.lock);
	for (size_t i = 0; i < tbl.allocs.cap; i++) {
		const struct shim_alloc *a = tbl.allocs.vals[i];
		if (!tbl.allocs.keys[i])
			continue;
		if (a->mc)
			put_multicast(out, a);
		else
			put_alloc(out, a);
	}
	for (struct itree_node *n = itree_first_from(&tbl.mappings, 0); n; n = itree_next(&tbl.mappings, n))
		put_mapping(out, (struct shim_mapping *)n);
	pthread_mutex_unlock(&tbl.lock);
	return out->failed ? PROTO_E_INTERNAL : PROTO_OK;
}

/* EXPORT: a fresh driver FD for (alloc id, token), attached to the reply. */
static int export_fd(const uint8_t *payload, size_t len, struct proto_buf *out, int *fd_out)
{
	struct cusnap_id id = {{0}}, token = {{0}}, who = {{0}};
	bool have_id = false, have_token = false;
	struct proto_field_iter it;
	struct proto_rec f;
	pfield_init(&it, payload, len, REC_EXPORT);
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
	char hex[ID_HEX_LEN + 1];
	id_hex(&id, hex);
	pthread_mutex_lock(&exp_lock);
	struct export_entry *e = hmap_get(&exports, id_hash(&id));
	bool found = e && id_equal(&e->alloc_id, &id);
	bool allowed = found && id_equal_ct(&e->token, &token);
	CUmemGenericAllocationHandle driver = allowed ? e->driver : 0;
	size_t size = allowed ? e->size : 0;
	unsigned mc_devices = allowed ? e->mc_devices : 0;
	int device = allowed ? e->device : 0;
	if (mc_devices && !id_is_zero(&who))
		note_importer(e, &who);
	pthread_mutex_unlock(&exp_lock);
	if (!found) {
		shim_error_reply(out, "allocation %s is not exported by participant %d", hex, (int)me->nspid);
		return PROTO_E_NOT_FOUND;
	}
	if (!allowed) {
		shim_error_reply(out, "allocation %s: capability token does not match", hex);
		return PROTO_E_AUTH;
	}
	int fd = -1;
	/* This thread has no context of its own (SYSTEM.md §4.1). */
	CUresult cr = driver ? ctx_enter_device(device) : CUDA_ERROR_INVALID_HANDLE;
	const char *call = driver ? CTX_ENTER_CALLS : "cuMemExportToShareableHandle";
	if (cr == CUDA_SUCCESS) {
		call = "cuMemExportToShareableHandle";
		cr = real.cuMemExportToShareableHandle(&fd, driver, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	}
	ctx_leave_all();
	if (cr != CUDA_SUCCESS) {
		shim_error_reply(out, "participant %d (ns %d): allocation %s: %s failed: %s", (int)me->pid,
				 (int)me->nspid, hex, call,
				 driver ? shim_cu_name(cr) : "not attached now (a checkpoint is under way)");
		return PROTO_E_DRIVER;
	}
	size_t at = pbuf_begin(out, REC_EXPORT);
	pbuf_put_id(out, F_ALLOC_ID, &id);
	pbuf_put_u64(out, F_SIZE, size);
	if (mc_devices)
		pbuf_put_u32(out, F_MC_DEVICES, mc_devices);
	pbuf_end(out, at);
	*fd_out = fd;
	return PROTO_OK;
}

int serve_EXPORT(struct op_call *c)
{
	return export_fd(c->payload, c->len, c->out, c->fd);
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
