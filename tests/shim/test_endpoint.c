/* SPDX-License-Identifier: MIT */
/* The endpoint: permissions, credentials, deadlines, concurrent clients, bad
 * input, and no descriptor leaks. Runs with SNAPSHOT_CUDA_VMM_DEADLINE_MS=1500. */
#include <poll.h>
#include <sys/prctl.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cusnap/proto.h"
#include "cusnap/request.h"
#include "cusnap/usock.h"
#include "shim_util.h"

static char endpoint[PATH_MAX + 64];
static CUmemGenericAllocationHandle alloc;

static int connect_self(void)
{
	int s = usock_connect(endpoint);
	CHECK(s >= 0);
	return s;
}

/* Send raw bytes; return the reply's status, or 1 when the endpoint closed
 * without replying. */
static int exchange_raw(const void *bytes, size_t len, int pass_fd)
{
	int s = connect_self();
	if (s < 0)
		return 2;
	struct iovec iov = {(void *)bytes, len};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	if (pass_fd >= 0) {
		memset(&u, 0, sizeof(u));
		msg.msg_control = u.buf;
		msg.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	CHECK_EQ(sendmsg(s, &msg, MSG_NOSIGNAL), (ssize_t)len);
	shutdown(s, SHUT_WR);
	struct proto_header h;
	uint8_t *payload = NULL;
	int rc = proto_recv(s, &h, &payload, NULL, proto_deadline(5000));
	free(payload);
	close(s);
	return rc == PROTO_OK ? h.status : 1;
}

static int request(uint16_t op, uint16_t major, uint32_t payload_len, const void *payload, size_t sent)
{
	uint8_t buf[PROTO_HEADER_LEN + 256];
	struct proto_header h = {.magic = PROTO_MAGIC, .major = major, .op = op, .payload_len = payload_len};
	proto_header_pack(&h, buf);
	if (sent)
		memcpy(buf + PROTO_HEADER_LEN, payload, sent);
	return exchange_raw(buf, PROTO_HEADER_LEN + sent, -1);
}

static void permissions(void)
{
	struct stat st;
	CHECK_EQ(stat(endpoint, &st), 0);
	CHECK(S_ISSOCK(st.st_mode));
	CHECK_EQ(st.st_mode & 0777, 0600);
}

static void other_user_gets_nothing(void)
{
	if (geteuid() != 0) {
		printf("  (skipped: needs root to become another user)\n");
		return;
	}
	/* Let another user reach the socket file, so that only SO_PEERCRED stands in its way:
	 * through a descriptor of its directory, as the checkout may lie under a
	 * directory only root can enter (root's home is 0700). */
	CHECK_EQ(chmod(endpoint, 0666), 0);
	CHECK_EQ(chmod(shim_ctl, 0755), 0);
	int dfd = open(shim_ctl, O_RDONLY | O_DIRECTORY);
	CHECK(dfd >= 0);
	pid_t pid = fork();
	if (pid == 0) {
		if (setgid(65534) != 0 || setuid(65534) != 0)
			_exit(3);
		prctl(PR_SET_DUMPABLE, 1); /* its own /proc/self/fd again */
		char via[PATH_MAX];
		snprintf(via, sizeof(via), "/proc/self/fd/%d/%s", dfd, strrchr(endpoint, '/') + 1);
		int s = usock_connect(via);
		if (s < 0)
			_exit(4);
		struct proto_header h = {.magic = PROTO_MAGIC, .major = PROTO_MAJOR, .op = PROTO_OP_HELLO};
		proto_send(s, &h, NULL, -1, proto_deadline(2000));
		uint8_t *payload = NULL;
		int rc = proto_recv(s, &h, &payload, NULL, proto_deadline(5000));
		_exit(rc == PROTO_OK ? 1 : 0); /* any reply is a failure */
	}
	close(dfd);
	int status = test_wait_child(pid, 10000);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 0);
	chmod(endpoint, 0600);
	chmod(shim_ctl, 0700);
}

static void silent_client_does_not_delay_export(void)
{
	int silent = connect_self(); /* connects and says nothing */
	int cap = -1;
	CHECK_CU(cuMemExportToShareableHandle(&cap, alloc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CUmemGenericAllocationHandle imp;
	/* Redeeming goes through the same endpoint while the silent client is connected. */
	CHECK_CU(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)cap, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	struct pollfd p = {.fd = silent, .events = POLLIN};
	CHECK_EQ(poll(&p, 1, 0), 0); /* served before the silent client's deadline ended */
	/* And the silent client is cut off at its deadline. */
	CHECK_EQ(poll(&p, 1, 10000), 1);
	char c;
	CHECK_EQ(read(silent, &c, 1), 0);
	close(silent);
	close(cap);
	CHECK_CU(cuMemRelease(imp));
}

struct redeem {
	int cap;
	CUresult rc;
	CUmemGenericAllocationHandle imp;
};

static void *redeem_thread(void *arg)
{
	struct redeem *r = arg;
	r->rc = emu_use_device(0);
	if (r->rc == CUDA_SUCCESS)
		r->rc = cuMemImportFromShareableHandle(&r->imp, (void *)(intptr_t)r->cap,
						       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	return NULL;
}

/* The application releases its last handle while an EXPORT of that allocation is
 * in the driver: the release waits for the export, so the redeemer gets the
 * allocation it asked for, never a released (or reused) driver handle. */
static void release_racing_export(void)
{
	CUmemAllocationProp p = emu_prop(0);
	CUmemGenericAllocationHandle h, other;
	CHECK_CU(cuMemCreate(&h, 4 * MiB, &p, 0));
	struct redeem r = {.cap = -1};
	CHECK_CU(cuMemExportToShareableHandle(&r.cap, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	setenv("CUEMU_EXPORT_STALL_MS", "300", 1);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, redeem_thread, &r), 0);
	usleep(100000); /* the EXPORT is in the driver now */
	CHECK_CU(cuMemRelease(h));
	CHECK_CU(cuMemCreate(&other, 2 * MiB, &p, 0)); /* the driver may hand the value out again */
	pthread_join(t, NULL);
	unsetenv("CUEMU_EXPORT_STALL_MS");
	CHECK_CU(r.rc);
	if (r.rc == CUDA_SUCCESS) {
		CUdeviceptr va;
		size_t size = 0;
		CHECK_CU(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
		CHECK_CU(cuMemMap(va, 4 * MiB, 0, r.imp, 0));
		CHECK_CU(cuMemGetAddressRange(NULL, &size, va));
		CHECK_EQ(size, 4 * MiB); /* the allocation redeemed, not the new one */
		CHECK_CU(cuMemUnmap(va, 4 * MiB));
		CHECK_CU(cuMemAddressFree(va, 4 * MiB));
		CHECK_CU(cuMemRelease(r.imp));
	}
	close(r.cap);
	CHECK_CU(cuMemRelease(other));
}

/* A process imports its own capability (the export table answers it without
 * the endpoint) and releases the import: the creator's export is untouched,
 * and the capability redeems again. */
static void own_capability(void)
{
	int cap = -1;
	CHECK_CU(cuMemExportToShareableHandle(&cap, alloc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	for (int i = 0; i < 3; i++) {
		CUmemGenericAllocationHandle imp;
		CHECK_CU(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)cap,
							CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
		CHECK_CU(cuMemRelease(imp));
	}
	close(cap);
}

/* A capability's allocation id and token (capability.c's layout: id at 24, token at 40). */
static void cap_fields(int cap, struct cusnap_id *id, struct cusnap_id *token)
{
	uint8_t buf[56];
	CHECK_EQ(pread(cap, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	memcpy(id->b, buf + 24, ID_LEN);
	memcpy(token->b, buf + 40, ID_LEN);
}

/* Send an EXPORT_MANY of n (id, token) pairs; the reply's status and up to
 * max FDs in fds (*nfds). */
static int export_many_request(const struct cusnap_id *id, const struct cusnap_id *token, size_t n, int *fds,
			       size_t max, size_t *nfds)
{
	struct proto_buf b = {0};
	for (size_t i = 0; i < n; i++)
		req_export_encode(&b, &(struct req_export){.alloc = id[i], .token = token[i]});
	int s = connect_self();
	struct proto_header h = {.magic = PROTO_MAGIC,
				 .major = PROTO_MAJOR,
				 .op = PROTO_OP_EXPORT_MANY,
				 .payload_len = (uint32_t)b.len};
	CHECK_EQ(proto_send(s, &h, b.data, -1, proto_deadline(5000)), PROTO_OK);
	pbuf_free(&b);
	uint8_t *payload = NULL;
	int rc = proto_recv_fds(s, &h, &payload, fds, max, nfds, proto_deadline(5000));
	free(payload);
	close(s);
	return rc == PROTO_OK ? h.status : rc;
}

/* Does the allocation a raw driver FD names map whole at size bytes? (A
 * smaller one does not; with the sizes all different, FDs out of order put a
 * smaller one where a larger is expected.) */
static bool maps_at(int fd, size_t size)
{
	CUmemGenericAllocationHandle imp;
	CUdeviceptr va;
	CHECK_CU(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CHECK_CU(cuMemAddressReserve(&va, size, 0, 0, 0));
	bool ok = cuMemMap(va, size, 0, imp, 0) == CUDA_SUCCESS;
	if (ok)
		CHECK_CU(cuMemUnmap(va, size));
	CHECK_CU(cuMemAddressFree(va, size));
	CHECK_CU(cuMemRelease(imp));
	return ok;
}

/* EXPORT_MANY: one FD per allocation in the request's order; all or nothing
 * (a bad token among them: refused, no FD); none, or more than an SCM_RIGHTS
 * message carries: refused. */
static void export_many(void)
{
	enum { N = 3 };
	CUmemGenericAllocationHandle h[N];
	struct cusnap_id id[PROTO_MAX_FDS + 1], token[PROTO_MAX_FDS + 1];
	CUmemAllocationProp p = emu_prop(0);
	for (size_t i = 0; i < N; i++) {
		int cap = -1;
		CHECK_CU(cuMemCreate(&h[i], (N - i) * 2 * MiB, &p, 0));
		CHECK_CU(cuMemExportToShareableHandle(&cap, h[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		cap_fields(cap, &id[i], &token[i]);
		close(cap);
	}
	int fds[PROTO_MAX_FDS];
	size_t n = 0;
	CHECK_EQ(export_many_request(id, token, N, fds, N, &n), PROTO_OK);
	CHECK_EQ(n, (size_t)N);
	for (size_t i = 0; i < n; i++) {
		if (!maps_at(fds[i], (N - i) * 2 * MiB))
			test_fail(__FILE__, __LINE__, "FD %zu does not name the allocation of %zu bytes", i,
				  (N - i) * 2 * MiB);
		close(fds[i]);
	}
	struct cusnap_id good = token[1];
	token[1].b[0] ^= 1;
	CHECK_EQ(export_many_request(id, token, N, fds, N, &n), PROTO_E_AUTH);
	CHECK_EQ(n, 0u);
	token[1] = good;
	CHECK_EQ(export_many_request(id, token, 0, fds, N, &n), PROTO_E_MALFORMED);
	for (size_t i = N; i <= PROTO_MAX_FDS; i++) {
		id[i] = id[i % N];
		token[i] = token[i % N];
	}
	CHECK_EQ(export_many_request(id, token, PROTO_MAX_FDS + 1, fds, PROTO_MAX_FDS, &n), PROTO_E_LENGTH);
	CHECK_EQ(n, 0u);
	for (size_t i = 0; i < N; i++)
		CHECK_CU(cuMemRelease(h[i]));
}

/* INSPECT's F_GENERATION (0 when not said). */
static uint64_t inspected_generation(void)
{
	uint8_t buf[PROTO_HEADER_LEN];
	struct proto_header h = {.magic = PROTO_MAGIC, .major = PROTO_MAJOR, .op = PROTO_OP_INSPECT};
	proto_header_pack(&h, buf);
	int s = connect_self();
	if (s < 0)
		return 0;
	CHECK_EQ(send(s, buf, sizeof(buf), MSG_NOSIGNAL), (ssize_t)sizeof(buf));
	uint8_t *payload = NULL;
	uint64_t g = 0;
	if (proto_recv(s, &h, &payload, NULL, proto_deadline(5000)) == PROTO_OK && h.status == PROTO_OK) {
		struct proto_field_iter it;
		struct proto_rec f;
		pfield_init(&it, payload, h.payload_len, REC_PARTICIPANT);
		while (pfield_next(&it, &f))
			if (f.type == F_GENERATION)
				CHECK_EQ(prec_u64(&f, &g), 0);
	}
	free(payload);
	close(s);
	return g;
}

/* The count the coordinator compares to skip a second INSPECT after QUIESCE:
 * every tracked change moves it, nothing else does. */
static void generation_counts_changes(void)
{
	uint64_t g0 = inspected_generation();
	CHECK(g0 > 0);
	CHECK_EQ(inspected_generation(), g0); /* (an INSPECT is no change) */
	CUmemAllocationProp p = emu_prop(0);
	CUmemGenericAllocationHandle h;
	CHECK_CU(cuMemCreate(&h, 2 * MiB, &p, 0));
	uint64_t g1 = inspected_generation();
	CHECK(g1 > g0);
	CUdeviceptr va = 0;
	CHECK_CU(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
	CHECK_CU(cuMemMap(va, 2 * MiB, 0, h, 0));
	CUmemAccessDesc rw = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
			      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CHECK_CU(cuMemSetAccess(va, 2 * MiB, &rw, 1));
	uint64_t g2 = inspected_generation();
	CHECK(g2 > g1);
	CHECK_CU(cuMemsetD8(va, 7, 2 * MiB)); /* (bytes are not topology) */
	CHECK_EQ(inspected_generation(), g2);
	CHECK_CU(cuMemUnmap(va, 2 * MiB));
	CHECK_CU(cuMemRelease(h));
	CHECK_CU(cuMemAddressFree(va, 2 * MiB));
	CHECK(inspected_generation() > g2);
}

static void bad_input(void)
{
	uint8_t garbage[100];
	for (size_t i = 0; i < sizeof(garbage); i++)
		garbage[i] = (uint8_t)(i * 37 + 11);
	CHECK_EQ(exchange_raw(garbage, sizeof(garbage), -1), PROTO_E_MAGIC);
	CHECK_EQ(request(999, PROTO_MAJOR, 0, NULL, 0), PROTO_E_OP);
	CHECK_EQ(request(PROTO_OP_HELLO, PROTO_MAJOR + 1, 0, NULL, 0), PROTO_E_VERSION);
	CHECK_EQ(request(PROTO_OP_HELLO, PROTO_MAJOR, PROTO_MAX_PAYLOAD + 1, NULL, 0), PROTO_E_LENGTH);
	CHECK_EQ(request(PROTO_OP_INSPECT, PROTO_MAJOR, 200, "abc", 3), 1); /* truncated: closed */
	CHECK_EQ(exchange_raw("CSV", 3, -1), 1);                            /* truncated header: closed */
	/* A descriptor nobody asked for. */
	uint8_t hello[PROTO_HEADER_LEN];
	struct proto_header h = {.magic = PROTO_MAGIC, .major = PROTO_MAJOR, .op = PROTO_OP_HELLO};
	proto_header_pack(&h, hello);
	CHECK_EQ(exchange_raw(hello, sizeof(hello), 0), PROTO_E_FD);
	/* EXPORT: malformed, unknown allocation, wrong token. */
	CHECK_EQ(request(PROTO_OP_EXPORT, PROTO_MAJOR, 6, "\x06\x00\x00\x00\x00\x00", 6), PROTO_E_MALFORMED);
	struct proto_buf b = {0};
	req_export_encode(&b, &(struct req_export){.alloc = {{1}}, .token = {{2}}});
	CHECK_EQ(request(PROTO_OP_EXPORT, PROTO_MAJOR, (uint32_t)b.len, b.data, b.len), PROTO_E_NOT_FOUND);
	struct topo_participant t;
	if (shim_inspect(0, &t) == 0) {
		/* The real allocation id with a made-up token. */
		memcpy(b.data + PROTO_REC_HEADER_LEN + PROTO_REC_HEADER_LEN, t.allocs[0].id.b, ID_LEN);
		CHECK_EQ(request(PROTO_OP_EXPORT, PROTO_MAJOR, (uint32_t)b.len, b.data, b.len), PROTO_E_AUTH);
		topo_free(&t);
	}
	pbuf_free(&b);
	/* Still serving. */
	CHECK_EQ(request(PROTO_OP_HELLO, PROTO_MAJOR, 0, NULL, 0), PROTO_OK);
}

int main(int argc, char **argv)
{
	setenv("SNAPSHOT_CUDA_VMM_DEADLINE_MS", "1500", 0);
	shim_reexec(argc, argv);
	int fds = test_count_fds();
	snprintf(endpoint, sizeof(endpoint), "%s/cuda-vmm-%d.sock", shim_ctl, getpid());
	struct stat st;
	CHECK(stat(endpoint, &st) < 0);
	CHECK_CU(emu_use_device(0)); /* cuInit starts the endpoint (DESIGN.md §4.3) */
	CHECK(stat(endpoint, &st) == 0 && S_ISSOCK(st.st_mode));
	CUmemAllocationProp p = emu_prop(0);
	CHECK_CU(cuMemCreate(&alloc, 2 * MiB, &p, 0));
	/* Exported once, so that cuemu backs it with its memfd now (it does so lazily). */
	int cap = -1;
	CHECK_CU(cuMemExportToShareableHandle(&cap, alloc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	close(cap);
	int fds_with_endpoint = test_count_fds();
	test_run("socket mode 0600", permissions);
	test_run("a client of another uid gets no answer", other_user_gets_nothing);
	test_run("a silent client does not delay an EXPORT; its deadline closes it",
		 silent_client_does_not_delay_export);
	test_run("garbage, truncation, versions, unknown ops, stray FDs, bad tokens", bad_input);
	test_run("its own capability, imported and released, redeems again", own_capability);
	test_run("EXPORT_MANY: FDs in order, all or nothing, at most 253", export_many);
	test_run("a release racing an EXPORT waits for it: the redeemer gets what it asked for", release_racing_export);
	test_run("INSPECT's generation moves with every tracked change and with nothing else",
		 generation_counts_changes);
	CHECK_EQ(shim_fds_settle(fds_with_endpoint), fds_with_endpoint);
	CHECK_CU(cuMemRelease(alloc));
	/* Only the allocation's memfd and the capability the shim kept for it went. */
	CHECK_EQ(test_count_fds(), fds_with_endpoint - 2);
	/* those two, the shim endpoint and the emulator's checkpoint socket */
	CHECK_EQ(fds_with_endpoint - fds, 4);
	return shim_done();
}
