/* SPDX-License-Identifier: MIT */
/* Capabilities (SYSTEM.md §4.2): what cuMemExportToShareableHandle returns for a
 * tracked allocation instead of the driver's FD. A sealed memfd holding:
 *
 *   off size field
 *    0   4   magic "CSCP" (0x50435343)
 *    4   2   version (1)
 *    6   2   endpoint length N (bytes, 1..4095)
 *    8  16   creator participant id
 *   24  16   allocation id
 *   40  16   authorization token (random)
 *   56   N   creator endpoint path (no NUL)
 *
 * It names the creator, not a driver object, so a cached capability still
 * resolves after a restore. Anything else passed to import is a raw FD. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap/counters.h"
#include "cusnap/proto.h"
#include "cusnap/usock.h"
#include "cusnap/wire.h"
#include "shim.h"

#define CAP_MAGIC 0x50435343u
#define CAP_VERSION 1
#define CAP_HEADER 56
#define CAP_SEALS (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

int cap_make(const struct cusnap_id *creator, const struct cusnap_id *alloc_id, const struct cusnap_id *token,
	     const char *endpoint)
{
	size_t n = strlen(endpoint);
	if (!n || n > 4095)
		return -ENAMETOOLONG;
	uint8_t buf[CAP_HEADER + 4096];
	wire_put_u32(buf, CAP_MAGIC);
	wire_put_u16(buf + 4, CAP_VERSION);
	wire_put_u16(buf + 6, (uint16_t)n);
	memcpy(buf + 8, creator->b, ID_LEN);
	memcpy(buf + 24, alloc_id->b, ID_LEN);
	memcpy(buf + 40, token->b, ID_LEN);
	memcpy(buf + CAP_HEADER, endpoint, n);
	int fd = memfd_create("snapshot-cuda-vmm-capability", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	size_t len = CAP_HEADER + n;
	if (pwrite(fd, buf, len, 0) != (ssize_t)len || fcntl(fd, F_ADD_SEALS, CAP_SEALS) < 0) {
		int e = errno ? -errno : -EIO;
		close(fd);
		return e;
	}
	return fd;
}

/* The last capabilities made, kept open, so that exporting one again (NCCL
 * exports a buffer once for each peer) is a dup, not a new sealed memfd (which
 * costs about 9 us here). Bounded, so that a process exporting many
 * allocations does not hold a descriptor for each. Under tbl.lock. */
#define CAP_CACHE 16
static struct {
	struct cusnap_id creator, alloc_id, token;
	char *endpoint; /* NULL: an empty slot */
	int fd;
	uint64_t used;
} cached[CAP_CACHE];
static uint64_t cache_clock;

static void cache_drop(int i)
{
	close(cached[i].fd);
	free(cached[i].endpoint);
	cached[i].endpoint = NULL;
	cached[i].used = 0;
}

int cap_get(const struct cusnap_id *creator, const struct cusnap_id *alloc_id, const struct cusnap_id *token,
	    const char *endpoint)
{
	int lru = 0;
	for (int i = 0; i < CAP_CACHE; i++) {
		if (cached[i].endpoint && id_equal(&cached[i].alloc_id, alloc_id) &&
		    id_equal(&cached[i].creator, creator) && id_equal(&cached[i].token, token) &&
		    strcmp(cached[i].endpoint, endpoint) == 0) {
			cached[i].used = ++cache_clock;
			int fd = fcntl(cached[i].fd, F_DUPFD_CLOEXEC, 0);
			return fd < 0 ? -errno : fd;
		}
		if (cached[i].used < cached[lru].used)
			lru = i;
	}
	int fd = cap_make(creator, alloc_id, token, endpoint);
	int keep = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
	char *copy = keep >= 0 ? strdup(endpoint) : NULL;
	if (!copy) {
		if (keep >= 0)
			close(keep);
		return fd; /* not kept: made anew next time */
	}
	if (cached[lru].endpoint)
		cache_drop(lru);
	cached[lru].creator = *creator;
	cached[lru].alloc_id = *alloc_id;
	cached[lru].token = *token;
	cached[lru].endpoint = copy;
	cached[lru].fd = keep;
	cached[lru].used = ++cache_clock;
	return fd;
}

void cap_forget(const struct cusnap_id *alloc_id)
{
	for (int i = 0; i < CAP_CACHE; i++)
		if (cached[i].endpoint && id_equal(&cached[i].alloc_id, alloc_id))
			cache_drop(i);
}

void cap_forget_all(void)
{
	for (int i = 0; i < CAP_CACHE; i++)
		if (cached[i].endpoint)
			cache_drop(i);
}

bool cap_parse(int fd, struct shim_cap *cap)
{
	/* Only a sealed memfd has these seals; nothing can change its bytes. */
	if (fd < 0 || fcntl(fd, F_GET_SEALS) != CAP_SEALS)
		return false;
	uint8_t buf[CAP_HEADER + 4096];
	ssize_t got = pread(fd, buf, sizeof(buf), 0);
	if (got <= CAP_HEADER || got > CAP_HEADER + 4095)
		return false;
	size_t len = (size_t)got;
	size_t n = wire_get_u16(buf + 6);
	if (wire_get_u32(buf) != CAP_MAGIC || wire_get_u16(buf + 4) != CAP_VERSION || n + CAP_HEADER != len)
		return false;
	if (memchr(buf + CAP_HEADER, 0, n) || buf[CAP_HEADER] != '/')
		return false;
	memcpy(cap->creator.b, buf + 8, ID_LEN);
	memcpy(cap->alloc_id.b, buf + 24, ID_LEN);
	memcpy(cap->token.b, buf + 40, ID_LEN);
	if (id_is_zero(&cap->creator) || id_is_zero(&cap->alloc_id) || id_is_zero(&cap->token))
		return false;
	memcpy(cap->endpoint, buf + CAP_HEADER, n);
	cap->endpoint[n] = '\0';
	return true;
}

int cap_redeem(const struct shim_cap *cap, struct shim_export_info *info, char *err, size_t errlen)
{
	/* This process's own capability: the export table answers without the
	 * endpoint (the same checks, no socket, no thread). */
	const struct shim_identity *me = shim_self();
	if (me && id_equal(&cap->creator, &me->id)) {
		struct export_request q = {.alloc_id = cap->alloc_id,
					   .token = cap->token,
					   .who = me->id,
					   .in_caller_context = ctx_current_device() >= 0};
		int fd = -1;
		char why[600];
		int rc = exports_export(&q, info, &fd, why, sizeof(why));
		if (rc != PROTO_OK)
			snprintf(err, errlen, "EXPORT (this process): %s: %s", proto_status_name(rc), why);
		return rc == PROTO_OK ? fd : -1;
	}
	int sock = -1;
	int fd = cap_redeem_on(&sock, cap, info, err, errlen);
	if (sock >= 0)
		close(sock);
	return fd;
}

int shim_connect(const char *endpoint)
{
	count_add(COUNT_SHIM_CONNECTIONS);
	return usock_connect(endpoint);
}

int cap_export_send(int sock, const struct shim_cap *cap)
{
	return cap_export_send_hop(sock, cap, 0);
}

int cap_export_send_hop(int sock, const struct shim_cap *cap, unsigned hops)
{
	struct proto_buf req = {0};
	count_add(COUNT_SHIM_REQUESTS);
	size_t at = pbuf_begin(&req, REC_EXPORT);
	pbuf_put_id(&req, F_ALLOC_ID, &cap->alloc_id);
	pbuf_put_id(&req, F_TOKEN, &cap->token);
	const struct shim_identity *me = shim_self();
	if (me) { /* who redeems: a creator lists its multicast importers and its peers */
		pbuf_put_id(&req, F_ID, &me->id);
		pbuf_put_str(&req, F_ENDPOINT, me->endpoint);
	}
	if (hops)
		pbuf_put_u32(&req, F_HOPS, hops);
	pbuf_end(&req, at);
	struct proto_header h = {.magic = PROTO_MAGIC,
				 .major = PROTO_MAJOR,
				 .minor = PROTO_MINOR,
				 .op = PROTO_OP_EXPORT,
				 .request_id = 1,
				 .payload_len = (uint32_t)req.len};
	int rc = req.failed ? PROTO_E_INTERNAL : proto_send(sock, &h, req.data, -1, proto_deadline(shim_deadline_ms()));
	pbuf_free(&req);
	return rc;
}

int cap_export_recv(int sock, const struct shim_cap *cap, struct shim_export_info *info, char *err, size_t errlen)
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
		uint64_t bytes = 0;
		uint32_t mc_devices = 0;
		struct proto_field_iter it;
		struct proto_rec f;
		pfield_init(&it, payload, h.payload_len, REC_EXPORT);
		while (pfield_next(&it, &f)) {
			if (f.type == F_SIZE)
				prec_u64(&f, &bytes);
			else if (f.type == F_MC_DEVICES)
				prec_u32(&f, &mc_devices);
		}
		info->size = (size_t)bytes;
		info->mc_devices = mc_devices;
		if (!bytes)
			rc = PROTO_E_MALFORMED;
	}
	if (rc != PROTO_OK) {
		char msg[512] = "";
		struct proto_field_iter it;
		struct proto_rec f;
		pfield_init(&it, payload, payload ? h.payload_len : 0, REC_ERROR);
		while (pfield_next(&it, &f))
			if (f.type == F_MESSAGE)
				prec_str(&f, msg, sizeof(msg));
		snprintf(err, errlen, "EXPORT from %s: %s%s%s", cap->endpoint, proto_status_name(rc),
			 msg[0] ? ": " : "", msg);
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	free(payload);
	return fd;
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
