/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cusnap/proto.h"
#include "cusnap/wire.h"

/* The header layout is frozen: mixed-version peers depend on it. */
_Static_assert(PROTO_HEADER_LEN == 4 + 2 + 2 + 2 + 2 + 4 + 4 + 4, "header fields");
_Static_assert(PROTO_REC_HEADER_LEN == 2 + 4, "record header fields");

void proto_header_pack(const struct proto_header *h, uint8_t out[PROTO_HEADER_LEN])
{
	wire_put_u32(out + 0, h->magic);
	wire_put_u16(out + 4, h->major);
	wire_put_u16(out + 6, h->minor);
	wire_put_u16(out + 8, h->op);
	wire_put_u16(out + 10, h->flags);
	wire_put_u32(out + 12, h->request_id);
	wire_put_u32(out + 16, (uint32_t)h->status);
	wire_put_u32(out + 20, h->payload_len);
}

int proto_header_unpack(const uint8_t in[PROTO_HEADER_LEN], struct proto_header *h)
{
	h->magic = wire_get_u32(in + 0);
	h->major = wire_get_u16(in + 4);
	h->minor = wire_get_u16(in + 6);
	h->op = wire_get_u16(in + 8);
	h->flags = wire_get_u16(in + 10);
	h->request_id = wire_get_u32(in + 12);
	h->status = (int32_t)wire_get_u32(in + 16);
	h->payload_len = wire_get_u32(in + 20);
	if (h->magic != PROTO_MAGIC)
		return PROTO_E_MAGIC;
	if (h->major != PROTO_MAJOR)
		return PROTO_E_VERSION;
	if (h->payload_len > PROTO_MAX_PAYLOAD)
		return PROTO_E_LENGTH;
	return PROTO_OK;
}

const char *proto_status_name(int status)
{
	switch (status) {
	case PROTO_OK: return "ok";
	case PROTO_E_MAGIC: return "bad magic (not the snapshot-cuda-vmm protocol)";
	case PROTO_E_VERSION: return "protocol major version mismatch";
	case PROTO_E_OP: return "unknown operation";
	case PROTO_E_LENGTH: return "length out of range";
	case PROTO_E_TRUNCATED: return "truncated message";
	case PROTO_E_FD: return "unexpected or missing file descriptor";
	case PROTO_E_MALFORMED: return "malformed records";
	case PROTO_E_PHASE: return "operation not allowed in this phase";
	case PROTO_E_AUTH: return "capability token refused";
	case PROTO_E_NOT_FOUND: return "no such object";
	case PROTO_E_DRIVER: return "driver call failed";
	case PROTO_E_INTERNAL: return "internal error";
	case PROTO_E_TIMEOUT: return "deadline passed";
	case PROTO_E_IO: return "connection failed";
	case PROTO_E_UNRESTORABLE: return "holds what cannot be checkpointed";
	default: return "unknown status";
	}
}

const char *proto_op_name(int op)
{
	static const char *const names[] = {
#define OP(name, value, kind, admitted, done, next) [PROTO_OP_##name] = #name,
#include "cusnap/ops.def"
#undef OP
	};
	if (op > 0 && op < (int)(sizeof(names) / sizeof(names[0])) && names[op])
		return names[op];
	return "UNKNOWN";
}

const char *proto_phase_name(uint32_t phase)
{
	static const char *const names[PROTO_PHASE_COUNT] = {
		[PROTO_PHASE_ACTIVE] = "active",
		[PROTO_PHASE_QUIESCED] = "quiesced",
		[PROTO_PHASE_MULTICAST_DETACHED] = "multicast_detached",
		[PROTO_PHASE_PREPARED] = "prepared",
		[PROTO_PHASE_CREATORS_RESTORED] = "creators_restored",
		[PROTO_PHASE_UNICAST_RESTORED] = "unicast_restored",
		[PROTO_PHASE_FAILED] = "failed",
		[PROTO_PHASE_MC_CREATED] = "multicast_created",
		[PROTO_PHASE_MC_IMPORTED] = "multicast_imported",
		[PROTO_PHASE_RESTORED] = "restored",
	};
	return phase < PROTO_PHASE_COUNT && names[phase] ? names[phase] : "unknown";
}

/* ---- building ---- */

static bool reserve(struct proto_buf *b, size_t more)
{
	if (b->failed)
		return false;
	if (more > PROTO_MAX_PAYLOAD || b->len + more > PROTO_MAX_PAYLOAD) {
		b->failed = true;
		return false;
	}
	if (b->len + more <= b->cap)
		return true;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + more)
		cap *= 2;
	uint8_t *d = realloc(b->data, cap);
	if (!d) {
		b->failed = true;
		return false;
	}
	b->data = d;
	b->cap = cap;
	return true;
}

void pbuf_put(struct proto_buf *b, uint16_t type, const void *value, uint32_t len)
{
	if (!reserve(b, PROTO_REC_HEADER_LEN + (size_t)len))
		return;
	wire_put_u16(b->data + b->len, type);
	wire_put_u32(b->data + b->len + 2, len);
	if (len)
		memcpy(b->data + b->len + PROTO_REC_HEADER_LEN, value, len);
	b->len += PROTO_REC_HEADER_LEN + (size_t)len;
}

void pbuf_put_u32(struct proto_buf *b, uint16_t type, uint32_t v)
{
	uint8_t x[4];
	wire_put_u32(x, v);
	pbuf_put(b, type, x, sizeof(x));
}

void pbuf_put_u64(struct proto_buf *b, uint16_t type, uint64_t v)
{
	uint8_t x[8];
	wire_put_u64(x, v);
	pbuf_put(b, type, x, sizeof(x));
}

void pbuf_put_id(struct proto_buf *b, uint16_t type, const struct cusnap_id *id)
{
	pbuf_put(b, type, id->b, ID_LEN);
}

void pbuf_put_str(struct proto_buf *b, uint16_t type, const char *s)
{
	pbuf_put(b, type, s, (uint32_t)strlen(s));
}

size_t pbuf_begin(struct proto_buf *b, uint16_t type)
{
	size_t at = b->len;
	pbuf_put(b, type, NULL, 0);
	return at;
}

void pbuf_end(struct proto_buf *b, size_t at)
{
	if (b->failed)
		return;
	wire_put_u32(b->data + at + 2, (uint32_t)(b->len - at - PROTO_REC_HEADER_LEN));
}

void pbuf_free(struct proto_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/* ---- reading ---- */

void piter_init(struct proto_iter *it, const void *data, size_t len)
{
	it->p = data;
	it->end = it->p + len;
	it->error = 0;
}

bool piter_next(struct proto_iter *it, struct proto_rec *rec)
{
	if (it->error || it->p == it->end)
		return false;
	if ((size_t)(it->end - it->p) < PROTO_REC_HEADER_LEN) {
		it->error = PROTO_E_TRUNCATED;
		return false;
	}
	rec->type = wire_get_u16(it->p);
	rec->len = wire_get_u32(it->p + 2);
	if (rec->len > (size_t)(it->end - it->p) - PROTO_REC_HEADER_LEN) {
		it->error = PROTO_E_TRUNCATED;
		return false;
	}
	rec->value = it->p + PROTO_REC_HEADER_LEN;
	it->p += PROTO_REC_HEADER_LEN + rec->len;
	return true;
}

bool piter_next_of(struct proto_iter *it, uint16_t type, struct proto_rec *rec)
{
	while (piter_next(it, rec))
		if (rec->type == type)
			return true;
	return false;
}

void pfield_init2(struct proto_field_iter *it, const void *data, size_t len, uint16_t rec_type, uint16_t alt)
{
	memset(it, 0, sizeof(*it));
	piter_init(&it->recs, data, len);
	it->type = rec_type;
	it->alt = alt;
}

void pfield_init(struct proto_field_iter *it, const void *data, size_t len, uint16_t rec_type)
{
	pfield_init2(it, data, len, rec_type, rec_type);
}

bool pfield_next(struct proto_field_iter *it, struct proto_rec *field)
{
	for (;;) {
		if (it->inside && piter_next(&it->fields, field))
			return true;
		if (it->inside && it->fields.error) {
			it->error = it->fields.error;
			return false;
		}
		it->inside = false;
		struct proto_rec rec;
		if (!piter_next(&it->recs, &rec)) {
			it->error = it->recs.error;
			return false;
		}
		if (rec.type == it->type || rec.type == it->alt) {
			piter_init(&it->fields, rec.value, rec.len);
			it->inside = true;
		}
	}
}

int prec_u32(const struct proto_rec *r, uint32_t *v)
{
	if (r->len != 4)
		return PROTO_E_LENGTH;
	*v = wire_get_u32(r->value);
	return 0;
}

int prec_u64(const struct proto_rec *r, uint64_t *v)
{
	if (r->len != 8)
		return PROTO_E_LENGTH;
	*v = wire_get_u64(r->value);
	return 0;
}

int prec_id(const struct proto_rec *r, struct cusnap_id *id)
{
	if (r->len != ID_LEN)
		return PROTO_E_LENGTH;
	memcpy(id->b, r->value, ID_LEN);
	return 0;
}

int prec_str(const struct proto_rec *r, char *out, size_t outlen)
{
	if (r->len >= outlen || memchr(r->value, 0, r->len))
		return PROTO_E_LENGTH;
	memcpy(out, r->value, r->len);
	out[r->len] = '\0';
	return 0;
}

/* ---- sockets ---- */

double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int64_t proto_deadline(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : (int64_t)now_ms() + timeout_ms;
}

/* Wait for events on sock until deadline. Returns 0 or PROTO_E_TIMEOUT / PROTO_E_IO. */
static int wait_for(int sock, short events, int64_t deadline)
{
	for (;;) {
		int left = -1;
		if (deadline >= 0) {
			int64_t d = deadline - (int64_t)now_ms();
			if (d <= 0)
				return PROTO_E_TIMEOUT;
			left = d > 1 << 30 ? 1 << 30 : (int)d;
		}
		struct pollfd p = {.fd = sock, .events = events};
		int r = poll(&p, 1, left);
		if (r > 0)
			return 0;
		if (r == 0)
			return PROTO_E_TIMEOUT;
		if (errno != EINTR)
			return PROTO_E_IO;
	}
}

void proto_close(int sock, int64_t deadline)
{
	char drain[256];
	bool half = shutdown(sock, SHUT_WR) == 0;
	while (half && wait_for(sock, POLLIN, deadline) == 0) {
		ssize_t n = recv(sock, drain, sizeof(drain), MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			break;
	}
	close(sock);
}

int proto_send(int sock, const struct proto_header *h, const void *payload, int pass_fd, int64_t deadline)
{
	return proto_send_fds(sock, h, payload, &pass_fd, pass_fd >= 0, deadline);
}

int proto_send_fds(int sock, const struct proto_header *h, const void *payload, const int *fds, size_t nfds,
		   int64_t deadline)
{
	if (nfds > PROTO_MAX_FDS)
		return PROTO_E_FD;
	uint8_t hdr[PROTO_HEADER_LEN];
	proto_header_pack(h, hdr);
	struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)payload, payload ? h->payload_len : 0}};
	size_t total = sizeof(hdr) + iov[1].iov_len, sent = 0;
	bool fds_sent = nfds == 0;
	union {
		char buf[CMSG_SPACE(sizeof(int) * PROTO_MAX_FDS)];
		struct cmsghdr align;
	} u;
	/* Each try goes first; poll only when the socket would block (the
	 * deadline is checked there). */
	while (sent < total) {
		/* Skip what was sent already across the two iovecs. */
		struct iovec cur[2];
		int n = 0;
		size_t skip = sent;
		for (int i = 0; i < 2; i++) {
			if (skip >= iov[i].iov_len) {
				skip -= iov[i].iov_len;
				continue;
			}
			cur[n].iov_base = (uint8_t *)iov[i].iov_base + skip;
			cur[n].iov_len = iov[i].iov_len - skip;
			skip = 0;
			n++;
		}
		struct msghdr msg = {.msg_iov = cur, .msg_iovlen = (size_t)n};
		if (!fds_sent) { /* with the first bytes that go */
			memset(&u, 0, CMSG_SPACE(sizeof(int) * nfds));
			msg.msg_control = u.buf;
			msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
			struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
			memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
		}
		ssize_t w = sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && errno == ETOOMANYREFS && !fds_sent) {
			/* This user has more descriptors in flight than its RLIMIT_NOFILE
			 * (an unprivileged creator serving many importers at once): they
			 * leave as the receivers read theirs. */
			if (deadline >= 0 && (int64_t)now_ms() >= deadline)
				return PROTO_E_TIMEOUT;
			poll(NULL, 0, 1);
			continue;
		}
		if (w < 0) {
			int rc = errno == EINTR ? 0 : errno == EAGAIN ? wait_for(sock, POLLOUT, deadline) : PROTO_E_IO;
			if (rc)
				return rc;
			continue;
		}
		fds_sent = true;
		sent += (size_t)w;
	}
	return PROTO_OK;
}

/* Descriptors received so far: up to max kept in order, the rest closed. */
struct fd_catch {
	int *fds;
	size_t max, n;
	bool overflow;
};

/* Read exactly len bytes, collecting the descriptors that come into *got. */
static int read_exact(int sock, uint8_t *buf, size_t len, struct fd_catch *got_fds, int64_t deadline)
{
	size_t got = 0;
	union {
		char buf[CMSG_SPACE(sizeof(int) * PROTO_MAX_FDS)];
		struct cmsghdr align;
	} u;
	while (got < len) { /* as in proto_send: poll only when it would block */
		struct iovec iov = {buf + got, len - got};
		struct msghdr msg = {.msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = u.buf,
				     .msg_controllen = sizeof(u.buf)};
		ssize_t r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (r < 0) {
			int rc = errno == EINTR ? 0 : errno == EAGAIN ? wait_for(sock, POLLIN, deadline) : PROTO_E_IO;
			if (rc)
				return rc;
			continue;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nfd; i++) {
				int f;
				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (got_fds->n < got_fds->max) {
					got_fds->fds[got_fds->n++] = f;
				} else {
					close(f);
					got_fds->overflow = true;
				}
			}
		}
		if (msg.msg_flags & MSG_CTRUNC)
			return PROTO_E_FD;
		if (r == 0)
			return got || len ? PROTO_E_TRUNCATED : PROTO_E_IO;
		got += (size_t)r;
	}
	return PROTO_OK;
}

int proto_recv(int sock, struct proto_header *h, uint8_t **payload, int *fd, int64_t deadline)
{
	size_t n = 0;
	int got = -1;
	int rc = proto_recv_fds(sock, h, payload, &got, fd ? 1 : 0, &n, deadline);
	if (fd)
		*fd = n ? got : -1;
	return rc;
}

int proto_recv_fds(int sock, struct proto_header *h, uint8_t **payload, int *fds, size_t maxfds, size_t *nfds,
		   int64_t deadline)
{
	uint8_t hdr[PROTO_HEADER_LEN];
	struct fd_catch got = {.fds = fds, .max = maxfds};
	*payload = NULL;
	*nfds = 0;
	int rc = read_exact(sock, hdr, sizeof(hdr), &got, deadline);
	if (rc == PROTO_OK)
		rc = proto_header_unpack(hdr, h);
	if (rc == PROTO_OK && h->payload_len) {
		/* Bounded by PROTO_MAX_PAYLOAD in proto_header_unpack. */
		*payload = malloc(h->payload_len);
		if (!*payload)
			rc = PROTO_E_INTERNAL;
		else
			rc = read_exact(sock, *payload, h->payload_len, &got, deadline);
	}
	if (rc == PROTO_OK && got.overflow)
		rc = PROTO_E_FD; /* more than asked for (none when maxfds is 0) */
	if (rc != PROTO_OK) {
		for (size_t i = 0; i < got.n; i++)
			close(fds[i]);
		free(*payload);
		*payload = NULL;
		return rc;
	}
	*nfds = got.n;
	return PROTO_OK;
}
