/* SPDX-License-Identifier: MIT */
/* CRC32C (Castagnoli), as used by the state file. */
#ifndef CUSNAP_CRC32C_H
#define CUSNAP_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Continue crc over data; start with 0. */
uint32_t crc32c(uint32_t crc, const void *data, size_t len);

#endif
