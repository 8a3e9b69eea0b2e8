/* SPDX-License-Identifier: MIT */
/* Capabilities (DESIGN.md §4.2): what cuMemExportToShareableHandle returns for a
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

#include "cusnap/proto.h"
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
