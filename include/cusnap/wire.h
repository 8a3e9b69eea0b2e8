/* SPDX-License-Identifier: MIT */
/* Little-endian field packing for wire formats and files. Everything that leaves
 * a process is packed field by field through these, never by writing a struct,
 * so layouts do not depend on the compiler or the host. */
#ifndef CUSNAP_WIRE_H
#define CUSNAP_WIRE_H

#include <stdint.h>
#include <string.h>

static inline void wire_put_u16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void wire_put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void wire_put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t wire_get_u16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t wire_get_u32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static inline uint64_t wire_get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* F_ACCESS: location type | location id | flags, u32 each. */
#define WIRE_ACCESS_LEN 12

static inline void wire_put_access(uint8_t *p, uint32_t loc_type, int32_t loc_id, uint32_t flags)
{
	wire_put_u32(p, loc_type);
	wire_put_u32(p + 4, (uint32_t)loc_id);
	wire_put_u32(p + 8, flags);
}

static inline void wire_get_access(const uint8_t *p, uint32_t *loc_type, int32_t *loc_id, uint32_t *flags)
{
	*loc_type = wire_get_u32(p);
	*loc_id = (int32_t)wire_get_u32(p + 4);
	*flags = wire_get_u32(p + 8);
}

/* F_DEVICE_MAP: old device ordinal | new ordinal, u32 each. */
#define WIRE_PAIR_LEN 8

static inline void wire_put_pair(uint8_t *p, uint32_t a, uint32_t b)
{
	wire_put_u32(p, a);
	wire_put_u32(p + 4, b);
}

static inline void wire_get_pair(const uint8_t *p, uint32_t *a, uint32_t *b)
{
	*a = wire_get_u32(p);
	*b = wire_get_u32(p + 4);
}

#endif
