/* SPDX-License-Identifier: MIT */
/* Multicast validation and comparison (DESIGN.md §8): complete same-node
 * groups only. O(records) with hash maps (the comparison sorts binds). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord.h"
#include "cusnap/hmap.h"

/* One multicast object across the group. */
struct mc_group {
	const struct topo_mc *first, *creator;
	size_t first_part, creator_part;
	uint64_t added, bound; /* device bits */
};

static int first_bit(uint64_t v)
{
	return v ? __builtin_ctzll(v) : -1;
}

/* What the checks share: the group's participants, its multicast objects
 * gathered by id, the first failure in err. */
struct mc_check {
	const struct coord_target *t;
	const struct topo_participant *p;
	size_t n;
	struct hmap groups, parts; /* mc_group by object id; participants by id */
	struct mc_group *g;
	size_t ng;
	char *err;
	size_t errlen;
};

static int oom(struct mc_check *c)
{
	snprintf(c->err, c->errlen, "out of memory");
	return -1;
}

/* Every object gathered from its holders, who agree on it; one creator, the
 * devices each added. 0, or -1 with c->err. */
static int mc_gather(struct mc_check *c)
{
	char hex[ID_HEX_LEN + 1];
	for (size_t i = 0; i < c->n; i++)
		if (hmap_put(&c->parts, id_hash(&c->p[i].id), (void *)&c->p[i]) < 0)
			return oom(c);
	for (size_t i = 0; i < c->n; i++) {
		for (size_t j = 0; j < c->p[i].nmcs; j++) {
			const struct topo_mc *m = &c->p[i].mcs[j];
			id_hex(&m->id, hex);
			struct mc_group *x = hmap_get(&c->groups, id_hash(&m->id));
			if (x && !id_equal(&x->first->id, &m->id))
				x = NULL; /* a hash collision: the ids differ */
			if (!x) {
				x = &c->g[c->ng++];
				x->first = m;
				x->first_part = i;
				if (hmap_put(&c->groups, id_hash(&m->id), x) < 0)
					return oom(c);
			} else if (x->first->num_devices != m->num_devices || x->first->size != m->size) {
				snprintf(c->err, c->errlen,
					 "multicast object %s: participants %d (ns %d) and %d (ns %d) disagree on it "
					 "(%u/%u devices, "
					 "%" PRIu64 "/%" PRIu64 " bytes)",
					 hex, c->t[x->first_part].obs, c->t[x->first_part].ns, c->t[i].obs, c->t[i].ns,
					 x->first->num_devices, m->num_devices, x->first->size, m->size);
				return -1;
			}
			if (m->shared_types & ~(uint32_t)PROTO_HANDLE_POSIX_FD) {
				snprintf(c->err, c->errlen,
					 "participant %d (ns %d): multicast object %s was shared as handle type %#x: "
					 "only POSIX file "
					 "descriptor sharing can be checkpointed",
					 c->t[i].obs, c->t[i].ns, hex, m->shared_types);
				return -1;
			}
			if (m->role == PROTO_ROLE_CREATOR) {
				if (x->creator) {
					snprintf(c->err, c->errlen,
						 "multicast object %s has two creators: participant %d (ns %d) and %d "
						 "(ns %d)",
						 hex, c->t[x->creator_part].obs, c->t[x->creator_part].ns, c->t[i].obs,
						 c->t[i].ns);
					return -1;
				}
				if (!id_equal(&m->creator, &c->p[i].id)) {
					snprintf(c->err, c->errlen,
						 "participant %d (ns %d): multicast object %s: creator record names "
						 "another participant",
						 c->t[i].obs, c->t[i].ns, hex);
					return -1;
				}
				x->creator = m;
				x->creator_part = i;
			}
			for (size_t d = 0; d < m->nadded; d++) {
				int dev = m->added[d];
				if (dev < 0 || dev >= PROTO_MAX_DEVICES) {
					snprintf(c->err, c->errlen,
						 "participant %d (ns %d): multicast object %s: device %d is out of "
						 "range",
						 c->t[i].obs, c->t[i].ns, hex, dev);
					return -1;
				}
				if (x->added & (1ull << dev)) {
					snprintf(c->err, c->errlen,
						 "participant %d (ns %d): multicast object %s: device %d was added "
						 "twice in the group",
						 c->t[i].obs, c->t[i].ns, hex, dev);
					return -1;
				}
				x->added |= 1ull << dev;
			}
		}
	}
	return 0;
}

/* Binds: of tracked memory their participant holds, in bounds, aligned. */
static int mc_check_binds(struct mc_check *c)
{
	char hex[ID_HEX_LEN + 1];
	for (size_t i = 0; i < c->n; i++) {
		struct hmap mine = {0};
		for (size_t j = 0; j < c->p[i].nallocs; j++)
			if (hmap_put(&mine, id_hash(&c->p[i].allocs[j].id), (void *)&c->p[i].allocs[j]) < 0) {
				hmap_free(&mine);
				return oom(c);
			}
		const char *bad = NULL;
		const struct topo_mc_bind *b = NULL;
		for (size_t j = 0; j < c->p[i].nbinds && !bad; j++) {
			b = &c->p[i].binds[j];
			struct mc_group *x = hmap_get(&c->groups, id_hash(&b->mc_id));
			const struct topo_alloc *member = hmap_get(&mine, id_hash(&b->member));
			uint64_t gran = x && x->first->granularity ? x->first->granularity : 1;
			if (!x || !id_equal(&x->first->id, &b->mc_id))
				bad = "names a multicast object the participant does not hold";
			else if (id_is_zero(&b->member))
				bad = "binds memory the shim does not track (made without the POSIX handle type): it "
				      "cannot be "
				      "rebuilt";
			else if (!member || !id_equal(&member->id, &b->member))
				bad = "binds an allocation the participant does not hold";
			else if (!b->size || b->member_offset > member->size ||
				 b->size > member->size - b->member_offset)
				bad = "lies outside the bound allocation";
			else if (b->mc_offset % gran || b->size % gran)
				bad = "is not aligned to the multicast granularity";
			else if (b->device < 0 || b->device >= PROTO_MAX_DEVICES)
				bad = "names a device out of range";
			else
				x->bound |= 1ull << b->device;
		}
		hmap_free(&mine);
		if (bad) {
			id_hex(&b->mc_id, hex);
			snprintf(c->err, c->errlen,
				 "participant %d (ns %d): multicast object %s: the bind at offset %" PRIu64 " (%" PRIu64
				 " bytes, device %d) %s",
				 c->t[i].obs, c->t[i].ns, hex, b->mc_offset, b->size, b->device, bad);
			return -1;
		}
	}
	return 0;
}

/* Each object: one creator in the group, its team complete and bound. */
static int mc_check_groups(struct mc_check *c)
{
	char hex[ID_HEX_LEN + 1], hex2[ID_HEX_LEN + 1];
	for (size_t k = 0; k < c->ng; k++) {
		struct mc_group *x = &c->g[k];
		id_hex(&x->first->id, hex);
		if (!x->creator) {
			id_hex(&x->first->creator, hex2);
			snprintf(c->err, c->errlen,
				 "participant %d (ns %d): multicast object %s is imported from participant %s, which "
				 "is not in "
				 "the group (partial group)",
				 c->t[x->first_part].obs, c->t[x->first_part].ns, hex, hex2);
			return -1;
		}
		/* Every participant that imported it (the creator's list) must be here and hold it. */
		for (size_t q = 0; q < x->creator->nimporters; q++) {
			const struct cusnap_id *who = &x->creator->importers[q];
			const struct topo_participant *holder = hmap_get(&c->parts, id_hash(who));
			if (holder && !id_equal(&holder->id, who))
				holder = NULL;
			bool holds = false;
			for (size_t j = 0; holder && j < holder->nmcs && !holds; j++)
				holds = id_equal(&holder->mcs[j].id, &x->first->id);
			if (!holds) {
				id_hex(who, hex2);
				snprintf(c->err, c->errlen,
					 "multicast object %s was imported by participant %s, which %s (partial group)",
					 hex, hex2, holder ? "no longer holds it" : "is not in the group");
				return -1;
			}
		}
		unsigned added = (unsigned)__builtin_popcountll(x->added);
		if (added != x->first->num_devices) {
			snprintf(c->err, c->errlen,
				 "multicast object %s: the participants added %u of its %u devices (a device is "
				 "missing, or "
				 "was added by a process outside the group: partial group)",
				 hex, added, x->first->num_devices);
			return -1;
		}
		if (x->added & ~x->bound) {
			snprintf(c->err, c->errlen,
				 "multicast object %s: device %d was added but nothing is bound on it", hex,
				 first_bit(x->added & ~x->bound));
			return -1;
		}
		if (x->bound & ~x->added) {
			snprintf(c->err, c->errlen,
				 "multicast object %s: device %d has binds but no participant added it", hex,
				 first_bit(x->bound & ~x->added));
			return -1;
		}
	}
	return 0;
}

int coord_validate_multicast(const struct coord_target *t, const struct topo_participant *p, size_t n, char *err,
			     size_t errlen)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += p[i].nmcs;
	if (!total) {
		for (size_t i = 0; i < n; i++) {
			if (p[i].nbinds) {
				snprintf(err, errlen,
					 "participant %d (ns %d): multicast binds without a multicast object", t[i].obs,
					 t[i].ns);
				return -1;
			}
		}
		return 0;
	}
	struct mc_check c =
		{.t = t, .p = p, .n = n, .g = calloc(total, sizeof(struct mc_group)), .err = err, .errlen = errlen};
	int rc = !c.g ? oom(&c) : mc_gather(&c);
	if (!rc)
		rc = mc_check_binds(&c);
	if (!rc)
		rc = mc_check_groups(&c);
	hmap_free(&c.groups);
	hmap_free(&c.parts);
	free(c.g);
	return rc;
}

static int bind_order(const void *x, const void *y)
{
	const struct topo_mc_bind *a = x, *b = y;
	if (a->key != b->key)
		return a->key < b->key ? -1 : 1;
	if (a->mc_offset != b->mc_offset)
		return a->mc_offset < b->mc_offset ? -1 : 1;
	return a->device < b->device ? -1 : a->device > b->device;
}

static bool same_devices(const struct topo_mc *r, const struct topo_mc *c, const int *map, size_t nmap)
{
	if (r->nadded != c->nadded)
		return false;
	uint64_t want = 0, have = 0;
	for (size_t i = 0; i < r->nadded; i++)
		want |= 1ull << (coord_remap_device(r->added[i], map, nmap) & 63);
	for (size_t i = 0; i < c->nadded; i++)
		have |= 1ull << (c->added[i] & 63);
	return want == have;
}

int coord_compare_multicast(const struct topo_participant *rec, const struct topo_participant *cur, const int *map,
			    size_t nmap, char *err, size_t errlen)
{
	char hex[ID_HEX_LEN + 1];
	if (rec->nmcs != cur->nmcs || rec->nbinds != cur->nbinds) {
		snprintf(err, errlen, "%zu multicast objects and %zu binds recorded, %zu and %zu now", rec->nmcs,
			 rec->nbinds, cur->nmcs, cur->nbinds);
		return -1;
	}
	if (!rec->nmcs)
		return 0;
	struct hmap mcs = {0};
	int rc = 0;
	struct topo_mc_bind *rb = NULL, *cb = NULL;
	for (size_t i = 0; i < cur->nmcs && !rc; i++)
		rc = hmap_put(&mcs, cur->mcs[i].key, &cur->mcs[i]);
	if (!rc && rec->nbinds) {
		rb = malloc(rec->nbinds * sizeof(*rb));
		cb = malloc(rec->nbinds * sizeof(*cb));
		rc = rb && cb ? 0 : -1;
	}
	if (rc) {
		snprintf(err, errlen, "out of memory");
		rc = -1;
		goto out;
	}
	for (size_t i = 0; i < rec->nmcs; i++) {
		const struct topo_mc *r = &rec->mcs[i], *c = hmap_get(&mcs, r->key);
		id_hex(&r->id, hex);
		if (!c || !id_equal(&c->id, &r->id) || c->role != r->role || c->size != r->size || c->used != r->used ||
		    c->num_devices != r->num_devices || c->handles != r->handles || !same_devices(r, c, map, nmap)) {
			snprintf(err, errlen, "multicast object %s differs after restore (or is missing)", hex);
			rc = -1;
			goto out;
		}
		if (c->detached) {
			snprintf(err, errlen, "multicast object %s is still taken down", hex);
			rc = -1;
			goto out;
		}
	}
	for (size_t i = 0; i < rec->nbinds; i++) {
		rb[i] = rec->binds[i];
		rb[i].device = coord_remap_device(rb[i].device, map, nmap);
		cb[i] = cur->binds[i];
	}
	qsort(rb, rec->nbinds, sizeof(*rb), bind_order);
	qsort(cb, rec->nbinds, sizeof(*cb), bind_order);
	for (size_t i = 0; i < rec->nbinds; i++) {
		const struct topo_mc_bind *r = &rb[i], *c = &cb[i];
		if (bind_order(r, c) || c->size != r->size || !id_equal(&c->member, &r->member) ||
		    c->member_offset != r->member_offset || c->member_va != r->member_va || c->detached) {
			id_hex(&r->mc_id, hex);
			snprintf(err, errlen,
				 "multicast object %s: the bind at offset %" PRIu64
				 " on device %d differs after restore",
				 hex, r->mc_offset, r->device);
			rc = -1;
			goto out;
		}
	}
out:
	hmap_free(&mcs);
	free(rb);
	free(cb);
	return rc;
}
