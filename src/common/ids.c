/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "cusnap/ids.h"

int id_random(struct cusnap_id *id)
{
	size_t got = 0;
	while (got < ID_LEN) {
		ssize_t n = getrandom(id->b + got, ID_LEN - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)n;
	}
	return 0;
}

void id_hex(const struct cusnap_id *id, char out[ID_HEX_LEN + 1])
{
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < ID_LEN; i++) {
		out[2 * i] = digits[id->b[i] >> 4];
		out[2 * i + 1] = digits[id->b[i] & 15];
	}
	out[ID_HEX_LEN] = '\0';
}

static int nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int id_parse(const char *hex, struct cusnap_id *id)
{
	if (!hex || strlen(hex) != ID_HEX_LEN)
		return -EINVAL;
	for (int i = 0; i < ID_LEN; i++) {
		int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		id->b[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

int id_parse_uuid(const char *s, size_t len, uint8_t out[ID_LEN])
{
	if (len >= 4 && strncmp(s, "GPU-", 4) == 0) {
		s += 4;
		len -= 4;
	}
	int nib = 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '-')
			continue;
		int v = nibble(s[i]);
		if (v < 0 || nib >= 2 * ID_LEN)
			return -EINVAL;
		out[nib / 2] = (uint8_t)(nib % 2 ? out[nib / 2] | v : v << 4);
		nib++;
	}
	return nib == 2 * ID_LEN ? 0 : -EINVAL;
}

bool id_is_zero(const struct cusnap_id *id)
{
	for (int i = 0; i < ID_LEN; i++)
		if (id->b[i])
			return false;
	return true;
}

bool id_equal(const struct cusnap_id *a, const struct cusnap_id *b)
{
	return memcmp(a->b, b->b, ID_LEN) == 0;
}

bool id_equal_ct(const struct cusnap_id *a, const struct cusnap_id *b)
{
	uint8_t diff = 0;
	for (int i = 0; i < ID_LEN; i++)
		diff |= a->b[i] ^ b->b[i];
	return diff == 0;
}

uint64_t id_hash(const struct cusnap_id *id)
{
	uint64_t h = 0;
	for (int i = 0; i < 8; i++)
		h |= (uint64_t)id->b[i] << (8 * i);
	for (int i = 8; i < 16; i++)
		h ^= (uint64_t)id->b[i] << (8 * (i - 8));
	return h ? h : 1;
}
