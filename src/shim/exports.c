/* SPDX-License-Identifier: MIT */
/* The export table (DESIGN.md §4.3): what EXPORT may hand out, by allocation id.
 *
 * An entry follows its allocation's driver handle by construction. The handle
 * of a tracked allocation changes only in alloc_set_driver and
 * alloc_release_driver, which update the entry under exp_lock in the same step,
 * and exports_export calls the driver while it holds exp_lock. So EXPORT never
 * exports a handle that was released (and perhaps reused by the driver) after
 * it was looked up. EXPORT takes only exp_lock, never tbl.lock, which wrappers
 * hold across driver calls; the lock order is tbl.lock, then exp_lock.
 *
 * Every shared allocation this process holds has an entry, the importers' too:
 * one record serves it (the entry's owner; the creator's when it is here). A
 * creator's entry remembers the endpoints its EXPORTs went to (its peers). When
 * the creator lets go of the allocation while peers may still hold it (DESIGN.md
 * §6.2), the entry stays as a tombstone: an EXPORT of it (the token checked) is
 * forwarded to the peers, the holder PREPARE named first, one hop, until one
 * serves it. So a capability resolves while anyone holds the memory, as the
 * driver's own FD would, before a checkpoint and after it. PREPARE keeps only the
 * tombstones of what someone still holds. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cusnap/proto.h"
#include "cusnap/request.h"
#include "shim.h"

struct export_entry {
	struct cusnap_id alloc_id;
	struct cusnap_id token;              /* zero: a tombstone made by PREPARE (not checked here) */
	const struct shim_alloc *owner;      /* the record that serves it; NULL: a tombstone */
	CUmemGenericAllocationHandle driver; /* 0: not exportable now */
	size_t size;
	unsigned mc_devices;         /* a multicast object's numDevices; 0: memory */
	int device;                  /* whose primary context serves the export */
	bool creator;                /* its owner created it: EXPORTs to peers are remembered */
	struct cusnap_id *importers; /* multicast objects: the participants that redeemed it */
	size_t nimporters;
	char *peers[EXPORT_PEERS]; /* endpoints its EXPORTs went to, the most recent (or the holder) first */
	size_t npeers;
};

static pthread_mutex_t exp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hmap exports; /* id_hash(alloc id) -> export_entry */
static size_t tombstones;

/* The entry of alloc_id, checked on its full id. Caller holds exp_lock. */
static struct export_entry *entry_of(const struct cusnap_id *alloc_id)
{
	struct export_entry *e = hmap_get(&exports, id_hash(alloc_id));
	return e && id_equal(&e->alloc_id, alloc_id) ? e : NULL;
}

/* Records with an entry: shared memory (a creator's or an import) and the
 * multicast objects this process created. */
static bool exported(const struct shim_alloc *a)
{
	return !id_is_zero(&a->token) && (a->role == SHIM_ROLE_CREATOR || !a->mc);
}

static void entry_free(struct export_entry *e)
{
	free(e->importers);
	for (size_t i = 0; i < e->npeers; i++)
		free(e->peers[i]);
	free(e);
}

/* Remove e (an entry of the table). Caller holds exp_lock. */
static void entry_drop(struct export_entry *e)
{
	tombstones -= !e->owner;
	hmap_del(&exports, id_hash(&e->alloc_id));
	entry_free(e);
}

/* endpoint (len bytes) first among e's peers. Caller holds exp_lock. */
static void peer_first(struct export_entry *e, const char *endpoint, size_t len)
{
	size_t at = 0;
	while (at < e->npeers && (strlen(e->peers[at]) != len || memcmp(e->peers[at], endpoint, len)))
		at++;
	char *p;
	if (at < e->npeers) {
		p = e->peers[at];
	} else {
		p = strndup(endpoint, len);
		if (!p)
			return; /* unlisted: a tombstone then forwards to the others */
		if (e->npeers == EXPORT_PEERS)
			free(e->peers[--e->npeers]); /* the oldest goes */
		at = e->npeers++;                    /* a slot at the end, filled by the shift */
	}
	memmove(e->peers + 1, e->peers, at * sizeof(*e->peers));
	e->peers[0] = p;
}

/* Make a's entry say what a holds now, unless another record serves it.
 * Caller holds exp_lock. Returns 0, -ENOMEM, or -EEXIST when another id
 * already holds its hash. */
static int sync_locked(const struct shim_alloc *a)
{
	if (!exported(a))
		return 0;
	struct export_entry *e = hmap_get(&exports, id_hash(&a->id));
	if (e && !id_equal(&e->alloc_id, &a->id))
		return -EEXIST;
	if (e && e->owner && e->owner != a && (e->creator || a->role != SHIM_ROLE_CREATOR))
		return 0; /* (an importer in the creator's process: the creator serves) */
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e || hmap_put(&exports, id_hash(&a->id), e) < 0) {
			free(e);
			return -ENOMEM;
		}
		e->alloc_id = a->id;
		tombstones++; /* (owned below) */
	}
	tombstones -= !e->owner;
	e->owner = a;
	e->creator = a->role == SHIM_ROLE_CREATOR;
	e->token = a->token;
	e->driver = a->driver_ref ? a->driver : 0;
	e->size = a->mc ? a->mc->prop.size : a->size;
	e->mc_devices = a->mc ? a->mc->prop.numDevices : 0;
	e->device = ctx_device_of(a);
	return 0;
}

int exports_publish(const struct shim_alloc *a)
{
	pthread_mutex_lock(&exp_lock);
	int rc = sync_locked(a);
	pthread_mutex_unlock(&exp_lock);
	return rc;
}

int alloc_set_driver(struct shim_alloc *a, CUmemGenericAllocationHandle driver)
{
	pthread_mutex_lock(&exp_lock);
	a->driver = driver;
	a->driver_ref = true;
	int rc = sync_locked(a);
	pthread_mutex_unlock(&exp_lock);
	return rc;
}

CUresult alloc_release_driver(struct shim_alloc *a)
{
	if (!a->driver_ref)
		return CUDA_SUCCESS;
	/* Under exp_lock: an EXPORT in flight finishes first, and none starts on
	 * this handle between the release and the entry's update. */
	pthread_mutex_lock(&exp_lock);
	CUresult rc = real.cuMemRelease(a->driver);
	if (rc == CUDA_SUCCESS) {
		a->driver_ref = false;
		struct export_entry *e = exported(a) ? entry_of(&a->id) : NULL;
		if (e && e->owner == a)
			e->driver = 0;
	}
	pthread_mutex_unlock(&exp_lock);
	return rc;
}

void exports_forget(const struct shim_alloc *a)
{
	if (!exported(a))
		return;
	pthread_mutex_lock(&exp_lock);
	struct export_entry *e = entry_of(&a->id);
	if (e && e->owner == a) {
		if (!a->mc && e->creator && e->npeers && tombstones < EXPORT_TOMBSTONES) {
			/* Its peers may hold it still: EXPORTs go to them from now on. */
			e->owner = NULL;
			e->driver = 0;
			tombstones++;
		} else {
			entry_drop(e);
		}
	}
	pthread_mutex_unlock(&exp_lock);
}

int exports_set_forwards(const struct req_hold *holds, size_t n, const struct cusnap_id *me, const char *self)
{
	pthread_mutex_lock(&exp_lock);
	/* Tombstones of what no one holds any more go (collected first: a removal moves entries). */
	struct hmap held = {0};
	int rc = 0;
	for (size_t i = 0; !rc && i < n; i++)
		if (id_equal(&holds[i].creator, me))
			rc = hmap_put(&held, id_hash(&holds[i].alloc), (void *)&holds[i]);
	size_t nold = 0;
	struct export_entry **old = rc ? NULL : malloc((exports.len ? exports.len : 1) * sizeof(*old));
	struct export_entry *e;
	hmap_for_each(&exports, e) {
		if (!old)
			break;
		const struct req_hold *h = e->owner ? NULL : hmap_get(&held, id_hash(&e->alloc_id));
		if (!e->owner && !(h && id_equal(&h->alloc, &e->alloc_id)))
			old[nold++] = e;
	}
	for (size_t i = 0; i < nold; i++)
		entry_drop(old[i]);
	rc = rc || !old ? -ENOMEM : 0;
	free(old);
	/* The holder of each of this process's allocations first among its peers. */
	for (size_t i = 0; !rc && i < n; i++) {
		const struct req_hold *h = &holds[i];
		if (!id_equal(&h->creator, me) || id_equal(&h->holder, me) ||
		    (h->endpoint_len == strlen(self) && !memcmp(h->endpoint, self, h->endpoint_len)))
			continue;
		e = hmap_get(&exports, id_hash(&h->alloc));
		if (e && (!id_equal(&e->alloc_id, &h->alloc) || e->owner))
			continue; /* a record of this process serves it (or another id has its hash) */
		if (!e) {         /* (its tombstone was never made: it had no peers, or too many tombstones) */
			e = calloc(1, sizeof(*e));
			if (!e || hmap_put(&exports, id_hash(&h->alloc), e) < 0) {
				free(e);
				rc = -ENOMEM;
				break;
			}
			e->alloc_id = h->alloc;
			e->creator = true;
			tombstones++;
		}
		peer_first(e, h->endpoint, h->endpoint_len);
	}
	hmap_free(&held);
	pthread_mutex_unlock(&exp_lock);
	return rc;
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

size_t exports_importers(const struct cusnap_id *alloc_id, struct cusnap_id **out)
{
	*out = NULL;
	pthread_mutex_lock(&exp_lock);
	const struct export_entry *e = entry_of(alloc_id);
	size_t n = e ? e->nimporters : 0;
	if (n && (*out = malloc(n * sizeof(**out))))
		memcpy(*out, e->importers, n * sizeof(**out));
	pthread_mutex_unlock(&exp_lock);
	return *out ? n : 0;
}

/* A refused EXPORT: "allocation <id><why>" in err (the id is formatted only
 * here, off the path of an export that succeeds). Returns rc. */
static int refused(int rc, const struct cusnap_id *id, const char *why, char *err, size_t errlen)
{
	char hex[ID_HEX_LEN + 1];
	id_hex(id, hex);
	snprintf(err, errlen, "allocation %s%s", hex, why);
	return rc;
}

/* EXPORT of a tombstone's allocation asked of its peers in turn (one hop; the
 * holder checks the token too), never of this process. (The redeemer may be
 * asked: a process importing again what it holds serves itself.) */
static int export_forwarded(const struct export_request *q, char **peers, size_t n, struct shim_export_info *info,
			    int *fd, char *err, size_t errlen)
{
	const struct shim_identity *me = shim_self();
	struct shim_cap cap = {.alloc_id = q->alloc_id, .token = q->token};
	char why[700] = "no participant that redeemed it is left";
	*fd = -1;
	for (size_t i = 0; i < n && *fd < 0; i++) {
		if (me && !strcmp(peers[i], me->endpoint))
			continue;
		snprintf(cap.endpoint, sizeof(cap.endpoint), "%s", peers[i]);
		int sock = shim_connect(peers[i]);
		if (sock < 0) {
			snprintf(why, sizeof(why), "%s: %s", peers[i], strerror(-sock));
			continue;
		}
		if (cap_export_send_hop(sock, &cap, 1) == PROTO_OK)
			*fd = cap_export_recv(sock, &cap, info, why, sizeof(why));
		close(sock);
	}
	if (*fd >= 0)
		return PROTO_OK;
	char what[800];
	snprintf(what, sizeof(what), ": its creator let go of it and no peer serves it: %s", why);
	return refused(PROTO_E_NOT_FOUND, &q->alloc_id, what, err, errlen);
}

int exports_export(const struct export_request *q, struct shim_export_info *info, int *fd, char *err, size_t errlen)
{
	pthread_mutex_lock(&exp_lock);
	struct export_entry *e = entry_of(&q->alloc_id);
	int rc = PROTO_OK;
	if (!e) {
		rc = refused(PROTO_E_NOT_FOUND, &q->alloc_id, " is not exported by this participant", err, errlen);
	} else if (!id_is_zero(&e->token) && !id_equal_ct(&e->token, &q->token)) {
		rc = refused(PROTO_E_AUTH, &q->alloc_id, ": capability token does not match", err, errlen);
	} else if (!e->owner && q->hops) {
		rc = refused(PROTO_E_NOT_FOUND, &q->alloc_id, " is not held by this participant any more", err, errlen);
	} else if (!e->owner) {
		/* A tombstone: its peers, copied (never a round trip with the lock held). */
		char *peers[EXPORT_PEERS];
		size_t n = 0;
		for (size_t i = 0; i < e->npeers; i++)
			if ((peers[n] = strdup(e->peers[i])))
				n++;
		pthread_mutex_unlock(&exp_lock);
		rc = export_forwarded(q, peers, n, info, fd, err, errlen);
		for (size_t i = 0; i < n; i++)
			free(peers[i]);
		return rc;
	} else if (!e->driver) {
		rc = refused(PROTO_E_DRIVER, &q->alloc_id, ": not attached now (a checkpoint is under way)", err,
			     errlen);
	} else {
		/* An endpoint thread has no context of its own (DESIGN.md §4.1). */
		CUresult cr = q->in_caller_context ? CUDA_SUCCESS : ctx_enter_device(e->device);
		const char *call = CTX_ENTER_CALLS;
		if (cr == CUDA_SUCCESS) {
			call = "cuMemExportToShareableHandle";
			cr = real.cuMemExportToShareableHandle(fd, e->driver, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
							       0);
		}
		if (!q->in_caller_context && !q->keep_context)
			ctx_leave_all();
		if (cr != CUDA_SUCCESS) {
			char why[256];
			snprintf(why, sizeof(why), ": %s failed: %s", call, shim_cu_name(cr));
			rc = refused(PROTO_E_DRIVER, &q->alloc_id, why, err, errlen);
		} else {
			info->size = e->size;
			info->mc_devices = e->mc_devices;
			if (e->mc_devices && !id_is_zero(&q->who))
				note_importer(e, &q->who);
			else if (!e->mc_devices && e->creator && !q->hops && q->who_endpoint && *q->who_endpoint)
				peer_first(e, q->who_endpoint, strlen(q->who_endpoint));
		}
	}
	pthread_mutex_unlock(&exp_lock);
	return rc;
}

void exports_lock_for_fork(bool take)
{
	shim_lock_for_fork(&exp_lock, take);
}
