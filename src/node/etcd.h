/* SPDX-License-Identifier: MIT */
/* A small etcd v3 client over etcd's JSON gateway (POST /v3/..., keys and
 * values base64), with libcurl: what the group of a multi-node worker needs
 * (leases, put, range over a prefix, create-if-absent, delete). One handle per
 * thread. */
#ifndef CUSNAP_NODE_ETCD_H
#define CUSNAP_NODE_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETCD_MAX_URLS 8

/* How cusnap proves itself to etcd, and checks etcd (etcdctl's --cacert,
 * --cert, --key, --user): NULL fields are not used. */
struct etcd_auth {
	const char *cacert;        /* the CA that signed etcd's certificate (https) */
	const char *cert, *key;    /* a client certificate and its key (etcd's --client-cert-auth) */
	const char *user;          /* etcd's authentication: the user */
	const char *password_file; /* and a file holding the password (never on a command line) */
};

struct etcd {
	char urls[ETCD_MAX_URLS][256]; /* http://HOST:PORT, no trailing slash */
	size_t nurls, cur;             /* the endpoint that answered last is tried first */
	int timeout_ms;                /* per request */
	void *curl;
	char cacert[4096], cert[4096], key[4096];
	char user[256], password[256]; /* (read from the password file once) */
	char token[1024];              /* etcd's token for user: sent with every request, renewed when refused */
};

/* One key, its value and its revisions. */
struct etcd_kv {
	char *key, *value; /* NUL-terminated (value: its bytes, then a NUL) */
	size_t value_len;
	int64_t create_revision, mod_revision, lease;
};

/* Load libcurl and set it up, once per process (etcd_init does it too; call it
 * before starting threads that use etcd). 0, or -1 with why. */
int etcd_global_init(char *why, size_t len);
/* urls: "http://HOST:PORT[,https://...]"; auth (NULL: none) as above, its
 * password file checked (owned by the caller or root, readable by no one else)
 * and read. 0, or -1 with why (a malformed list, a file refused). */
int etcd_init(struct etcd *e, const char *urls, const struct etcd_auth *auth, int timeout_ms, char *why, size_t len);
void etcd_free(struct etcd *e);
/* Can an endpoint be reached (it answers a read)? 0, or -1 with why. */
int etcd_ping(struct etcd *e, char *why, size_t len);

/* A lease of ttl seconds into *id. 0, or -1 with why. */
int etcd_lease_grant(struct etcd *e, int ttl, int64_t *id, char *why, size_t len);
/* Renew it: 0, 1 when it is gone (expired or revoked), -1 with why (etcd
 * not reached). */
int etcd_lease_keepalive(struct etcd *e, int64_t id, char *why, size_t len);
int etcd_lease_revoke(struct etcd *e, int64_t id, char *why, size_t len);

/* key = value under lease (0: none). 0, or -1 with why. */
int etcd_put(struct etcd *e, const char *key, const char *value, int64_t lease, char *why, size_t len);
/* key = value under lease only when key does not exist: 1 made, 0 it exists,
 * -1 with why. */
int etcd_create(struct etcd *e, const char *key, const char *value, int64_t lease, char *why, size_t len);
/* Every key that starts with prefix, in key order, into *kvs (*n of them;
 * etcd_kvs_free). 0, or -1 with why. */
int etcd_range(struct etcd *e, const char *prefix, struct etcd_kv **kvs, size_t *n, char *why, size_t len);
/* The value of key into *kv: 1, 0 when there is none, -1 with why. */
int etcd_get(struct etcd *e, const char *key, struct etcd_kv *kv, char *why, size_t len);
int etcd_delete(struct etcd *e, const char *key, char *why, size_t len);
void etcd_kvs_free(struct etcd_kv *kvs, size_t n);

/* What to do about why (an error of these calls): "" or advice to append;
 * only an etcd that cannot be reached is one to start. */
const char *etcd_advice(const char *why);
/* The requests this process has sent etcd so far (lease keep-alives included). */
unsigned long etcd_requests(void);

/* ---- etcd_wire.c: the gateway's bodies and replies ---- */
typedef struct json_t json_t;
/* Request bodies (NULL: out of memory): {key}; {key, range_end} for every key
 * under prefix; a put, under lease when not 0; a put only if key is absent (a
 * txn); a lease granted for ttl seconds; a lease named; a user's password. */
json_t *etcd_body_key(const char *key);
json_t *etcd_body_range(const char *prefix);
json_t *etcd_body_put(const char *key, const char *value, int64_t lease);
json_t *etcd_body_create(const char *key, const char *value, int64_t lease);
json_t *etcd_body_grant(int ttl);
json_t *etcd_body_lease(int64_t id);
json_t *etcd_body_auth(const char *user, const char *password);
/* One of etcd's replies, decoded once: what the calls here read of any of
 * them (each fills its own fields; absent ones are 0, "" or NULL). */
struct etcd_reply {
	char error[512];     /* etcd's error, "" when none */
	bool failed;         /* an error, or a gRPC code without one */
	char token[1024];    /* auth/authenticate: the token ("" none, or too long) */
	int64_t id;          /* lease/grant: the lease */
	int64_t ttl;         /* lease/keepalive: result.TTL (0: the lease is gone) */
	bool succeeded;      /* kv/txn: its compare held */
	struct etcd_kv *kvs; /* kv/range: each key and value decoded (etcd_reply_free) */
	size_t nkvs;
	bool bad_kv; /* a key or value that is not base64: no kvs kept */
};
/* text (a reply's JSON) into r: 0, or -1 when it is not a JSON object (or
 * out of memory). r is freed with etcd_reply_free whatever is returned. */
int etcd_reply_decode(const char *text, struct etcd_reply *r);
void etcd_reply_free(struct etcd_reply *r);
/* An int64 of a reply, which etcd gives as a string (or a number); def when absent. */
int64_t etcd_int64(const json_t *o, const char *key, int64_t def);
/* One of a range reply's kvs into kv (its key and value decoded, NUL-ended;
 * etcd_kvs_free): 0, or -1 when either is not base64. */
int etcd_kv_of(const json_t *j, struct etcd_kv *kv);
/* Base64 (RFC 4648, with padding), as etcd's JSON gateway carries bytes:
 * the text into out (4 * ceil(n / 3) + 1 bytes). */
void etcd_b64_encode(const void *data, size_t n, char *out);
/* Decoded into out (at most 3 * strlen(text) / 4 bytes): its length, or -1
 * for text that is not base64. */
long etcd_b64_decode(const char *text, unsigned char *out);

#endif
