/* SPDX-License-Identifier: MIT */
/* etcd v3 through its JSON gateway (etcd.h). Every call is one POST of a JSON
 * body; int64 values come back as strings, keys and values as base64. An
 * endpoint that cannot be reached passes the call to the next one. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cusnap/json.h"
#include "etcd.h"

/* Every request this process sent (etcd_requests: the barrier's benchmark). */
static atomic_ulong requests;

unsigned long etcd_requests(void)
{
	return atomic_load(&requests);
}

/* ---- requests ---- */

/* libcurl, loaded when a group first needs it: every other run of the tool
 * starts without it and the thirty TLS and protocol libraries it brings. */
static struct {
	CURLcode (*global_init)(long);
	CURL *(*easy_init)(void);
	void (*easy_cleanup)(CURL *);
	void (*easy_reset)(CURL *);
	CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*easy_perform)(CURL *);
	CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
	const char *(*easy_strerror)(CURLcode);
	struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
	void (*slist_free_all)(struct curl_slist *);
} curl;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static char curl_error[512];

static void curl_load(void)
{
	void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(curl_error, sizeof(curl_error), "groups need libcurl (Debian: libcurl4): %s", dlerror());
		return;
	}
	const char *missing = NULL;
#define SYM(field)                                                \
	do {                                                      \
		*(void **)&curl.field = dlsym(h, "curl_" #field); \
		if (!curl.field && !missing)                      \
			missing = "curl_" #field;                 \
	} while (0)
	SYM(global_init);
	SYM(easy_init);
	SYM(easy_cleanup);
	SYM(easy_reset);
	SYM(easy_setopt);
	SYM(easy_perform);
	SYM(easy_getinfo);
	SYM(easy_strerror);
	SYM(slist_append);
	SYM(slist_free_all);
#undef SYM
	if (missing)
		snprintf(curl_error, sizeof(curl_error), "libcurl.so.4 has no %s", missing);
	else if (curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		snprintf(curl_error, sizeof(curl_error), "libcurl could not be initialised");
}

int etcd_global_init(char *why, size_t len)
{
	pthread_once(&curl_once, curl_load);
	if (!curl_error[0])
		return 0;
	snprintf(why, len, "%s", curl_error);
	return -1;
}

/* The password in file path (its first line): 0, or -1 with why. A secret:
 * the file must be a regular file owned by the caller or root that no one
 * else can read or write, as ssh wants of a private key. */
static int password_read(const char *path, char *out, size_t len, char *why, size_t wlen)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(why, wlen, "--etcd-password-file %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	int rc = -1;
	if (!S_ISREG(st.st_mode) || (st.st_uid != 0 && st.st_uid != geteuid()) || (st.st_mode & 077)) {
		snprintf(why, wlen,
			 "--etcd-password-file %s must be a regular file owned by you or root that no one else can "
			 "read or write (chmod 600)",
			 path);
	} else {
		ssize_t n = read(fd, out, len - 1);
		if (n < 0) {
			snprintf(why, wlen, "--etcd-password-file %s: %s", path, strerror(errno));
		} else {
			out[n] = '\0';
			out[strcspn(out, "\r\n")] = '\0';
			rc = 0;
		}
	}
	close(fd);
	return rc;
}

static int copy_opt(char *dst, size_t n, const char *src, const char *name, char *why, size_t len)
{
	if (!src || !*src)
		return 0;
	if (strlen(src) >= n || access(src, R_OK) != 0) {
		snprintf(why, len, "%s %s: %s", name, src, strlen(src) >= n ? "too long" : strerror(errno));
		return -1;
	}
	snprintf(dst, n, "%s", src);
	return 0;
}

int etcd_init(struct etcd *e, const char *urls, const struct etcd_auth *auth, int timeout_ms, char *why, size_t len)
{
	memset(e, 0, sizeof(*e));
	e->timeout_ms = timeout_ms;
	if (auth && (copy_opt(e->cacert, sizeof(e->cacert), auth->cacert, "--etcd-cacert", why, len) < 0 ||
		     copy_opt(e->cert, sizeof(e->cert), auth->cert, "--etcd-cert", why, len) < 0 ||
		     copy_opt(e->key, sizeof(e->key), auth->key, "--etcd-key", why, len) < 0))
		return -1;
	if (auth && auth->user && *auth->user) {
		if (!auth->password_file || !*auth->password_file) {
			snprintf(why, len, "--etcd-user %s needs --etcd-password-file FILE", auth->user);
			return -1;
		}
		snprintf(e->user, sizeof(e->user), "%s", auth->user);
		if (password_read(auth->password_file, e->password, sizeof(e->password), why, len) < 0)
			return -1;
	}
	const char *p = urls;
	while (p && *p) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		while (n && p[n - 1] == '/')
			n--;
		if (e->nurls == ETCD_MAX_URLS || n == 0 || n >= sizeof(e->urls[0]) ||
		    (strncmp(p, "http://", 7) != 0 && strncmp(p, "https://", 8) != 0)) {
			snprintf(why, len,
				 "--etcd %s: a comma-separated list of at most %d http://HOST:PORT or "
				 "https://HOST:PORT "
				 "URLs",
				 urls, ETCD_MAX_URLS);
			return -1;
		}
		memcpy(e->urls[e->nurls++], p, n);
		p = comma ? comma + 1 : NULL;
	}
	if (!e->nurls) {
		snprintf(why, len, "--etcd: no URL");
		return -1;
	}
	if (etcd_global_init(why, len) < 0)
		return -1;
	e->curl = curl.easy_init();
	if (!e->curl) {
		snprintf(why, len, "libcurl could not be initialised");
		return -1;
	}
	return 0;
}

void etcd_free(struct etcd *e)
{
	if (e->curl)
		curl.easy_cleanup(e->curl);
	e->curl = NULL;
}

struct body {
	char *data;
	size_t len;
};

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
	struct body *b = arg;
	size_t add = size * n;
	if (b->len + add > (64u << 20))
		return 0; /* (no answer of ours is that large) */
	char *more = realloc(b->data, b->len + add + 1);
	if (!more)
		return 0;
	memcpy(more + b->len, p, add);
	b->data = more;
	b->len += add;
	b->data[b->len] = '\0';
	return add;
}

/* What a failed transfer means, named for whoever has to fix it. */
static const char *transfer_cause(CURLcode rc)
{
	switch (rc) {
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CONNECT_ERROR:
		return "TLS: etcd's certificate cannot be verified (--etcd-cacert names the CA that signed it)";
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER: return "TLS: the client certificate or key cannot be used (--etcd-cert, --etcd-key)";
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
		return "the connection was closed (with --client-cert-auth, etcd refuses a client without a "
		       "certificate it trusts: --etcd-cert, --etcd-key)";
	case CURLE_GOT_NOTHING:
	case CURLE_WEIRD_SERVER_REPLY:
		/* (etcd serving TLS on the port closes a plain request unanswered) */
		return "something listens there but does not answer plain HTTP (an etcd serving TLS: name it "
		       "https://, with --etcd-cacert)";
	default: return "unreachable";
	}
}

/* Is an error etcd answered a refusal of the token (expired, or none)? */
static bool token_refused(const char *error)
{
	return error && (strstr(error, "invalid auth token") || strstr(error, "user name is empty") ||
			 strstr(error, "auth: revision in header is old"));
}

static int post(struct etcd *e, const char *path, const char *text, struct etcd_reply *r, char *why, size_t len);

/* A token for e->user: 0, or -1 with why. */
static int authenticate(struct etcd *e, char *why, size_t len)
{
	json_t *body = etcd_body_auth(e->user, e->password);
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	e->token[0] = '\0';
	struct etcd_reply r;
	int rc = text ? post(e, "/v3/auth/authenticate", text, &r, why, len) : -1;
	free(text);
	if (rc == 0 && (r.error[0] || !r.token[0]))
		snprintf(why, len, "authentication as %s refused by etcd: %s (--etcd-user, --etcd-password-file)",
			 e->user, r.error[0] ? r.error : "no token");
	else if (rc == 0)
		snprintf(e->token, sizeof(e->token), "%s", r.token);
	if (rc == 0)
		etcd_reply_free(&r);
	return e->token[0] ? 0 : -1;
}

/* POST body to path at each endpoint in turn until one answers: 0 with its
 * reply in *r (etcd_reply_free), or -1 with why (none reached, or etcd's own
 * error). A token etcd refuses is renewed once. */
static int call(struct etcd *e, const char *path, json_t *body, struct etcd_reply *r, char *why, size_t len)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	int rc = -1;
	for (int attempt = 0; attempt < 2; attempt++) {
		if (e->user[0] && !e->token[0] && authenticate(e, why, len) < 0)
			break;
		rc = post(e, path, text, r, why, len);
		if (rc < 0 || !(e->user[0] && token_refused(r->error)) || attempt == 1)
			break;
		etcd_reply_free(r);
		rc = -1;
		e->token[0] = '\0'; /* (expired: again) */
	}
	free(text);
	if (rc == 0 && r->failed) {
		const char *error = r->error;
		const char *cause = !error[0]                            ? ""
				    : strstr(error, "permission denied") ? " (permission: the user is not granted "
									   "/cusnap/groups/)"
				    : token_refused(error) || strstr(error, "authentication failed")
					    ? " (authentication: --etcd-user, --etcd-password-file)"
					    : "";
		snprintf(why, len, "etcd: %s%s", error[0] ? error : "error", cause);
		etcd_reply_free(r);
		return -1;
	}
	return rc;
}

/* POST text to path at each endpoint in turn until one answers: 0 with its
 * reply decoded into *r (etcd's errors included), or -1 with why. */
static int post(struct etcd *e, const char *path, const char *text, struct etcd_reply *r, char *why, size_t len)
{
	int got_reply = -1;
	for (size_t k = 0; k < e->nurls && got_reply < 0; k++) {
		size_t at = (e->cur + k) % e->nurls;
		char url[320], authz[1100];
		snprintf(url, sizeof(url), "%s%s", e->urls[at], path);
		struct body got = {0};
		struct curl_slist *h = curl.slist_append(NULL, "Content-Type: application/json");
		if (e->token[0] && strcmp(path, "/v3/auth/authenticate") != 0) {
			snprintf(authz, sizeof(authz), "Authorization: %s", e->token);
			h = curl.slist_append(h, authz);
		}
		curl.easy_reset(e->curl);
		curl.easy_setopt(e->curl, CURLOPT_URL, url);
		curl.easy_setopt(e->curl, CURLOPT_POSTFIELDS, text);
		curl.easy_setopt(e->curl, CURLOPT_HTTPHEADER, h);
		curl.easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, collect);
		curl.easy_setopt(e->curl, CURLOPT_WRITEDATA, &got);
		curl.easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
		curl.easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS,
				 (long)(e->timeout_ms < 2000 ? e->timeout_ms : 2000));
		curl.easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
		if (e->cacert[0])
			curl.easy_setopt(e->curl, CURLOPT_CAINFO, e->cacert);
		if (e->cert[0])
			curl.easy_setopt(e->curl, CURLOPT_SSLCERT, e->cert);
		if (e->key[0])
			curl.easy_setopt(e->curl, CURLOPT_SSLKEY, e->key);
		atomic_fetch_add(&requests, 1);
		CURLcode rc = curl.easy_perform(e->curl);
		long status = 0;
		curl.easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
		curl.slist_free_all(h);
		if (rc != CURLE_OK)
			snprintf(why, len, "etcd at %s: %s: %s", e->urls[at], transfer_cause(rc),
				 curl.easy_strerror(rc));
		else if ((got_reply = etcd_reply_decode(got.data, r)) < 0)
			snprintf(why, len, "etcd at %s answered %ld without JSON", e->urls[at], status);
		else
			e->cur = at;
		free(got.data);
	}
	return got_reply;
}

int etcd_ping(struct etcd *e, char *why, size_t len)
{
	struct etcd_reply r;
	if (call(e, "/v3/kv/range", etcd_body_key("/cusnap/groups/"), &r, why, len) < 0)
		return -1;
	etcd_reply_free(&r);
	return 0;
}

int etcd_lease_grant(struct etcd *e, int ttl, int64_t *id, char *why, size_t len)
{
	struct etcd_reply r;
	*id = 0;
	if (call(e, "/v3/lease/grant", etcd_body_grant(ttl), &r, why, len) < 0)
		return -1;
	*id = r.id;
	etcd_reply_free(&r);
	if (!*id)
		snprintf(why, len, "etcd granted no lease");
	return *id ? 0 : -1;
}

int etcd_lease_keepalive(struct etcd *e, int64_t id, char *why, size_t len)
{
	struct etcd_reply r;
	if (call(e, "/v3/lease/keepalive", etcd_body_lease(id), &r, why, len) < 0)
		return -1;
	etcd_reply_free(&r);
	return r.ttl > 0 ? 0 : 1; /* (a lease that is gone answers without a TTL, or with 0) */
}

/* A call whose reply says nothing but that it was done: 0, or -1 with why. */
static int call_done(struct etcd *e, const char *path, json_t *body, char *why, size_t len)
{
	struct etcd_reply r;
	if (call(e, path, body, &r, why, len) < 0)
		return -1;
	etcd_reply_free(&r);
	return 0;
}

int etcd_lease_revoke(struct etcd *e, int64_t id, char *why, size_t len)
{
	return call_done(e, "/v3/lease/revoke", etcd_body_lease(id), why, len);
}

int etcd_put(struct etcd *e, const char *key, const char *value, int64_t lease, char *why, size_t len)
{
	return call_done(e, "/v3/kv/put", etcd_body_put(key, value, lease), why, len);
}

int etcd_create(struct etcd *e, const char *key, const char *value, int64_t lease, char *why, size_t len)
{
	struct etcd_reply r;
	if (call(e, "/v3/kv/txn", etcd_body_create(key, value, lease), &r, why, len) < 0)
		return -1;
	etcd_reply_free(&r);
	return r.succeeded;
}

/* A range's kvs out of r (they become the caller's): 0, or -1 with why. */
static int kvs_taken(struct etcd_reply *r, struct etcd_kv **kvs, size_t *n, char *why, size_t len)
{
	if (r->bad_kv) {
		snprintf(why, len, "etcd: a key or value that is not base64");
		return -1;
	}
	*kvs = r->kvs;
	*n = r->nkvs;
	r->kvs = NULL;
	r->nkvs = 0;
	return 0;
}

int etcd_range(struct etcd *e, const char *prefix, struct etcd_kv **kvs, size_t *n, char *why, size_t len)
{
	struct etcd_reply r;
	*kvs = NULL;
	*n = 0;
	if (call(e, "/v3/kv/range", etcd_body_range(prefix), &r, why, len) < 0)
		return -1;
	int rc = kvs_taken(&r, kvs, n, why, len);
	if (rc == 0 && !*kvs && !(*kvs = calloc(1, sizeof(**kvs)))) /* (callers free an empty list too) */
		rc = -1, snprintf(why, len, "out of memory");
	etcd_reply_free(&r);
	return rc;
}

int etcd_get(struct etcd *e, const char *key, struct etcd_kv *kv, char *why, size_t len)
{
	struct etcd_reply r;
	struct etcd_kv *kvs = NULL;
	size_t n = 0;
	if (call(e, "/v3/kv/range", etcd_body_key(key), &r, why, len) < 0)
		return -1;
	int rc = kvs_taken(&r, &kvs, &n, why, len);
	etcd_reply_free(&r);
	if (rc < 0)
		return -1;
	if (n)
		*kv = kvs[0], kvs[0] = (struct etcd_kv){0};
	etcd_kvs_free(kvs, n);
	return n ? 1 : 0;
}

int etcd_delete(struct etcd *e, const char *key, char *why, size_t len)
{
	return call_done(e, "/v3/kv/deleterange", etcd_body_key(key), why, len);
}

void etcd_kvs_free(struct etcd_kv *kvs, size_t n)
{
	for (size_t i = 0; kvs && i < n; i++) {
		free(kvs[i].key);
		free(kvs[i].value);
	}
	free(kvs);
}

/* What to do about why etcd could not be used: only an etcd that cannot be
 * reached is one to start (a refusal of TLS, authentication or permission
 * names its own fix). */
const char *etcd_advice(const char *why)
{
	return strstr(why, ": unreachable:") ? "; start etcd there, or name one that answers with --etcd" : "";
}
