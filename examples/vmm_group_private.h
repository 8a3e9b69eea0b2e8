/* SPDX-License-Identifier: MIT */
/* vmm_group's private memory (VMM_GROUP_PRIVATE=1): what an inference engine
 * holds of its own beside what it shares, each process on its device, all of
 * it tracked by the interposer and never exported (DESIGN.md §6.2):
 *   - weights: two cuMemAlloc buffers (the route cudaMalloc takes), small
 *     enough to share one of the adapter's chunks;
 *   - an expandable segment, as PyTorch grows one: one reservation, three
 *     allocations mapped one after another into it, one cuMemSetAccess over
 *     the three, bytes written across their boundaries;
 *   - a KV cache reserved and barely used: KV_BLOCKS blocks of 2 MiB of which
 *     the first holds bytes and the others only zeros.
 * VMM_GROUP_WEIGHTS, VMM_GROUP_KV and VMM_GROUP_KV_USED (bytes) size the second
 * weights buffer, the KV cache and what of it is written (bench/datapath.sh's
 * worker shape).
 * Every word written is PRIVATE_MARK (the device's memsets and copies: no copy
 * of it stays in host memory), so that a test can look for it in CRIU's images.
 * After the release each process checks the bytes, that its pointers, logical
 * handles and access are what they were, and prints how many bytes it checked. */
#ifndef VMM_GROUP_PRIVATE_H
#define VMM_GROUP_PRIVATE_H

#define PRIVATE_MARK 0x5ec0de77u
#define KV_BLOCKS 4
#define KV_BLOCK (2u << 20)

static struct {
	bool on;
	CUdeviceptr w1, w2; /* cuMemAlloc buffers */
	size_t w1_size, w2_size, kv_size, kv_used;
	CUdeviceptr seg; /* the expandable segment: 3 allocations of g */
	size_t g;
	uint64_t seg_handles[3]; /* the logical handles the application holds */
	CUdeviceptr kv;
	CUmemGenericAllocationHandle kv_handle;
	int device;
} own;

static int private_fill(CUdeviceptr at, size_t bytes)
{
	CU(cuMemsetD32(at, PRIVATE_MARK, bytes / 4));
	return 0;
}

/* Environment variable name as a size in bytes, else def. */
static size_t env_bytes(const char *name, size_t def)
{
	const char *e = getenv(name);
	return e && *e ? (size_t)strtoull(e, NULL, 0) : def;
}

static int private_setup(int device)
{
	const char *e = getenv("VMM_GROUP_PRIVATE");
	if (!(own.on = e && !strcmp(e, "1")))
		return 0;
	own.device = device;
	own.w1_size = 64u << 10;
	own.w2_size = round_up_to(env_bytes("VMM_GROUP_WEIGHTS", 128u << 10), 4096);
	CU(cuMemAlloc(&own.w1, own.w1_size));
	CU(cuMemAlloc(&own.w2, own.w2_size));
	if (private_fill(own.w1, own.w1_size) < 0 || private_fill(own.w2, own.w2_size) < 0)
		return -1;
	CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device},
				 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
	CU(cuMemGetAllocationGranularity(&own.g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CU(cuMemAddressReserve(&own.seg, 4 * own.g, 0, 0, 0));
	for (int i = 0; i < 3; i++) {
		CUmemGenericAllocationHandle h;
		CU(cuMemCreate(&h, own.g, &p, 0));
		CU(cuMemMap(own.seg + (CUdeviceptr)i * own.g, own.g, 0, h, 0));
		own.seg_handles[i] = (uint64_t)h;
		CU(cuMemRelease(h)); /* (the mapping keeps it, as PyTorch's segments do) */
	}
	CUmemAccessDesc rw = {.location = p.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CU(cuMemSetAccess(own.seg, 3 * own.g, &rw, 1));
	if (private_fill(own.seg, 3 * own.g) < 0)
		return -1;
	size_t kv = own.kv_size = round_up_to(env_bytes("VMM_GROUP_KV", KV_BLOCKS * KV_BLOCK), own.g);
	own.kv_used = round_up_to(env_bytes("VMM_GROUP_KV_USED", KV_BLOCK), 4096);
	if (own.kv_used > kv)
		own.kv_used = kv;
	CU(cuMemCreate(&own.kv_handle, kv, &p, 0));
	CU(cuMemAddressReserve(&own.kv, kv, 0, 0, 0));
	CU(cuMemMap(own.kv, kv, 0, own.kv_handle, 0));
	CU(cuMemSetAccess(own.kv, kv, &rw, 1));
	CU(cuMemsetD8(own.kv, 0, kv));
	return private_fill(own.kv, own.kv_used);
}

/* Every word of [at, at + bytes) PRIVATE_MARK (want) or zero (!want): 0, or
 * -1 said. */
static int private_check(const char *what, CUdeviceptr at, size_t bytes, bool want)
{
	uint32_t *buf = malloc(bytes);
	check(buf != NULL, "out of memory");
	if (!buf)
		return -1;
	CUresult rc = cuMemcpyDtoH(buf, at, bytes);
	check(rc == CUDA_SUCCESS, "%s: cuMemcpyDtoH failed: %s", what, cuname(rc));
	size_t bad = bytes / 4;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < bytes / 4; i++) {
		if (buf[i] != (want ? PRIVATE_MARK : 0u)) {
			bad = i;
			break;
		}
		if (i == bytes / 4 - 1)
			bad = SIZE_MAX;
	}
	if (bad != SIZE_MAX)
		check(0, "%s: word %zu is %#x, want %#x", what, bad, bad < bytes / 4 ? buf[bad] : 0,
		      want ? PRIVATE_MARK : 0u);
	free(buf);
	return bad == SIZE_MAX ? 0 : -1;
}

static void private_verify(void)
{
	if (!own.on)
		return;
	int failed = private_check("weights (cuMemAlloc)", own.w1, own.w1_size, true) |
		     private_check("weights (cuMemAlloc)", own.w2, own.w2_size, true) |
		     private_check("the expandable segment", own.seg, 3 * own.g, true) |
		     private_check("the KV cache's used blocks", own.kv, own.kv_used, true) |
		     (own.kv_size > own.kv_used ? private_check("the KV cache's unused blocks", own.kv + own.kv_used,
								own.kv_size - own.kv_used, false)
						: 0);
	/* The cuMemAlloc pointers still what the driver says of them. */
	CUdeviceptr base = 0;
	size_t len = 0;
	CUresult rc = cuMemGetAddressRange(&base, &len, own.w2 + 100);
	check(rc == CUDA_SUCCESS && base == own.w2 && len == own.w2_size,
	      "cuMemGetAddressRange of a cuMemAlloc buffer: %s, %#llx + %zu (want %#llx + %zu)", cuname(rc),
	      (unsigned long long)base, len, (unsigned long long)own.w2, own.w2_size);
	/* The segment's logical handles the application got at creation, its access. */
	for (int i = 0; i < 3; i++) {
		CUmemGenericAllocationHandle h = 0;
		rc = cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)(own.seg + (CUdeviceptr)i * own.g + 64));
		check(rc == CUDA_SUCCESS && (uint64_t)h == own.seg_handles[i],
		      "the expandable segment's allocation %d: handle %#llx (%s), created as %#llx", i,
		      (unsigned long long)h, cuname(rc), (unsigned long long)own.seg_handles[i]);
		if (rc == CUDA_SUCCESS)
			cuMemRelease(h);
	}
	CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = own.device};
	unsigned long long flags = 0;
	rc = cuMemGetAccess(&flags, &here, own.seg + own.g);
	check(rc == CUDA_SUCCESS && flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	      "the expandable segment's access: %s, flags %llu", cuname(rc), flags);
	if (!failed)
		printf("vmm_group %s: private memory (weights, an expandable segment, a KV cache) intact\n", role);
}

#endif
