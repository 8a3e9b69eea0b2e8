/* SPDX-License-Identifier: MIT */
/* CRC32C (Castagnoli), as used by the state file and the image digests. */
#ifndef CUSNAP_CRC32C_H
#define CUSNAP_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue crc over data; start with 0. The processor's instruction where it
 * has one. */
uint32_t crc32c(uint32_t crc, const void *data, size_t len);
/* The same, by table on any processor (what the tests compare it with). */
uint32_t crc32c_portable(uint32_t crc, const void *data, size_t len);
/* crc continued over n zero bytes, in log n steps (a sparse file's holes). */
uint32_t crc32c_zeros(uint32_t crc, uint64_t n);
/* The CRC of A then B from a, A's CRC, and b, B's (len_b bytes): what
 * crc32c(a, B) would give, without B's bytes. */
uint32_t crc32c_combine(uint32_t a, uint32_t b, uint64_t len_b);

#endif
