/* SPDX-License-Identifier: MIT */
/* CRC32C (Castagnoli): the SSE4.2 instruction where the processor has it (the
 * checkpoint images are digested at memory speed), else slicing-by-8. */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "cusnap/crc32c.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		table[0][i] = c;
	}
	for (int t = 1; t < 8; t++)
		for (uint32_t i = 0; i < 256; i++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

uint32_t crc32c_portable(uint32_t crc, const void *data, size_t len)
{
	pthread_once(&table_once, make_table);
	const uint8_t *p = data;
	crc = ~crc;
	/* Eight bytes a step (slicing-by-8), then the tail. */
	while (len >= 8) {
		uint32_t lo = crc ^
			      ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
		crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
		      table[4][lo >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = data;
	uint64_t c = ~crc;
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, p, 8);
		c = _mm_crc32_u64(c, v);
		p += 8;
		len -= 8;
	}
	uint32_t c32 = (uint32_t)c;
	while (len--)
		c32 = _mm_crc32_u8(c32, *p++);
	return ~c32;
}

static int have_sse42 = -1;
#endif

uint32_t crc32c(uint32_t crc, const void *data, size_t len)
{
#if defined(__x86_64__)
	int have = __atomic_load_n(&have_sse42, __ATOMIC_RELAXED);
	if (have < 0) {
		have = __builtin_cpu_supports("sse4.2") ? 1 : 0;
		__atomic_store_n(&have_sse42, have, __ATOMIC_RELAXED);
	}
	if (have)
		return crc32c_sse42(crc, data, len);
#endif
	return crc32c_portable(crc, data, len);
}

/* ---- n zero bytes at once ----
 * Feeding a zero bit to the CRC's register is a linear map over GF(2); n zero
 * bytes are that map to the power 8n, made by squaring (log n steps): a hole of
 * a sparse file is digested without reading it. A map is 32 columns: the
 * image of each bit of the register. */

static uint32_t map_apply(const uint32_t *m, uint32_t v)
{
	uint32_t out = 0;
	for (int i = 0; v; i++, v >>= 1)
		if (v & 1)
			out ^= m[i];
	return out;
}

static void map_square(uint32_t *sq, const uint32_t *m)
{
	for (int i = 0; i < 32; i++)
		sq[i] = map_apply(m, m[i]);
}

/* The map of n zero bytes (n > 0) into m (scratch: another map's room). */
static const uint32_t *zeros_map(uint32_t *m, uint32_t *scratch, uint64_t n)
{
	uint32_t *a = m, *b = scratch, one[32], tmp[32];
	a[0] = 0x82f63b78u; /* one zero bit: the register shifts right, the polynomial in where a one leaves */
	for (int i = 1; i < 32; i++)
		a[i] = 1u << (i - 1);
	map_square(b, a); /* 2 bits */
	map_square(a, b); /* 4 bits */
	map_square(b, a); /* 8 bits: one byte */
	/* one: the product so far (none yet); cur: the byte map squared per bit of n */
	bool have = false;
	uint32_t *cur = b, *next = a;
	for (;;) {
		if (n & 1) {
			if (have) {
				for (int i = 0; i < 32; i++)
					tmp[i] = map_apply(cur, one[i]);
				memcpy(one, tmp, sizeof(one));
			} else {
				memcpy(one, cur, sizeof(one));
				have = true;
			}
		}
		n >>= 1;
		if (!n)
			break;
		map_square(next, cur);
		uint32_t *t = cur;
		cur = next;
		next = t;
	}
	memcpy(m, one, sizeof(one));
	return m;
}

uint32_t crc32c_zeros(uint32_t crc, uint64_t n)
{
	if (!n)
		return crc;
	uint32_t m[32], scratch[32];
	return ~map_apply(zeros_map(m, scratch, n), ~crc);
}

uint32_t crc32c_combine(uint32_t a, uint32_t b, uint64_t len_b)
{
	/* The register's map is linear, its start and end inverted: over B from
	 * a is B's own CRC, plus the zeros' from a, less the zeros' from 0. Blocks
	 * are mostly of one length: its map is kept. */
	static __thread struct {
		uint64_t n;
		uint32_t m[32];
	} last;
	if (!len_b)
		return a;
	if (last.n != len_b) {
		uint32_t scratch[32];
		zeros_map(last.m, scratch, len_b);
		last.n = len_b;
	}
	return ~map_apply(last.m, ~a) ^ b ^ ~map_apply(last.m, ~0u);
}
