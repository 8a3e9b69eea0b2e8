/* SPDX-License-Identifier: MIT */
/* The protocol codec: golden byte vectors, round trips, and every refusal. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness/test.h"
#include "../../src/coordinator/coord_client.h"
#include "cusnap/proto.h"
#include "cusnap/usock.h"
#include "cusnap/topo.h"

static void header_golden(void)
{
	struct proto_header h = {.magic = PROTO_MAGIC,
				 .major = 1,
				 .minor = 2,
				 .op = PROTO_OP_EXPORT,
				 .flags = PROTO_FLAG_REPLY,
				 .request_id = 0x01020304,
				 .status = PROTO_E_AUTH,
				 .payload_len = 0x10};
	uint8_t out[PROTO_HEADER_LEN];
	proto_header_pack(&h, out);
	static const uint8_t golden[PROTO_HEADER_LEN] = {
		0x43, 0x53, 0x56, 0x4d, /* "CSVM" */
		0x01, 0x00,             /* major 1 */
		0x02, 0x00,             /* minor 2 */
		0x03, 0x00,             /* EXPORT */
		0x01, 0x00,             /* reply */
		0x04, 0x03, 0x02, 0x01, /* request id */
		0x0f, 0xfc, 0xff, 0xff, /* -1009 */
		0x10, 0x00, 0x00, 0x00, /* 16 bytes of payload */
	};
	CHECK(memcmp(out, golden, sizeof(golden)) == 0);
	struct proto_header back;
	CHECK_EQ(proto_header_unpack(golden, &back), PROTO_OK);
	CHECK_EQ(back.op, PROTO_OP_EXPORT);
	CHECK_EQ(back.request_id, 0x01020304);
	CHECK_EQ(back.status, PROTO_E_AUTH);
	CHECK_EQ(back.payload_len, 16);
}

static void header_refusals(void)
{
	struct proto_header h = {.magic = PROTO_MAGIC, .major = PROTO_MAJOR, .op = 1};
	uint8_t b[PROTO_HEADER_LEN];
	proto_header_pack(&h, b);
	b[0] ^= 1;
	CHECK_EQ(proto_header_unpack(b, &h), PROTO_E_MAGIC);
	h.magic = PROTO_MAGIC;
	h.major = PROTO_MAJOR + 1;
	proto_header_pack(&h, b);
	CHECK_EQ(proto_header_unpack(b, &h), PROTO_E_VERSION);
	CHECK_EQ(h.major, PROTO_MAJOR + 1); /* both versions can be named */
	h.major = PROTO_MAJOR;
	h.payload_len = PROTO_MAX_PAYLOAD + 1;
	proto_header_pack(&h, b);
	CHECK_EQ(proto_header_unpack(b, &h), PROTO_E_LENGTH);
	CHECK_STR(proto_op_name(999), "UNKNOWN");
	CHECK_STR(proto_op_name(PROTO_OP_INSPECT), "INSPECT");
}

static void records_golden(void)
{
	struct proto_buf b = {0};
	size_t at = pbuf_begin(&b, REC_EXPORT);
	pbuf_put_u32(&b, F_NSPID, 7);
	pbuf_put_u64(&b, F_SIZE, 0x200000);
	pbuf_end(&b, at);
	static const uint8_t golden[] = {
		0x06, 0x00, 0x18, 0x00, 0x00, 0x00,                         /* REC_EXPORT, 24 bytes */
		0x02, 0x00, 0x04, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, /* F_NSPID = 7 */
		0x0e, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, /* F_SIZE */
	};
	CHECK_EQ(b.len, sizeof(golden));
	CHECK(!b.failed && memcmp(b.data, golden, sizeof(golden)) == 0);
	struct proto_iter it, fi;
	struct proto_rec r, f;
	piter_init(&it, golden, sizeof(golden));
	CHECK(piter_next(&it, &r));
	CHECK_EQ(r.type, REC_EXPORT);
	piter_init(&fi, r.value, r.len);
	uint32_t ns = 0;
	uint64_t size = 0;
	CHECK(piter_next(&fi, &f) && prec_u32(&f, &ns) == 0);
	CHECK(piter_next(&fi, &f) && prec_u64(&f, &size) == 0);
	CHECK(!piter_next(&fi, &f) && fi.error == 0);
	CHECK_EQ(ns, 7);
	CHECK_EQ(size, 0x200000);
	CHECK_EQ(prec_u32(&f, &ns), PROTO_E_LENGTH); /* a u64 is not a u32 */
	/* Truncated anywhere: an error, never a read past the end. */
	for (size_t cut = 1; cut < sizeof(golden); cut++) {
		piter_init(&it, golden, cut);
		while (piter_next(&it, &r))
			;
		CHECK_EQ(it.error, PROTO_E_TRUNCATED);
	}
	pbuf_free(&b);
}

static void topology_round_trip(void)
{
	struct proto_buf b = {0};
	struct cusnap_id pid = {{1, 2, 3}}, aid = {{9, 9, 9}};
	size_t at = pbuf_begin(&b, REC_PARTICIPANT);
	pbuf_put_id(&b, F_ID, &pid);
	pbuf_put_u32(&b, F_NSPID, 42);
	pbuf_put_str(&b, F_ENDPOINT, "/ctl/cuda-vmm-42.sock");
	pbuf_put_u32(&b, 999, 5); /* a field from a newer minor version: skipped */
	pbuf_end(&b, at);
	at = pbuf_begin(&b, REC_ALLOCATION);
	pbuf_put_id(&b, F_ALLOC_ID, &aid);
	pbuf_put_u32(&b, F_ROLE, 1);
	pbuf_put_u64(&b, F_SIZE, 4 << 20);
	pbuf_put_u32(&b, F_DEVICE, 1);
	pbuf_end(&b, at);
	pbuf_put(&b, 777, "future", 6); /* a record type from the future: skipped */
	at = pbuf_begin(&b, REC_MAPPING);
	pbuf_put_id(&b, F_ALLOC_ID, &aid);
	pbuf_put_u64(&b, F_ADDRESS, 0x7f0000000000);
	uint8_t acc[12] = {1, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0};
	pbuf_put(&b, F_ACCESS, acc, sizeof(acc));
	acc[4] = 0;
	acc[8] = 1;
	pbuf_put(&b, F_ACCESS, acc, sizeof(acc));
	pbuf_end(&b, at);
	struct topo_participant p;
	CHECK_EQ(topo_decode(b.data, b.len, &p), PROTO_OK);
	CHECK(id_equal(&p.id, &pid));
	CHECK_EQ(p.nspid, 42);
	CHECK_STR(p.endpoint, "/ctl/cuda-vmm-42.sock");
	CHECK_EQ(p.nallocs, 1);
	CHECK_EQ(p.allocs[0].size, 4 << 20);
	CHECK_EQ(p.allocs[0].device, 1);
	CHECK_STR(topo_role_name(p.allocs[0].role), "creator");
	CHECK_EQ(p.nmaps, 1);
	CHECK_EQ(p.maps[0].address, 0x7f0000000000);
	CHECK_EQ(p.maps[0].naccess, 2);
	CHECK_STR(topo_access_name(p.maps[0].access[0].flags), "rw");
	CHECK_EQ(p.maps[0].access[1].loc_id, 0);
	CHECK_STR(topo_access_name(p.maps[0].access[1].flags), "r");
	topo_free(&p);
	/* A bad field length is refused with its own status. */
	uint8_t bad[] = {0x04, 0x00, 0x09, 0x00, 0x00, 0x00, 0x16, 0x00, 0x03, 0x00, 0x00, 0x00, 1, 2, 3};
	CHECK_EQ(topo_decode(bad, sizeof(bad), &p), PROTO_E_LENGTH);
	CHECK_EQ(topo_decode(b.data, b.len - 1, &p), PROTO_E_TRUNCATED);
	pbuf_free(&b);
}

static void socket_messages(void)
{
	int sv[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	int fds = test_count_fds();
	struct proto_header h = {.magic = PROTO_MAGIC, .major = PROTO_MAJOR, .op = PROTO_OP_HELLO, .payload_len = 3};
	CHECK_EQ(proto_send(sv[0], &h, "abc", -1, proto_deadline(1000)), PROTO_OK);
	struct proto_header got;
	uint8_t *payload;
	int fd;
	CHECK_EQ(proto_recv(sv[1], &got, &payload, &fd, proto_deadline(1000)), PROTO_OK);
	CHECK(payload && memcmp(payload, "abc", 3) == 0);
	CHECK_EQ(fd, -1);
	free(payload);
	/* A descriptor where none is expected: refused and closed. */
	CHECK_EQ(proto_send(sv[0], &h, "abc", 1, proto_deadline(1000)), PROTO_OK);
	CHECK_EQ(proto_recv(sv[1], &got, &payload, NULL, proto_deadline(1000)), PROTO_E_FD);
	CHECK(payload == NULL);
	CHECK_EQ(test_count_fds(), fds);
	/* A descriptor where one is expected. */
	CHECK_EQ(proto_send(sv[0], &h, "abc", 1, proto_deadline(1000)), PROTO_OK);
	CHECK_EQ(proto_recv(sv[1], &got, &payload, &fd, proto_deadline(1000)), PROTO_OK);
	CHECK(fd >= 0);
	close(fd);
	free(payload);
	/* Silence: the deadline. Half a message then close: truncated. */
	CHECK_EQ(proto_recv(sv[1], &got, &payload, NULL, proto_deadline(50)), PROTO_E_TIMEOUT);
	CHECK_EQ(write(sv[0], "CSVM", 4), 4);
	close(sv[0]);
	CHECK_EQ(proto_recv(sv[1], &got, &payload, NULL, proto_deadline(1000)), PROTO_E_TRUNCATED);
	close(sv[1]);
	CHECK_EQ(test_count_fds(), fds - 2);
}

/* One message with want descriptors received into fds (a failure otherwise):
 * its payload (to free). */
static uint8_t *recv_exactly(int sock, int *fds, size_t want, int ms)
{
	struct proto_header got;
	uint8_t *payload = NULL;
	size_t n = 0;
	CHECK_EQ(proto_recv_fds(sock, &got, &payload, fds, want, &n, proto_deadline(ms)), PROTO_OK);
	CHECK_EQ(n, want);
	return payload;
}

/* PROTO_MAX_FDS descriptors in one message arrive in the order sent; more
 * than the receiver takes: all closed, refused; more than a message carries:
 * not sent. */
static void many_descriptors(void)
{
	int sv[2], pipes[PROTO_MAX_FDS + 1];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	int before = test_count_fds();
	for (int i = 0; i <= PROTO_MAX_FDS; i++) /* each its own open file: its flags tell them apart */
		pipes[i] = open("/dev/null", O_RDONLY | O_CLOEXEC | (i % 2 ? O_NONBLOCK : 0));
	struct proto_header h = {.magic = PROTO_MAGIC,
				 .major = PROTO_MAJOR,
				 .op = PROTO_OP_EXPORT_MANY,
				 .payload_len = 3};
	CHECK_EQ(proto_send_fds(sv[0], &h, "abc", pipes, PROTO_MAX_FDS + 1, proto_deadline(1000)), PROTO_E_FD);
	CHECK_EQ(proto_send_fds(sv[0], &h, "abc", pipes, PROTO_MAX_FDS, proto_deadline(1000)), PROTO_OK);
	int fds[PROTO_MAX_FDS];
	uint8_t *payload = recv_exactly(sv[1], fds, PROTO_MAX_FDS, 1000);
	CHECK(payload && memcmp(payload, "abc", 3) == 0);
	free(payload);
	for (size_t i = 0; i < PROTO_MAX_FDS; i++) {
		if ((fcntl(fds[i], F_GETFL) & O_NONBLOCK) != (fcntl(pipes[i], F_GETFL) & O_NONBLOCK))
			test_fail(__FILE__, __LINE__, "descriptor %zu arrived out of order", i);
		close(fds[i]);
	}
	/* Three sent, two taken. */
	CHECK_EQ(proto_send_fds(sv[0], &h, "abc", pipes, 3, proto_deadline(1000)), PROTO_OK);
	struct proto_header got;
	size_t n = 0;
	CHECK_EQ(proto_recv_fds(sv[1], &got, &payload, fds, 2, &n, proto_deadline(1000)), PROTO_E_FD);
	CHECK_EQ(n, 0u);
	CHECK(payload == NULL);
	for (int i = 0; i <= PROTO_MAX_FDS; i++)
		close(pipes[i]);
	CHECK_EQ(test_count_fds(), before);
	close(sv[0]);
	close(sv[1]);
}

/* An unprivileged sender with more descriptors in flight than its
 * RLIMIT_NOFILE (a creator answering many importers at once) waits for the
 * receiver to take some, instead of failing with ETOOMANYREFS. */
static void descriptors_in_flight(void)
{
	if (geteuid() != 0) {
		printf("  (skipped: needs root to become another user)\n");
		return;
	}
	int sv[2];
	CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	enum { MESSAGES = 4, PER = 40, LIMIT = 64 };
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[1]);
		struct rlimit rl = {LIMIT, LIMIT};
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC), fds[PER];
		if (fd < 0 || setrlimit(RLIMIT_NOFILE, &rl) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(2);
		for (int i = 0; i < PER; i++)
			fds[i] = fd; /* each counts in flight */
		struct proto_header h = {.magic = PROTO_MAGIC, .major = PROTO_MAJOR, .op = PROTO_OP_EXPORT_MANY};
		for (int m = 0; m < MESSAGES; m++)
			if (proto_send_fds(sv[0], &h, NULL, fds, PER, proto_deadline(5000)) != PROTO_OK)
				_exit(1);
		_exit(0);
	}
	close(sv[0]);
	usleep(200000); /* the sender has filled what it may */
	for (int m = 0; m < MESSAGES; m++) {
		int fds[PER];
		free(recv_exactly(sv[1], fds, PER, 5000));
		for (size_t i = 0; i < PER; i++)
			close(fds[i]);
	}
	int status = 0;
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(sv[1]);
}

/* A peer that answers one request, then, once the client has hung up, takes
 * a while to close its end. */
struct slow_closer {
	int listen_fd;
	atomic_bool closed;
};

static void *slow_close(void *arg)
{
	struct slow_closer *c = arg;
	int s = accept(c->listen_fd, NULL, NULL);
	struct proto_header h;
	uint8_t *payload = NULL, byte;
	if (s >= 0 && proto_recv(s, &h, &payload, NULL, proto_deadline(5000)) == PROTO_OK) {
		h.payload_len = 0;
		proto_send(s, &h, NULL, -1, proto_deadline(5000));
		while (read(s, &byte, 1) > 0) /* until the client's end is shut */
			;
		usleep(200000);
		atomic_store(&c->closed, true);
	}
	free(payload);
	if (s >= 0)
		close(s);
	return NULL;
}

/* coord_request returns only once the endpoint has closed its end of the
 * connection: CRIU, dumping the tree right after, never finds half of one. */
static void request_waits_for_close(void)
{
	char dir[] = "/tmp/cusnap-close-XXXXXX", path[64];
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/ep", dir);
	struct slow_closer c = {.listen_fd = usock_listen(path, 1)};
	CHECK(c.listen_fd >= 0);
	pthread_t th;
	pthread_create(&th, NULL, slow_close, &c);
	struct proto_header reply;
	uint8_t *payload = NULL;
	char err[256];
	CHECK_EQ(coord_request(path, PROTO_OP_HELLO, NULL, 0, 5000, &reply, &payload, err, sizeof(err)), PROTO_OK);
	CHECK(atomic_load(&c.closed));
	free(payload);
	pthread_join(th, NULL);
	close(c.listen_fd);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	test_run("header golden vector", header_golden);
	test_run("a request returns once the endpoint closed its end", request_waits_for_close);
	test_run("header refusals: magic, version, length", header_refusals);
	test_run("records golden vector and truncation", records_golden);
	test_run("topology round trip, unknown records and fields skipped", topology_round_trip);
	test_run("messages on a socket: descriptors, deadline, truncation", socket_messages);
	test_run("253 descriptors in one message, in order; more refused", many_descriptors);
	test_run("more descriptors in flight than the sender's RLIMIT_NOFILE: it waits", descriptors_in_flight);
	return test_done();
}
