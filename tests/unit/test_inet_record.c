/* SPDX-License-Identifier: MIT */
/* The record of a checkpoint's sockets (src/node/inet_record.c, DESIGN.md
 * §9.4): golden bytes, decoded once into the struct its readers take (the
 * sockets, the TIME_WAIT entries, the lock the dump left), the connections
 * the lock holds, and every malformed record refused. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/node/node.h"
#include "../harness/test.h"
#include "cusnap/json.h"

static struct inet_sock sock(int proto, int state, const char *local, unsigned lport, const char *remote,
			     unsigned rport)
{
	struct inet_sock s = {.family = AF_INET, .proto = proto, .state = state, .lport = lport, .rport = rport};
	inet_pton(AF_INET, local, s.local);
	inet_pton(AF_INET, remote, s.remote);
	s.pid = 4242;
	s.uid = 1000;
	s.netns = 4026531840ul;
	s.netns_here = true;
	return s;
}

#define SOCK(state, remote)                                                                                            \
	"{\"pid\":4242,\"protocol\":\"tcp\",\"local\":\"127.0.0.1:8080\",\"remote\":\"" remote "\",\"state\":\"" state \
	"\",\"netns_here\":true,\"netns\":4026531840,\"reuseport\":false,\"uid\":1000}"
#define GOLDEN_SOCKETS                                                                                            \
	"{\"sockets\":[" SOCK("LISTEN",                                                                           \
			      "0.0.0.0:0") "," SOCK("ESTABLISHED",                                                \
						    "127.0.0.1:40000") "],\"time_wait\":[{"                       \
								       "\"local\":\"127.0.0.1:8080\",\"remote\":" \
								       "\"127.0.0.1:39999\",\"netns\":4026531840}]"

static void golden_and_back(void)
{
	struct inet_sock socks[2] = {sock(IPPROTO_TCP, 10, "127.0.0.1", 8080, "0.0.0.0", 0),
				     sock(IPPROTO_TCP, 1, "127.0.0.1", 8080, "127.0.0.1", 40000)};
	struct inet_sock tw = sock(IPPROTO_TCP, 6, "127.0.0.1", 8080, "127.0.0.1", 39999);
	json_t *rec = inet_record(socks, 2, &tw, 1);
	char *text = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
	CHECK_STR(text, GOLDEN_SOCKETS "}");
	free(text);
	json_object_set_new(rec, "lock",
			    json_pack("{s:s, s:I, s:s}", "method", "nftables", "netns", (json_int_t)4026531840, "table",
				      "inet CRIU-4242"));
	struct inet_rec r;
	char why[256];
	CHECK_EQ(inet_record_decode(rec, &r, why, sizeof(why)), 0);
	CHECK(r.n == 2 && r.ntw == 1);
	CHECK(r.n == 2 && r.socks[0].state == 10 && r.socks[1].state == 1 && r.socks[1].rport == 40000 &&
	      r.socks[1].pid == 4242 && r.socks[1].uid == 1000 && r.socks[1].netns_here);
	CHECK(r.ntw == 1 && r.tw[0].lport == 8080 && r.tw[0].rport == 39999 && r.tw[0].netns == 4026531840ul);
	CHECK_STR(r.lock_method, "nftables");
	CHECK_STR(r.lock_table, "inet CRIU-4242");
	CHECK(r.lock_netns == 4026531840ul);
	/* What the lock holds: the connection, not the listener. */
	struct inet_sock *conns;
	ssize_t n = inet_record_locked(&r, &conns);
	CHECK_EQ(n, 1);
	CHECK(n == 1 && conns[0].rport == 40000);
	free(conns);
	inet_record_free(&r);
	json_decref(rec);
	/* No lock recorded: method "". */
	json_t *bare = json_loads(GOLDEN_SOCKETS "}", 0, NULL);
	CHECK_EQ(inet_record_decode(bare, &r, why, sizeof(why)), 0);
	CHECK_STR(r.lock_method, "");
	inet_record_free(&r);
	json_decref(bare);
}

static void refused(void)
{
	static const char *const bad[] = {
		"[]",
		"{\"sockets\":{}}",
		"{\"sockets\":[{\"protocol\":\"sctp\",\"state\":\"LISTEN\",\"local\":\"127.0.0.1:1\",\"remote\":\"0.0."
		"0.0:0\"}]}",
		"{\"sockets\":[{\"protocol\":\"tcp\",\"state\":\"DANCING\",\"local\":\"127.0.0.1:1\",\"remote\":\"0.0."
		"0.0:0\"}]}",
		"{\"sockets\":[{\"protocol\":\"tcp\",\"state\":\"LISTEN\",\"local\":\"127.0.0.1\",\"remote\":\"0.0.0.0:"
		"0\"}]}",
		"{\"sockets\":[],\"time_wait\":[{\"local\":\"127.0.0.1:1\"}]}",
		"{\"sockets\":[],\"lock\":{\"method\":\"nftables\"}}",
		"{\"sockets\":[],\"lock\":{\"netns\":5}}",
		"{\"sockets\":[],\"lock\":{\"method\":\"a-method-name-too-long-to-be-one\",\"netns\":5}}",
		"{\"sockets\":[],\"lock\":[1]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *j = json_loads(bad[i], 0, NULL);
		struct inet_rec r;
		char why[256] = "";
		CHECK(j != NULL);
		if (inet_record_decode(j, &r, why, sizeof(why)) != -EINVAL)
			test_fail(__FILE__, __LINE__, "accepted: %s", bad[i]);
		else
			CHECK(r.socks == NULL && r.tw == NULL && strstr(why, "malformed") != NULL);
		json_decref(j);
	}
}

int main(void)
{
	test_run("the sockets' record: golden bytes, decoded once, what the lock holds", golden_and_back);
	test_run("a malformed record refused, nothing kept", refused);
	return test_done();
}
