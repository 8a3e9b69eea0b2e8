/* SPDX-License-Identifier: MIT */
/* Talking to participants' endpoints. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/control.h"
#include "cusnap/counters.h"
#include "coord.h"
#include "cusnap/usock.h"

int coord_endpoint_path(const char *proc_root, const char *control_dir, int obs, int ns, char *out, size_t len)
{
	int n;
	if (proc_root && *proc_root)
		n = snprintf(out, len, "%s/%d/root%s%s/" CONTROL_ENDPOINT_FMT, proc_root, obs,
			     control_dir[0] == '/' ? "" : "/", control_dir, ns);
	else
		n = snprintf(out, len, "%s/" CONTROL_ENDPOINT_FMT, control_dir, ns);
	return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/* The message of an error reply, if it carries one. */
static void reply_message(const uint8_t *payload, size_t len, char *out, size_t outlen)
{
	struct proto_field_iter it;
	struct proto_rec f;
	pfield_init(&it, payload, len, REC_ERROR);
	while (pfield_next(&it, &f))
		if (f.type == F_MESSAGE && prec_str(&f, out, outlen) == 0)
			return;
}

uint32_t coord_reply_phase(const uint8_t *payload, size_t len)
{
	static const uint16_t types[] = {REC_RESULT, REC_ERROR};
	for (int t = 0; t < 2; t++) {
		struct proto_field_iter it;
		struct proto_rec f;
		uint32_t phase;
		pfield_init(&it, payload, len, types[t]);
		while (pfield_next(&it, &f))
			if (f.type == F_PHASE && prec_u32(&f, &phase) == 0)
				return phase;
	}
	return 0;
}

int coord_request(const char *endpoint, uint16_t op, const void *payload, size_t len, int timeout_ms,
		  struct proto_header *reply, uint8_t **reply_payload, char *err, size_t errlen)
{
	return coord_request_fd(endpoint, op, payload, len, -1, timeout_ms, reply, reply_payload, err, errlen);
}

int coord_request_fd(const char *endpoint, uint16_t op, const void *payload, size_t len, int fd, int timeout_ms,
		     struct proto_header *reply, uint8_t **reply_payload, char *err, size_t errlen)
{
	*reply_payload = NULL;
	int64_t deadline = proto_deadline(timeout_ms);
	count_add(COUNT_COORD_REQUESTS);
	int sock = usock_connect(endpoint);
	if (sock < 0) {
		snprintf(err, errlen, "endpoint %s: cannot connect: %s", endpoint, strerror(-sock));
		return PROTO_E_IO;
	}
	static uint32_t next_id = 1;
	struct proto_header h = {.magic = PROTO_MAGIC,
				 .major = PROTO_MAJOR,
				 .minor = PROTO_MINOR,
				 .op = op,
				 .request_id = __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED),
				 .payload_len = (uint32_t)len};
	int rc = proto_send(sock, &h, payload, fd, deadline);
	if (rc == PROTO_OK)
		rc = proto_recv(sock, reply, reply_payload, NULL, deadline);
	proto_close(sock, deadline);
	if (rc == PROTO_E_VERSION) {
		snprintf(err, errlen, "endpoint %s speaks protocol %u.%u; this tool speaks %u.%u", endpoint,
			 reply->major, reply->minor, PROTO_MAJOR, PROTO_MINOR);
		return rc;
	}
	if (rc != PROTO_OK) {
		snprintf(err, errlen, "endpoint %s: %s %s", endpoint, proto_op_name(op), proto_status_name(rc));
		return rc;
	}
	if (reply->status != PROTO_OK) {
		char msg[600] = "";
		reply_message(*reply_payload, reply->payload_len, msg, sizeof(msg));
		snprintf(err, errlen, "%s refused: %s%s%s", proto_op_name(op), proto_status_name(reply->status),
			 msg[0] ? ": " : "", msg);
		return reply->status;
	}
	return PROTO_OK;
}

int coord_inspect(const struct coord_target *t, int timeout_ms, struct topo_participant *out, char *err, size_t errlen)
{
	struct proto_header h;
	uint8_t *payload = NULL;
	char why[800];
	int rc = coord_request(t->endpoint, PROTO_OP_INSPECT, NULL, 0, timeout_ms, &h, &payload, why, sizeof(why));
	if (rc == PROTO_OK) {
		rc = topo_decode(payload, h.payload_len, out);
		if (rc != PROTO_OK)
			snprintf(why, sizeof(why), "INSPECT reply: %s", proto_status_name(rc));
	}
	free(payload);
	if (rc != PROTO_OK)
		snprintf(err, errlen, "participant %d (ns %d): %s", t->obs, t->ns, why);
	return rc;
}
