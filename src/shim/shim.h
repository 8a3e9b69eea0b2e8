/* SPDX-License-Identifier: MIT */
/* libsnapshot_cuda_vmm internals. */
#ifndef CUSNAP_SHIM_SHIM_H
#define CUSNAP_SHIM_SHIM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cuda.h>
/* cudaGetDriverEntryPoint is deprecated in CUDA 13 but still what NCCL and
 * PyTorch call: the shim must wrap it. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <cuda_runtime_api.h>

#include "cusnap/hmap.h"
#include "cusnap/ids.h"
#include "cusnap/itree.h"
#include "cusnap/proto.h"
#include "cusnap/proto.h"

#define SHIM_API __attribute__((visibility("default")))

/* cuda.h maps cuGetProcAddress to _v2 and hides the pre-12.0 ABI; cudart's _ptsz
 * entry points are only declared for per-thread builds. The shim wraps them all. */
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
/* The per-thread default stream ABI of cuMemMapArrayAsync (declared by cuda.h
 * only for per-thread builds). */
CUresult cuMemMapArrayAsync_ptsz(CUarrayMapInfo *mapInfoList, unsigned int count, CUstream hStream);
#undef cudaGetDriverEntryPoint
#undef cudaGetDriverEntryPointByVersion
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
				    enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
					 enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
					     unsigned long long flags,
					     enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
						  unsigned long long flags,
						  enum cudaDriverEntryPointQueryResult *driverStatus);

/* ---- resolve.c: the real functions ---- */
/* cuda.h maps these names to their newest ABI; the shim gates every ABI
 * (wrapped.def), and declares what cuda.h declares only for per-thread builds. */
#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync
#undef cuStreamWaitValue32
#undef cuStreamWaitValue64
#undef cuStreamWriteValue32
#undef cuStreamWriteValue64
#undef cuStreamBatchMemOp
#define DRV(sym, name, since)
#define RT(sym)
#define GATED(sym, name, since, params, args) CUresult sym params;
#define GATED_PTDS GATED
#include "wrapped.def"
#undef DRV
#undef RT

enum shim_fn {
#define DRV(sym, name, since) SHIM_FN_##sym,
#define RT(sym) SHIM_FN_##sym,
#define GATED(sym, name, since, params, args) SHIM_FN_##sym,
#define GATED_PTDS GATED
#include "wrapped.def"
#undef DRV
#undef RT
	SHIM_FN_COUNT
};

struct shim_real {
#define DRV(sym, name, since) __typeof__(&sym) sym;
#define RT(sym) __typeof__(&sym) sym;
#define GATED(sym, name, since, params, args) __typeof__(&sym) sym;
#define GATED_PTDS GATED
#include "wrapped.def"
#undef DRV
#undef RT
};

/* v rounded up to a multiple of to (> 0). */
static inline size_t round_up(size_t v, size_t to)
{
	return (v + to - 1) / to * to;
}

/* Real driver functions (NULL until resolved). */
extern struct shim_real real;

/* Driver functions the shim calls but does not wrap. */
struct shim_aux {
#define AUX(sym, required) __typeof__(&sym) sym;
#include "aux.def"
#undef AUX
};
extern struct shim_aux aux;
/* "CUDA_ERROR_..." for r, from the driver. */
const char *shim_cu_name(CUresult r);
/* The wrapper to hand out for name asked at CUDA version (flags: the
 * CU_GET_PROC_ADDRESS_* stream mode), NULL when the shim does not wrap it, or
 * SHIM_REFUSED when it is an ABI the shim cannot wrap (answer NOT_FOUND). */
void *shim_wrapper_for(const char *name, int version, unsigned long long flags);
#define SHIM_REFUSED ((void *)-1)
/* Resolve the driver's functions once. Returns false when libcuda.so.1 is missing. */
bool shim_resolve_driver(void);

/* ---- phase and identity (identity.c) ---- */
/* The phases are enum proto_phase (proto.h). */

struct shim_identity {
	struct cusnap_id id;
	pid_t pid;   /* getpid() when the identity was made */
	pid_t nspid; /* pid in the innermost namespace (== getpid()) */
	char control_dir[4096];
	char endpoint[4200];
	bool serving; /* the endpoint started: capabilities naming it can be redeemed */
};

/* The participant identity; made (and the endpoint started) on the first tracked
 * call. Returns NULL when tracking is refused in this process (a forked child of
 * a tracking process), with *why set. */
const struct shim_identity *shim_identity(const char **why);
/* The identity if it was made already (never makes one; takes no lock). */
const struct shim_identity *shim_self(void);

/* ---- tables (table.c): everything under tbl_lock ---- */

enum shim_role { SHIM_ROLE_CREATOR = PROTO_ROLE_CREATOR, SHIM_ROLE_IMPORTER = PROTO_ROLE_IMPORTER };

struct shim_access {
	CUmemLocation location;
	unsigned long long flags;
};

/* One driver allocation this process tracks (it created it, or imported it
 * through a capability). */
struct shim_alloc {
	uint64_t key;             /* table key, stable for the record's life */
	struct cusnap_id id;      /* allocation id (the creator's) */
	struct cusnap_id creator; /* creator participant id */
	struct cusnap_id token;   /* capability token (creators, once exported) */
	enum shim_role role;
	bool shared;
	unsigned shared_types; /* handle types it was exported as */
	size_t size;           /* bytes */
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle driver; /* the driver's handle of this allocation */
	bool driver_ref;                     /* the shim holds one driver reference (while handles > 0) */
	uint64_t value;                      /* its logical handle value (0 until the first) */
	struct shim_handle *handle;          /* that handle's table entry while handles > 0 */
	size_t handles;                      /* references to it (create/import + retains - releases) */
	size_t mappings;                     /* live tracked mappings */
	struct shim_mapping *maps;           /* those mappings (list through shim_mapping.sibling) */
	char *creator_endpoint;              /* importers: where the capability is redeemed */
	size_t granularity;                  /* bytes: the driver's minimum for its properties */
	int ctx_device;                      /* device of the context current at creation/import (-1: none) */
	size_t mc_binds;                     /* multicast binds of this memory (the shim keeps a reference meanwhile) */
	struct shim_mc *mc;                  /* non-NULL: this record is a multicast object, not memory */
	/* lifecycle (lifecycle.c) */
	bool holder;       /* an importer that holds the allocation for the group: its creator let go (§6.2) */
	bool detached;     /* prepare released the driver's allocation */
	bool native_ref;   /* native mode: the shim kept one driver reference for the native checkpoint */
	void *saved;       /* host mode: the bytes while detached */
	bool in_file;      /* file mode: the bytes are in the file PREPARE was given ... */
	uint64_t file_off; /* ... at this offset, */
	struct file_chunks *chunks; /* ... chunk by chunk (hostfile.c) */
};

/* One bind this process made into a multicast object. */
struct shim_mc_bind {
	size_t mc_offset, size;
	CUdevice device;           /* the member memory's device */
	struct shim_alloc *member; /* NULL: memory the shim does not track (refused at validation) */
	size_t member_offset;
	CUdeviceptr member_va; /* cuMulticastBindAddr: the address bound (0: cuMulticastBindMem) */
	bool detached;         /* unbound by PREPARE_MULTICAST */
};

/* What a multicast record (struct shim_alloc with mc set) adds. */
struct shim_mc {
	CUmulticastObjectProp prop; /* as the application asked: prop.size is the requested capacity */
	size_t used;                /* bytes: the highest offset bound or mapped (may pass prop.size
				     * where the driver rounded the capacity up) */
	CUdevice *added;            /* devices this process added */
	size_t nadded;
	struct shim_mc_bind *binds;
	size_t nbinds;
	bool fresh; /* rebuilt and not yet joined by this process's devices */
};

struct shim_handle {
	uint64_t value; /* what the application holds */
	struct shim_alloc *alloc;
};

struct shim_mapping {
	struct itree_node node; /* [address, address + size) */
	struct shim_alloc *alloc;
	size_t offset;
	unsigned long long flags;
	struct shim_access *access; /* merged, one entry per location */
	size_t naccess, access_cap;
	bool detached;                        /* unmapped by prepare; the reservation is kept */
	bool ungranted;                       /* mapped again, access not yet granted (struct grants) */
	struct shim_mapping *sibling, **back; /* the allocation's list of mappings */
};

struct shim_tables {
	pthread_mutex_t lock;
	struct hmap handles; /* logical value -> struct shim_handle */
	struct hmap allocs;  /* key -> struct shim_alloc */
	struct itree mappings;
	uint64_t next_value;
	uint64_t next_key;
};

extern struct shim_tables tbl;

/* Logical handle values carry this tag in their top 16 bits. */
#define SHIM_HANDLE_TAG 0x5ea1000000000000ULL
#define SHIM_HANDLE_TAG_MASK 0xffff000000000000ULL

struct shim_alloc *tbl_alloc_new(void);
void tbl_alloc_free(struct shim_alloc *a);
/* One more reference to a's logical handle (a->handles++), made on the first:
 * every reference has the same value. NULL when out of memory. */
struct shim_handle *tbl_handle_new(struct shim_alloc *a);
struct shim_handle *tbl_handle_get(CUmemGenericAllocationHandle value);
/* Drop one reference (a->handles--); the value leaves the table with the last. */
void tbl_handle_drop(struct shim_handle *h);
/* For a handle the caller's lookup did not find: CUDA_ERROR_INVALID_VALUE
 * (logged) when it carries the shim's tag (a stale or wrong-kind logical value
 * must never reach the driver), else CUDA_SUCCESS (a driver handle). */
CUresult tbl_refuse_tagged(const char *call, CUmemGenericAllocationHandle value);
/* A wrapper's start: the driver found, then value's record (a multicast
 * object's when multicast) in *h with tbl.lock held; or *h NULL, unlocked,
 * and CUDA_SUCCESS for a value the driver should have (not the shim's), an
 * error for a stale or wrong-kind logical one (tbl_refuse_tagged). */
CUresult tbl_lock_tracked(const char *call, CUmemGenericAllocationHandle value, bool multicast, struct shim_handle **h);
struct shim_mapping *tbl_mapping_at(uint64_t va);
/* Link m into (or out of) the list of its allocation's mappings. */
void tbl_mapping_link(struct shim_mapping *m);
void tbl_mapping_unlink(struct shim_mapping *m);

/* ---- contexts on the shim's own threads (context.c) ---- */
/* Make the primary context of dev current on this thread (retained until
 * ctx_leave_all). */
CUresult ctx_enter_device(int dev);
/* The calls it makes, as a failure names them. */
#define CTX_ENTER_CALLS "cuDevicePrimaryCtxRetain/cuCtxSetCurrent"
/* The device whose context the shim uses for a's driver calls. */
int ctx_device_of(const struct shim_alloc *a);
/* qsort order of struct shim_alloc pointers by ctx_device_of: work on a
 * list in this order switches context once per device, not per allocation. */
int ctx_by_device(const void *x, const void *y);
/* The device of the calling thread's current context, -1 when none. */
int ctx_current_device(void);
/* cuCtxSynchronize in the primary context of every device d with used[d]; the
 * failing device and call in *failed_dev, *failed_call. */
CUresult ctx_synchronize_devices(const bool *used, int n, int *failed_dev, const char **failed_call);
/* Mark used[d] for every device d < n whose primary context is active. */
void ctx_mark_active_devices(bool *used, int n);
/* ctx_synchronize_devices (used: PROTO_MAX_DEVICES entries) on a thread of its
 * own, waited for up to budget_ms: CUDA_ERROR_TIMEOUT past it (the thread
 * finishes by itself), the failing device and call in *failed_dev, *failed_call. */
CUresult ctx_synchronize_within(const bool *used, int budget_ms, int *failed_dev, const char **failed_call);
/* Leave the context and release what ctx_enter_device retained on this thread. */
void ctx_leave_all(void);

/* ---- the dispatch and the phase (dispatch.c; operations: include/cusnap/ops.def) ---- */
/* The phase (enum proto_phase); the application's tracked calls wait outside ACTIVE. */
int shim_phase(void);
/* What a wrapped call's body answers when a lifecycle step began after the
 * call passed the gate (before it changed anything): it is run again, from the
 * gate. Never returned to the application (no CUresult has this value). */
#define SHIM_RETRY ((CUresult)0x7fff5e7a)
/* The gate: while a lifecycle step is under way (the phase is not ACTIVE) the
 * application's tracked calls wait here, invisible to it, until the process is
 * active again (a resume or an undo); CUDA_ERROR_NOT_READY (logged) once its
 * rebuild failed. The shim's own threads pass. */
CUresult shim_gate_wait(void);
/* This thread is the shim's own (an endpoint thread): it never waits at the gate. */
void shim_own_thread(void);
/* A gated call (wrapped.def GATED) begins: once the gate is open, the calling
 * thread's slot with the call counted in flight (shim_work_end(slot) when the
 * driver returns); NULL with *rc CUDA_ERROR_NOT_READY once a rebuild failed,
 * or CUDA_ERROR_OUT_OF_MEMORY. */
struct work_slot;
struct work_slot *shim_work_begin(CUresult *rc);
void shim_work_end(struct work_slot *slot);
/* The gate closed (the phase not ACTIVE): wait up to budget_ms until no gated
 * call of another thread is under way. 0; -ETIMEDOUT (or -ENOSYS: no memory
 * barrier could reach the other threads) with the calls still under way in
 * *left. */
int shim_work_drain(int budget_ms, unsigned *left);
/* Under tbl.lock, before a tracked call changes anything: CUDA_SUCCESS;
 * SHIM_RETRY when a step began meanwhile; CUDA_ERROR_NOT_READY (logged) in
 * FAILED, or on the shim's own threads while a step is under way. */
CUresult shim_mutation_allowed(const char *call);
/* How many tracked changes were allowed so far (each allowed one bumps it
 * before it changes anything, under tbl.lock): a QUIESCE answering the count an
 * INSPECT answered says the topology is the one that INSPECT saw. */
uint64_t shim_generation(void);
/* The body of a wrapped call: body (an expression) run from the gate until
 * no step began under it, its result returned. */
#define SHIM_GATED(body)                            \
	do {                                        \
		CUresult gated_;                    \
		do {                                \
			gated_ = shim_gate_wait();  \
			if (gated_ == CUDA_SUCCESS) \
				gated_ = (body);    \
		} while (gated_ == SHIM_RETRY);     \
		return gated_;                      \
	} while (0)
struct proto_buf;
/* What a lifecycle step reports: its failure, or bytes copied and objects handled. */
struct life_result {
	char msg[600];
	uint64_t bytes;
	uint32_t count;
	bool file_digest; /* file content: file_crc is the file's CRC32C as PREPARE wrote it */
	uint32_t file_crc;
};
/* The descriptors sent with a reply, in order (EXPORT: one; EXPORT_MANY: one
 * per allocation). */
struct op_fds {
	int fd[PROTO_MAX_FDS];
	size_t n;
};
/* One operation being served. */
struct op_call {
	const uint8_t *payload; /* the request's records */
	size_t len;
	struct proto_buf *out; /* READ operations: the reply's records */
	struct op_fds *fds;    /* READ operations: descriptors sent with the reply */
	struct life_result r;  /* STEP operations */
	int in_fd;             /* a descriptor that came with the request (-1: none); closed after */
};
/* Serve operation op (the endpoint's one entry): the reply's records go to out,
 * descriptors to send with it to fds (none unless it succeeds). in_fd came
 * with the request (-1: none): only PREPARE and RESTORE_CREATORS take one (the
 * file of file content); the caller closes it. Returns a proto_status. */
int shim_serve(int op, const uint8_t *payload, size_t len, int in_fd, struct proto_buf *out, struct op_fds *fds);
/* A step that changed something failed: phase FAILED, r's message kept; returns rc. */
int shim_step_failed(struct life_result *r, int rc);
/* For a step that decides its phase itself (under the table lock). */
void shim_step_set_phase(int p);
/* An error record (message and the phase) for the reply. */
void shim_error_reply(struct proto_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define OP(name, value, kind, admitted, done, next) int serve_##name(struct op_call *c);
#include "cusnap/ops.def"
#undef OP
/* ---- unrestorable.c: what QUIESCE refuses while it is held ---- */
enum unrestorable {
	UNRESTORABLE_MULTICAST,  /* a multicast handle from a raw FD (a native checkpoint would hang on it) */
	UNRESTORABLE_FOREIGN,    /* memory imported from a raw FD (the driver would not restore it) */
	UNRESTORABLE_LEGACY_IPC, /* a legacy IPC handle opened from the driver's handle */
	UNRESTORABLE_KINDS
};
/* The object key (its handle or address) of kind is held: once more. */
void unrestorable_add(enum unrestorable kind, uint64_t key);
/* It is released once: was it noted? */
bool unrestorable_del(enum unrestorable kind, uint64_t key);
bool unrestorable_has(enum unrestorable kind, uint64_t key);
/* Event or memory-pool IPC was used (call): never checkpointable. */
void unrestorable_ipc_call(const char *call);
/* Why QUIESCE must refuse (the first kind held, in why), or false. */
bool unrestorable_refusal(char *why, size_t len);
void unrestorable_lock_for_fork(bool take);
/* Around fork (identity.c's handlers): m taken before, released after. */
void shim_lock_for_fork(pthread_mutex_t *m, bool take);

/* ---- lifecycle internals shared by lifecycle.c and mc_lifecycle.c ---- */
/* Record the failure: participant, object (a may be NULL) and what failed. */
void life_fail(struct life_result *r, const struct shim_alloc *a, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The context for a's driver calls made current on this thread (failure recorded in r). */
CUresult life_enter(const struct shim_alloc *a, struct life_result *r);
/* Mappings mapped again whose access is granted later, all together
 * (remap.c): one cuMemSetAccess per run of adjacent mappings with the same
 * access, as the application may have granted a range of many at once. */
struct grants {
	struct shim_mapping **m;
	size_t n, cap;
};
/* Map every detached mapping of a at its recorded address; with g, its access
 * is left to life_grant (the mapping stays detached, marked ungranted), else
 * granted here, mapping by mapping. */
CUresult life_attach_mappings(struct shim_alloc *a, struct grants *g, struct life_result *r);
/* Grant what g holds (skipping what was unmapped since) and empty it; on a
 * failure every mapping of g not yet granted is unmapped again. */
CUresult life_grant(struct grants *g, struct life_result *r);
void grants_free(struct grants *g);
/* Unmap every mapping of a (an ungranted one too) and mark it detached. */
CUresult life_detach_mappings(struct shim_alloc *a, struct life_result *r);
CUresult life_release_ref(struct shim_alloc *a, struct life_result *r);
void life_drop_spare_ref(struct shim_alloc *a);
/* Host-mode copies through the arena (hostcopy.c), for allocations that hold a
 * driver handle. hostcopy_save gives each a->saved and fills it, all or none;
 * hostcopy_load copies a->saved back; hostcopy_forget gives a->saved back (and
 * forgets a file copy). Caller holds tbl.lock. */
CUresult hostcopy_save(struct shim_alloc **list, size_t n, struct life_result *r);
CUresult hostcopy_load(struct shim_alloc **list, size_t n, struct life_result *r);
void hostcopy_forget(struct shim_alloc *a);
/* The arena unmapped if it holds no copy (file content keeps none). */
void hostcopy_release_idle(void);
/* One batch of copies one way, as a job: each allocation mapped where its
 * device can reach it (va), then copy() called with its device's stream;
 * every lane's stream waited for and its mappings taken down at the end. */
struct copy_job {
	bool to_device;
	bool pin_arena; /* the arena registered with the driver for the batch */
	CUresult (*copy)(struct copy_job *j, struct shim_alloc *a, CUdeviceptr va, CUstream s, struct life_result *r);
	/* Instead of copy: each device's allocations (list[i] through va[i]) at
	 * once, on a thread of the device's own, its context current there. */
	CUresult (*run_lane)(struct copy_job *j, int dev, struct shim_alloc **list, const CUdeviceptr *va, size_t n,
			     struct life_result *r);
};
CUresult hostcopy_batch(struct shim_alloc **list, size_t n, struct copy_job *j, struct life_result *r);
/* Its memory is on the host: the CPU copies it through va. */
bool hostcopy_on_host(const struct shim_alloc *a);
/* File content (hostfile.c): the bytes of list[0..n) written to fd (each
 * a->in_file, its offset and CRC32C set; all or none), checked to be there
 * (hostfile_check: before anything is made), read back. Caller holds tbl.lock. */
CUresult hostfile_save(struct shim_alloc **list, size_t n, int fd, struct life_result *r);
CUresult hostfile_check(struct shim_alloc **list, size_t n, int fd, struct life_result *r);
CUresult hostfile_load(struct shim_alloc **list, size_t n, int fd, struct life_result *r);
/* a's bytes are no longer in a file: its chunk records go. */
void hostfile_forget(struct shim_alloc *a);
/* The ring file content moves lane_bytes through, per device: slots of
 * bytes each (SNAPSHOT_CUDA_VMM_RING=SLOTSxMIB; else 4 x 16 MiB, less for a
 * lane of less than 512 MiB; DESIGN.md §11.1). */
#define SHIM_RING_MAX_SLOTS 64
void shim_ring(size_t lane_bytes, size_t *slots, size_t *bytes);
/* A thread of the shim's own (every signal blocked in it). 0 or -errno. */
int shim_thread_start(pthread_t *t, void *(*fn)(void *), void *arg, bool detached);
/* Multicast steps (mc_lifecycle.c); the table lock is taken inside. */
int mc_prepare(struct life_result *r);
int mc_restore_create(const uint8_t *payload, size_t len, struct life_result *r);
int mc_restore_import(const uint8_t *payload, size_t len, struct life_result *r);
int mc_restore_bind(const uint8_t *payload, size_t len, struct life_result *r);
/* Translate recorded devices by map[old] = new. Caller holds tbl.lock. */
void mc_apply_device_map(struct shim_alloc *a, const int *map);

/* ---- the wrapped calls (vmm.c, multicast.c) ---- */
/* Before a call that starts tracking something: this process's identity in
 * *me and CUDA_SUCCESS, or why not: CUDA_ERROR_NOT_SUPPORTED (no identity here,
 * logged) or CUDA_ERROR_NOT_READY (a checkpoint is under way). */
CUresult tracking_begin(const char *call, const struct shim_identity **me);
/* True (logged) in a forked child of a tracking process. */
bool refuse_in_fork_child(const char *call);
/* Refusals common to every call on a tracked object: CUDA_SUCCESS to go on. */
CUresult tracked_call_allowed(const char *call);
/* The record of what this process just created (driver handle drv, size
 * bytes) and its first logical handle, stored in *handle. NULL when out of
 * memory, drv then released. Caller holds tbl.lock. */
struct shim_alloc *track_created(const struct shim_identity *me, CUmemGenericAllocationHandle drv, size_t size,
				 CUmemGenericAllocationHandle *handle);
/* A multicast record's extra part, for an object of num_devices and size bytes. */
struct shim_mc *mc_record_new(unsigned num_devices, size_t size);
/* The driver's minimum multicast granularity for prop (0 when it will not say). */
size_t mc_granularity(const CUmulticastObjectProp *prop);

/* Free a record nothing refers to any more (handles, mappings, binds). */
void forget_alloc(struct shim_alloc *a);

/* ---- fork safety ---- */
extern bool shim_forked_child; /* a child of a process that tracked state */

/* ---- the cuMemAlloc adapter (legacy.c) and legacy IPC (ipc.c) ---- */
extern bool shim_ipc_adapter;       /* SNAPSHOT_CUDA_VMM_IPC (default on) */
extern bool shim_export_many;       /* SNAPSHOT_CUDA_VMM_EXPORT_MANY: serve EXPORT_MANY (default on) */
extern pthread_mutex_t legacy_lock; /* both files' state; taken before identity_lock and tbl.lock */
/* An adapter chunk's export, made at its first cuIpcGetMemHandle. */
struct legacy_export {
	bool done;
	struct cusnap_id creator, alloc_id, token;
};
/* A block of the adapter (or an opened IPC handle) as the application sees it. */
struct legacy_block {
	CUdeviceptr start;
	size_t bytes;
	uint64_t id;
	CUcontext ctx;
	CUdeviceptr chunk_start; /* blocks only: */
	CUmemGenericAllocationHandle chunk_handle;
	struct legacy_export *exp;
};
/* The adapter's block holding ptr (caller holds legacy_lock). */
bool legacy_block_of(CUdeviceptr ptr, struct legacy_block *out);
/* The opened IPC handle holding ptr (caller holds legacy_lock). */
bool ipc_range_of(CUdeviceptr ptr, struct legacy_block *out);
/* Map all size bytes of the logical handle h at a new address (aligned to
 * device dev's granularity) with access d[0..n), through the wrappers (the
 * mapping is tracked): CUDA_SUCCESS with *va, or the failing call's result
 * with nothing left. legacy_unmap undoes it (the reservation is kept when the
 * unmap fails). */
CUresult legacy_map_new(CUmemGenericAllocationHandle h, size_t size, int dev, const CUmemAccessDesc *d, size_t n,
			CUdeviceptr *va);
CUresult legacy_unmap(CUdeviceptr va, size_t size);
void legacy_lock_for_fork(bool lock);

/* ---- capabilities (capability.c) ---- */
struct shim_cap {
	struct cusnap_id creator;
	struct cusnap_id alloc_id;
	struct cusnap_id token;
	char endpoint[4200];
};
/* Is fd a capability? Fills *cap when it is. */
bool cap_parse(int fd, struct shim_cap *cap);
/* Export a tracked allocation as a POSIX capability without making its FD (as
 * cuMemExportToShareableHandle does, marking it shared): what names it in *cap. */
CUresult shim_export_capability(const char *call, CUmemGenericAllocationHandle handle, struct shim_cap *cap);
/* Redeem cap and track the import (what cuMemImportFromShareableHandle does
 * with a capability FD): the logical handle, the size in *size (when given). */
struct shim_cap;
CUresult shim_import_cap(const char *call, const struct shim_cap *cap, CUmemGenericAllocationHandle *handle,
			 size_t *size);
/* What EXPORT says of the object it hands out. */
struct shim_export_info {
	size_t size;         /* bytes (a multicast object: its requested capacity) */
	unsigned mc_devices; /* a multicast object's numDevices; 0 for memory */
};
/* Redeem cap at its creator: returns a fresh driver FD or -1 (message in err). */
int cap_redeem(const struct shim_cap *cap, struct shim_export_info *info, char *err, size_t errlen);
/* The same on an open connection *sockp to the creator (opened when < 0, closed
 * and reset after a failure): a restore redeems many capabilities on one. */
int cap_redeem_on(int *sockp, const struct shim_cap *cap, struct shim_export_info *info, char *err, size_t errlen);
/* One of many capabilities a restore redeems (thousands: kept small): the
 * creator's endpoint (the caller's string, shared by its capabilities, alive
 * throughout), the allocation and its token in; fd (or -1 and err, malloc'ed,
 * NULL when even that failed) and info out; key and dev are the caller's. */
struct redeem {
	const char *endpoint;
	struct cusnap_id alloc_id, token;
	uint64_t key;
	int dev;
	int fd;
	struct shim_export_info info;
	char *err;
};
typedef void (*redeem_done)(struct redeem *it, void *arg);
/* Redeem it[0..n), sorted so that the capabilities of one creator are
 * together: one connection per creator, EXPORT_MANY batches (EXPORT pipelined
 * for a creator before 1.6). done(item, arg) is called for each in order as
 * it comes; its FD is closed and its err freed after done returns. */
void cap_redeem_all(struct redeem *it, size_t n, redeem_done done, void *arg);
/* A connection to another shim's endpoint (counted): a descriptor or -errno. */
int shim_connect(const char *endpoint);
/* The two halves of one redemption on a connection, for pipelining: requests go
 * out ahead of their replies, which come back in order. */
int cap_export_send(int sock, const struct shim_cap *cap);
/* The same, forwarded hops times (a creator that let go asks its peers). */
int cap_export_send_hop(int sock, const struct shim_cap *cap, unsigned hops);
int cap_export_recv(int sock, const struct shim_cap *cap, struct shim_export_info *info, char *err, size_t errlen);
/* A capability FD for the allocation named by these fields; -errno on failure. */
int cap_make(const struct cusnap_id *creator, const struct cusnap_id *alloc_id, const struct cusnap_id *token,
	     const char *endpoint);
/* The same, a dup of one made before when it is still kept. Caller holds tbl.lock. */
int cap_get(const struct cusnap_id *creator, const struct cusnap_id *alloc_id, const struct cusnap_id *token,
	    const char *endpoint);
/* Close what is kept for alloc_id (its record goes), or everything (a forked
 * child). Caller holds tbl.lock. */
void cap_forget(const struct cusnap_id *alloc_id);
void cap_forget_all(void);

/* ---- the export table (exports.c) ---- */
/* The one place a tracked allocation's driver handle is set or dropped: its
 * export entry follows in the same step. Caller holds tbl.lock. */
/* a now holds driver (one reference). 0, -ENOMEM or -EEXIST (its entry). */
int alloc_set_driver(struct shim_alloc *a, CUmemGenericAllocationHandle driver);
/* Drop the reference a holds, if any; a failure leaves it held. */
CUresult alloc_release_driver(struct shim_alloc *a);
/* Publish a creator's record once it has a token (0, -ENOMEM or -EEXIST). */
int exports_publish(const struct shim_alloc *a);
/* Its entry goes with the record. */
void exports_forget(const struct shim_alloc *a);
struct req_hold;
/* A creator's entry remembers this many peers; this many tombstones at most. */
#define EXPORT_PEERS 16
#define EXPORT_TOMBSTONES 65536
/* PREPARE's holds: every allocation participant me (endpoint self) created and
 * another carries has its holder first among its tombstone's peers; the
 * tombstones of what no one holds go. 0 or -ENOMEM. */
int exports_set_forwards(const struct req_hold *holds, size_t n, const struct cusnap_id *me, const char *self);
/* The participants that redeemed multicast object alloc_id: a malloc'd array in
 * *out (NULL when none), its length returned. */
size_t exports_importers(const struct cusnap_id *alloc_id, struct cusnap_id **out);
struct export_request {
	struct cusnap_id alloc_id, token;
	struct cusnap_id who;     /* the redeemer (zero: not said) */
	const char *who_endpoint; /* its endpoint (NULL: not said) */
	unsigned hops;            /* forwarded by a creator that let go: served here or refused */
	bool in_caller_context;   /* an application thread: its current context serves the export */
	bool keep_context;        /* an endpoint thread: the context entered stays until the connection ends */
};
/* Serve one EXPORT: a fresh driver FD in *fd and what it is in *info, or a
 * proto_status with the reason in err. Takes exp_lock, never tbl.lock. */
int exports_export(const struct export_request *q, struct shim_export_info *info, int *fd, char *err, size_t errlen);
/* Take (true) or release (false) the exports lock around fork, after tbl.lock. */
void exports_lock_for_fork(bool take);

/* ---- the endpoint (endpoint.c, records.c) ---- */
int endpoint_start(const struct shim_identity *self);
void endpoint_after_fork_child(void);

/* Deadline for one endpoint connection, ms (SNAPSHOT_CUDA_VMM_DEADLINE_MS). */
int shim_deadline_ms(void);

#endif
