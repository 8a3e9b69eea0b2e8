/* SPDX-License-Identifier: MIT */
/* The export table (SYSTEM.md §4.3): what EXPORT may hand out, by allocation id.
 *
 * An entry follows its allocation's driver handle by construction. The handle
 * of a tracked allocation changes only in alloc_set_driver and
 * alloc_release_driver, which update the entry under exp_lock in the same step,
 * and exports_export calls the driver while it holds exp_lock. So EXPORT never
 * exports a handle that was released (and perhaps reused by the driver) after
 * it was looked up. EXPORT takes only exp_lock, never tbl.lock, which wrappers
 * hold across driver calls; the lock order is tbl.lock, then exp_lock.
 *
 * An allocation this process created and let go, which an importer carries for
 * the group (SYSTEM.md §6.2), keeps a forwarding entry: EXPORT of it is asked of
 * the holder, which checks the token, so that a capability handed out by this
 * process still resolves. PREPARE sets these entries anew each time. */
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
	struct cusnap_id token;
	CUmemGenericAllocationHandle driver; /* 0: not exportable now */
	size_t size;
	unsigned mc_devices;         /* a multicast object's numDevices; 0: memory */
	int device;                  /* whose primary context serves the export */
	struct cusnap_id *importers; /* multicast objects: the participants that redeemed it */
	size_t nimporters;
	char *forward; /* set: no record here; the holder's endpoint serves its EXPORT */
};

static pthread_mutex_t exp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hmap exports; /* id_hash(alloc id) -> export_entry */

/* The entry of alloc_id, checked on its full id. Caller holds exp_lock. */
static struct export_entry *entry_of(const struct cusnap_id *alloc_id)
{
	struct export_entry *e = hmap_get(&exports, id_hash(alloc_id));
	return e && id_equal(&e->alloc_id, alloc_id) ? e : NULL;
}

static bool exported(const struct shim_alloc *a)
{
	return (a->role == SHIM_ROLE_CREATOR || a->holder) && !id_is_zero(&a->token);
}

static void entry_free(struct export_entry *e)
{
	free(e->importers);
	free(e->forward);
	free(e);
}

/* Make a's entry say what a holds now. Caller holds exp_lock. Returns 0,
 * -ENOMEM, or -EEXIST when another id already holds its hash. */
static int sync_locked(const struct shim_alloc *a)
{
	if (!exported(a))
		return 0;
	struct export_entry *e = hmap_get(&exports, id_hash(&a->id));
	if (e && !id_equal(&e->alloc_id, &a->id))
		return -EEXIST;
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e || hmap_put(&exports, id_hash(&a->id), e) < 0) {
			free(e);
			return -ENOMEM;
		}
		e->alloc_id = a->id;
	}
	free(e->forward); /* a record here now: it serves the export itself */
	e->forward = NULL;
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
		/* (an importer in the creator's own process has the creator's id) */
		struct export_entry *e = exported(a) ? entry_of(&a->id) : NULL;
		if (e)
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
	if (e) {
		hmap_del(&exports, id_hash(&a->id));
		entry_free(e);
	}
	pthread_mutex_unlock(&exp_lock);
}

int exports_set_forwards(const struct req_hold *holds, size_t n, const struct cusnap_id *me, const char *self)
{
	pthread_mutex_lock(&exp_lock);
	/* The forwards of the last PREPARE go (collected first: a removal moves entries). */
	size_t nold = 0;
	uint64_t *old = malloc((exports.len ? exports.len : 1) * sizeof(*old));
	int rc = old ? 0 : -ENOMEM;
	for (size_t i = 0; old && i < exports.cap; i++) {
		const struct export_entry *e = exports.keys[i] ? exports.vals[i] : NULL;
		if (e && e->forward)
			old[nold++] = exports.keys[i];
	}
	for (size_t i = 0; i < nold; i++)
		entry_free(hmap_del(&exports, old[i]));
	free(old);
	for (size_t i = 0; !rc && i < n; i++) {
		const struct req_hold *h = &holds[i];
		if (!id_equal(&h->creator, me) || id_equal(&h->holder, me) ||
		    (h->endpoint_len == strlen(self) && !memcmp(h->endpoint, self, h->endpoint_len)))
			continue;
		if (hmap_get(&exports, id_hash(&h->alloc)))
			continue; /* a record of this process serves it (or another id has its hash) */
		struct export_entry *e = calloc(1, sizeof(*e));
		char *to = e ? strndup(h->endpoint, h->endpoint_len) : NULL;
		if (!to || hmap_put(&exports, id_hash(&h->alloc), e) < 0) {
			free(to);
			free(e);
			rc = -ENOMEM;
			break;
		}
		e->alloc_id = h->alloc;
		e->forward = to;
		e->device = -1;
	}
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

/* EXPORT asked of the process that carries the allocation now (its token is checked there). */
static int export_forwarded(const struct export_request *q, const char *holder, struct shim_export_info *info, int *fd,
			    char *err, size_t errlen)
{
	struct shim_cap cap = {.alloc_id = q->alloc_id, .token = q->token};
	snprintf(cap.endpoint, sizeof(cap.endpoint), "%s", holder);
	char why[700];
	int sock = -1;
	*fd = cap_redeem_on(&sock, &cap, info, why, sizeof(why));
	if (sock >= 0)
		close(sock);
	if (*fd >= 0)
		return PROTO_OK;
	char what[800];
	snprintf(what, sizeof(what), ": carried by another participant: %s", why);
	return refused(PROTO_E_NOT_FOUND, &q->alloc_id, what, err, errlen);
}

int exports_export(const struct export_request *q, struct shim_export_info *info, int *fd, char *err, size_t errlen)
{
	pthread_mutex_lock(&exp_lock);
	struct export_entry *e = entry_of(&q->alloc_id);
	int rc = PROTO_OK;
	if (e && e->forward) {
		/* Never across a round trip with the lock held. */
		char holder[4200];
		snprintf(holder, sizeof(holder), "%s", e->forward);
		pthread_mutex_unlock(&exp_lock);
		return export_forwarded(q, holder, info, fd, err, errlen);
	}
	if (!e) {
		rc = refused(PROTO_E_NOT_FOUND, &q->alloc_id, " is not exported by this participant", err, errlen);
	} else if (!id_equal_ct(&e->token, &q->token)) {
		rc = refused(PROTO_E_AUTH, &q->alloc_id, ": capability token does not match", err, errlen);
	} else if (!e->driver) {
		rc = refused(PROTO_E_DRIVER, &q->alloc_id, ": not attached now (a checkpoint is under way)", err,
			     errlen);
	} else {
		/* An endpoint thread has no context of its own (SYSTEM.md §4.1). */
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
		}
	}
	pthread_mutex_unlock(&exp_lock);
	return rc;
}

void exports_lock_for_fork(bool take)
{
	if (take)
		pthread_mutex_lock(&exp_lock);
	else
		pthread_mutex_unlock(&exp_lock);
}
