/* SPDX-License-Identifier: MIT */
/* cuemu internals: the process-wide state of the CPU-backed driver. */
#ifndef CUSNAP_EMU_EMU_H
#define CUSNAP_EMU_EMU_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>

#include <cuda.h>

#include "cusnap/counters.h"
#include "cusnap/hmap.h"
#include "cusnap/itree.h"

#define EMU_API __attribute__((visibility("default")))
#define EMU_MAX_DEVICES 16
#define EMU_DRIVER_VERSION 13000
/* Shared memory per block a kernel may opt into (bytes; an H100/H200's 227 KiB),
 * and the default (without opting in). */
#define EMU_SHARED_OPTIN (227 * 1024)
#define EMU_SHARED_PER_BLOCK (48 * 1024)

/* Flags of api.def. */
#define EMU_NOINIT 1u
#define EMU_NOGATE 2u
#define EMU_PTDS 4u
#define EMU_NEEDCTX 8u
#define EMU_NOREVOKE 16u
#define EMU_PTSZ 32u

enum emu_fn {
#define X(sym, name, ver, flags) EMU_FN_##sym,
#include "api.def"
#undef X
	EMU_FN_COUNT
};
_Static_assert((int)EMU_FN_COUNT <= (int)COUNT_MAX_CALLS, "one counter per entry point (counters.h)");

/* In driver order: a later profile keeps what an earlier one added unless it says otherwise. */
enum emu_profile {
	EMU_PROFILE_R580, /* default: r570/r580 behaviour */
	EMU_PROFILE_R610, /* checkpoint jobs: legacy IPC checkpoints inside one, in its order (job.c) */
	EMU_PROFILE_R615, /* natively restored allocations lose exportability; multicast rounds to 512 MiB */
};

struct emu_device {
	CUuuid uuid;
	size_t capacity; /* bytes */
	size_t used;     /* bytes of device backing held by this process */
	char model[64];  /* cuDeviceGetName's answer: "cuemu", or CUEMU_MODEL's */
	struct emu_ctx *primary;
	unsigned primary_refs;
};

struct emu_ctx {
	int device;
	bool primary;
	struct emu_ctx *destroyed_next; /* destroyed contexts stay allocated and listed (stale handles fail) */
	atomic_bool active; /* primary: retained at least once since the last reset (read without emu.lock) */
};

enum emu_obj_kind { EMU_OBJ_MEMORY, EMU_OBJ_MULTICAST };

struct emu_mc_binding {
	int device;
	size_t mc_offset;
	size_t size;
	struct emu_alloc *member; /* holds one map_ref on it */
	size_t member_offset;
};

/* Shared between every process holding the multicast object (it lives in the
 * object's memfd), so a bind in one process can wait for devices added in another. */
struct emu_mc_shared {
	uint32_t magic;
	uint32_t num_devices;
	uint64_t size;      /* bytes, after rounding */
	uint64_t requested; /* bytes, as asked by cuMulticastCreate */
	_Atomic uint64_t added_mask;
};

/* One driver allocation handle object of this process: a cuMemCreate, an import,
 * or a multicast object. */
struct emu_alloc {
	uint64_t handle;
	enum emu_obj_kind kind;
	int fd;                   /* memfd; -1 while checkpointed */
	size_t size;              /* bytes */
	CUmemAllocationProp prop; /* prop.location.id is the device */
	unsigned handle_refs;     /* create/import/retain references */
	unsigned map_refs;        /* mappings and multicast bindings */
	bool imported;            /* bytes came from another process's export */
	bool native_restored;     /* brought back by cuCheckpointProcessRestore */
	bool counted;             /* size is charged to its device's used bytes */
	void *saved;              /* bytes while checkpointed */
	bool ckpt_unbacked;       /* checkpointed before it ever had a memfd (nothing to save) */
	bool ipc_exported;        /* a cuIpcGetMemHandle named it: inside a job it keeps its memfd */
	bool ipc_peer;            /* opened by cuIpcOpenMemHandle: inside a job, the exporter's memory */
	/* multicast objects */
	struct emu_mc_shared *mc;
	struct emu_mc_binding *bindings;
	size_t nbindings;
};

struct emu_reservation {
	struct itree_node node;
	size_t mappings;
};

struct emu_mapping {
	struct itree_node node;
	struct emu_alloc *alloc;
	size_t offset;                         /* bytes into the allocation */
	unsigned char access[EMU_MAX_DEVICES]; /* CUmemAccess_flags per device */
	unsigned char host_access;             /* CUmemAccess_flags of the CPU (HOST/HOST_NUMA locations) */
	bool placed; /* the memory is mmapped at the range (from its first grant, or a native restore) */
};

/* Does m hold its range on the host (so that unmapping it must revoke it)? A
 * memory mapping only once placed; a multicast one from the start. */
static inline bool emu_mapping_holds_range(const struct emu_mapping *m)
{
	return m->placed || m->alloc->kind != EMU_OBJ_MEMORY;
}

#define EMU_MAX_NUMA_NODES 64

/* Host memory from cuMemCreate (HOST_NUMA or HOST location): no device backing. */
static inline bool emu_on_host(const CUmemAllocationProp *p)
{
	return p->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA || p->location.type == CU_MEM_LOCATION_TYPE_HOST;
}

/* The memfd kind that names memory at a location ("mem", "hnuma", "host"). */
static inline const char *emu_mem_kind(const CUmemAllocationProp *p)
{
	return p->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? "hnuma"
	       : p->location.type == CU_MEM_LOCATION_TYPE_HOST    ? "host"
								  : "mem";
}

struct emu_state {
	pthread_mutex_t lock; /* everything below */
	bool initialized;
	bool forked_after_init; /* a fork child of an initialised process */
	enum emu_profile profile;
	int ndev;
	int driver_version; /* cuDriverGetVersion: EMU_DRIVER_VERSION, or CUEMU_DRIVER_VERSION */
	size_t granularity;
	unsigned mc_timeout_ms;
	bool require_context; /* CUEMU_REQUIRE_CONTEXT=1: EMU_NEEDCTX calls need a current context */
	struct emu_device dev[EMU_MAX_DEVICES];
	struct hmap allocs; /* handle -> struct emu_alloc */
	uint64_t next_handle;
	uint64_t next_memfd;
	struct itree reservations;
	struct itree mappings;
	struct itree legacy; /* cuMemAlloc allocations (memalloc.c) */
	struct itree pinned; /* cuMemHostRegister ranges (vmm.c) */
	size_t multicast_objects;
	size_t ipc_opened;    /* cuIpcOpenMemHandle mappings open in this process (memalloc.c) */
	bool ipc_exported;    /* a cuIpcGetMemHandle succeeded in this process */
	bool has_context;     /* a context or device memory exists: a CUDA process */
	bool kernels_refused; /* CUEMU_KERNELS=refuse: every launch fails (kernels never run here) */
	/* The knobs for the tests' stalls and faults (emu/README.md), read with
	 * the rest in init.c (emu_config); CUEMU_EXPORT_STALL_MS alone is read
	 * where it acts, at each export (a test sets it for one call): */
	unsigned ckpt_stall_ms; /* CUEMU_CKPT_STALL_MS: each native checkpoint stalls so long */
	char run_dir[4096];     /* CUEMU_RUN_DIR: the checkpoint servers' sockets ("": /tmp/cuemu-UID) */
	char fault_arm[4096];   /* CUEMU_FAULT_ARM: faults count while this file exists ("": always) */
};

extern struct emu_state emu;
extern __thread struct emu_ctx *emu_current;

/* init.c: read CUEMU_* (once). */
void emu_config(void);

/* gate.c: every API entry point goes through emu_enter/emu_leave. */
CUresult emu_enter(enum emu_fn fn);
void emu_leave(void);
/* Async work accounting for the checkpoint lock (streams). */
void emu_async_begin(void);
void emu_async_end(void);
/* Checkpoint side (ckpt_server.c runs these on the server thread). */
CUresult emu_gate_lock(unsigned timeout_ms);
CUresult emu_gate_unlock(void);
CUprocessState emu_gate_state(void);
void emu_gate_set(CUprocessState s);

#define EMU_CALL(sym, expr)                                 \
	do {                                                \
		CUresult emu_rc_ = emu_enter(EMU_FN_##sym); \
		if (emu_rc_ == CUDA_SUCCESS) {              \
			emu_rc_ = emu_fault_after((expr));  \
			emu_leave();                        \
		}                                           \
		return emu_rc_;                             \
	} while (0)

/* An entry point whose whole work is one answer into its out argument
 * (CUDA_ERROR_INVALID_VALUE without one). */
#define EMU_ANSWER(sym, type, value)                                                            \
	EMU_API CUresult sym(type *out)                                                         \
	{                                                                                       \
		EMU_CALL(sym, out ? (*out = (value), CUDA_SUCCESS) : CUDA_ERROR_INVALID_VALUE); \
	}

/* fault.c */
void emu_fault_parse(const char *spec);
/* Returns the injected result when this call of fn must fail, else CUDA_SUCCESS. */
CUresult emu_fault_check(enum emu_fn fn);
/* The result of the call that just ran (rc), or the error of an "after" fault
 * that fired for it. */
CUresult emu_fault_after(CUresult rc);
const char *emu_fn_name(enum emu_fn fn);
/* Append one line (printf-style) to the file named by environment variable
 * env, in one O_APPEND write (unset: nothing); best effort. */
void emu_record(const char *env, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* vmm.c */
struct emu_alloc *emu_alloc_get(CUmemGenericAllocationHandle h);
/* The extended attribute of an allocation's memfd naming what an importer needs. */
#define MEMFD_XATTR "user.cuemu.name"
/* vmm.c, for vmm_share.c: a new allocation of kind over fd (its backing), one freed
 * (the last reference gone), and a properties struct checked as cuMemCreate checks it. */
struct emu_alloc *emu_alloc_new(enum emu_obj_kind kind, int fd, size_t size, const CUmemAllocationProp *prop);
void emu_alloc_free(struct emu_alloc *a);
CUresult emu_check_prop(const CUmemAllocationProp *prop);
/* Give memory a's memfd if it has none yet (allocations are backed when first
 * mapped, exported or bound). Caller holds emu.lock. 0 or -errno. */
int emu_backing(struct emu_alloc *a);
/* Live memory allocations of this process (not multicast objects). */
int emu_live_memory(void);
/* The same, exported for the test suites (not a CUDA entry point). */
EMU_API int cuemu_live_allocations(void);
/* Bytes of memory mappings (placed: only those placed at their range). */
EMU_API unsigned long long cuemu_mapped_bytes(int placed);
struct emu_mapping *emu_mapping_at(uint64_t va);
int emu_memfd(const char *kind, int device, unsigned types, size_t size);
/* Set the protection of a memory mapping from its merged access list;
 * prot_before: what it had (PROT_NONE: nothing of it can have been faulted in),
 * or -1 when unknown. The first grant places the memory at the range. */
int emu_mapping_apply(struct emu_mapping *m, int prot_before);
int emu_mapping_prot(const struct emu_mapping *m);
void emu_alloc_unref(struct emu_alloc *a);
void emu_mark_cuda_process(void);

/* vmm.c internals, each taking emu.lock itself (callers hold none). */
CUresult emu_address_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr);
CUresult emu_address_free(CUdeviceptr ptr, size_t size);
CUresult emu_mem_create(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			unsigned long long flags);
CUresult emu_mem_release(CUmemGenericAllocationHandle h);
CUresult emu_mem_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
		     unsigned long long flags);
CUresult emu_mem_unmap(CUdeviceptr ptr, size_t size);
/* Import an exported memfd (our own exports only; fd stays the caller's). */
CUresult emu_import_fd(CUmemGenericAllocationHandle *handle, int fd);

/* job.c: checkpoint jobs (CUDA_CHECKPOINT_JOB_FILE), the r610 rules. */
/* Join the job the environment names (once, when the process gets a context). */
void emu_job_join(void);
/* This process is in a job and the profile applies the job's rules. */
bool emu_job_rules(void);
/* The job a controller named in its own environment (0: none). */
uint64_t emu_job_caller_key(void);
/* Record a transition of this process in its job file (nothing outside a job). */
void emu_job_note(const char *what);
/* May this process be checkpointed now, for a caller in job caller (0: none)?
 * CUDA_SUCCESS or CUDA_ERROR_NOT_SUPPORTED (logged, with the rule). */
CUresult emu_job_may_checkpoint(uint64_t caller, bool uses_ipc);
/* May it be restored now (checkpoint order)? */
CUresult emu_job_may_restore(void);
/* One member at a time: around a checkpoint or restore. */
CUresult emu_job_begin(void);
void emu_job_end(void);
CUresult emu_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count);

/* multicast.c */
int emu_mc_layout(struct emu_mapping *m);
void emu_mc_destroy(struct emu_alloc *a);
/* Wait, without emu.lock, until every device of the team was added (bounded by
 * CUEMU_MULTICAST_TIMEOUT_MS: CUDA_ERROR_SYSTEM_NOT_READY). */
CUresult emu_mc_wait_team(struct emu_mc_shared *mc);

/* copy.c */
void emu_streams_sync_all(void);
/* Queue a step that does nothing on stream h (a kernel launch: ordered, no
 * effect on memory). */
CUresult emu_stream_enqueue_nothing(CUstream h);
/* Queue fn(arg) on stream h, run by its worker when reached (the null stream:
 * now); cuemu's own work, not a client's host function. */
CUresult emu_stream_enqueue_call(CUstream h, void (*fn)(void *), void *arg);
/* Is h a stream of this process (or a null stream)? */
bool emu_stream_known(CUstream h);

/* memalloc.c: cuMemAlloc memory of device dev (pool: the memory pool it came
 * from, NULL for cuMemAlloc), and its free. */
CUresult emu_legacy_alloc(CUdeviceptr *dptr, size_t bytes, int dev, void *pool);
CUresult emu_legacy_free(CUdeviceptr ptr);
/* Is ptr the start of such memory of this process? Then its pool (or NULL)
 * and the bytes asked for. */
bool emu_legacy_info(CUdeviceptr ptr, void **pool, size_t *bytes);
/* pool.c: memory of pool (bytes asked for) was freed. */
void emu_pool_released(void *pool, size_t bytes);

/* ckpt_server.c */
int emu_server_start(void);

/* revoke.c (caller holds emu.lock): [start, start + len) no longer mapped,
 * made inaccessible on the host before the next call that could touch it. */
void emu_revoke(CUdeviceptr start, size_t len);
/* Every queued range made inaccessible now. */
void emu_revoke_flush(void);
/* Whether any range waits (read without the lock). */
bool emu_revoke_pending(void);

const char *emu_result_name(CUresult r);

/* cuemu's mapping syscalls (the kernel work a driver's VMM calls cost),
 * counted under CUSNAP_COUNT (counters.h). */
static inline void *emu_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	count_add(COUNT_EMU_MMAP);
	return mmap(addr, len, prot, flags, fd, off);
}

static inline int emu_munmap(void *addr, size_t len)
{
	count_add(COUNT_EMU_MUNMAP);
	return munmap(addr, len);
}

static inline int emu_mprotect(void *addr, size_t len, int prot)
{
	count_add(COUNT_EMU_MPROTECT);
	return mprotect(addr, len, prot);
}

static inline int emu_madvise(void *addr, size_t len, int advice)
{
	count_add(COUNT_EMU_MADVISE);
	return madvise(addr, len, advice);
}

#endif
