/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cusnap/atomicfile.h"
#include "cusnap/crc32c.h"
#include "cusnap/proto.h"
#include "cusnap/state.h"
#include "cusnap/wire.h"

#define MAGIC "CSVMSTAT"
#define HEADER 28
#define PART_HEADER 28

int state_write(int dirfd, const char *dir, const struct state *s, char *err, size_t errlen)
{
	size_t total = HEADER + 4;
	for (size_t i = 0; i < s->n; i++)
		total += PART_HEADER + s->p[i].len;
	uint8_t *buf = malloc(total);
	if (!buf) {
		snprintf(err, errlen, "out of memory for a %zu-byte state file", total);
		return -ENOMEM;
	}
	memcpy(buf, MAGIC, 8);
	wire_put_u16(buf + 8, STATE_MAJOR);
	wire_put_u16(buf + 10, STATE_MINOR);
	wire_put_u64(buf + 12, s->created);
	wire_put_u32(buf + 20, s->content);
	wire_put_u32(buf + 24, (uint32_t)s->n);
	size_t at = HEADER;
	for (size_t i = 0; i < s->n; i++) {
		memcpy(buf + at, s->p[i].id.b, ID_LEN);
		wire_put_u32(buf + at + 16, s->p[i].nspid);
		wire_put_u32(buf + at + 20, s->p[i].obs);
		wire_put_u32(buf + at + 24, (uint32_t)s->p[i].len);
		memcpy(buf + at + PART_HEADER, s->p[i].stream, s->p[i].len);
		at += PART_HEADER + s->p[i].len;
	}
	wire_put_u32(buf + at, crc32c(0, buf, at));
	const char *step;
	int rc = dirfd >= 0 ? atomic_write_at(dirfd, STATE_FILE, buf, total, 0600, &step)
			    : atomic_write(dir, STATE_FILE, buf, total, 0600, &step);
	if (rc < 0)
		snprintf(err, errlen, "state file %s/%s: %s failed: %s", dir, STATE_FILE, step, strerror(-rc));
	free(buf);
	return rc;
}

void state_free(struct state *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->p[i].stream);
		topo_free(&s->p[i].topo);
	}
	free(s->p);
	memset(s, 0, sizeof(*s));
}

int state_decode(const uint8_t *buf, size_t len, struct state *s, char *err, size_t errlen)
{
	memset(s, 0, sizeof(*s));
	if (len == 0) {
		snprintf(err, errlen, "empty file");
		return -EINVAL;
	}
	if (len < 8 || memcmp(buf, MAGIC, 8) != 0) {
		snprintf(err, errlen, "not a cusnap state file (bad magic)");
		return -EINVAL;
	}
	if (len < HEADER + 4) {
		snprintf(err, errlen, "truncated: %zu bytes, the header alone needs %d", len, HEADER + 4);
		return -EINVAL;
	}
	uint16_t major = wire_get_u16(buf + 8), minor = wire_get_u16(buf + 10);
	if (major > STATE_MAJOR) {
		snprintf(err, errlen, "format version %u.%u is newer than this reader (%u.x)", major, minor,
			 STATE_MAJOR);
		return -EINVAL;
	}
	if (major < 1) {
		snprintf(err, errlen, "format version %u.%u is unknown", major, minor);
		return -EINVAL;
	}
	uint32_t want = wire_get_u32(buf + len - 4), got = crc32c(0, buf, len - 4);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
	want = got; /* let the fuzzer past the checksum, into the parser */
#endif
	if (want != got) {
		snprintf(err, errlen,
			 "checksum mismatch (stored %08x, computed %08x): the file is corrupt or truncated", want, got);
		return -EINVAL;
	}
	s->created = wire_get_u64(buf + 12);
	s->content = wire_get_u32(buf + 20);
	uint32_t n = wire_get_u32(buf + 24);
	size_t body = len - 4;
	/* Each participant needs at least its header: bound the count by the bytes. */
	if (n > (body - HEADER) / PART_HEADER) {
		snprintf(err, errlen, "participant count %u does not fit in %zu bytes", n, len);
		return -EINVAL;
	}
	s->p = calloc(n ? n : 1, sizeof(*s->p));
	if (!s->p) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	size_t at = HEADER;
	for (uint32_t i = 0; i < n; i++) {
		struct state_participant *p = &s->p[i];
		if (body - at < PART_HEADER) {
			snprintf(err, errlen, "participant %u: header runs past the end", i);
			goto bad;
		}
		memcpy(p->id.b, buf + at, ID_LEN);
		p->nspid = wire_get_u32(buf + at + 16);
		p->obs = wire_get_u32(buf + at + 20);
		size_t slen = wire_get_u32(buf + at + 24);
		at += PART_HEADER;
		if (slen > body - at) {
			snprintf(err, errlen, "participant %u: %zu bytes of records, %zu left", i, slen, body - at);
			goto bad;
		}
		p->stream = malloc(slen ? slen : 1);
		if (!p->stream) {
			snprintf(err, errlen, "out of memory");
			goto bad;
		}
		memcpy(p->stream, buf + at, slen);
		p->len = slen;
		s->n = i + 1;
		int rc = topo_decode(p->stream, slen, &p->topo);
		if (rc) {
			snprintf(err, errlen, "participant %u: records: %s", i, proto_status_name(rc));
			goto bad;
		}
		at += slen;
	}
	if (at != body) {
		snprintf(err, errlen, "%zu bytes after the last of %u participants", body - at, n);
		goto bad;
	}
	return 0;
bad:
	state_free(s);
	return -EINVAL;
}

/* fd's file (path names it) read whole and decoded; fd closed. */
static int state_read_fd(int fd, const char *path, struct state *s, char *err, size_t errlen)
{
	if (fd < 0) {
		int e = errno;
		snprintf(err, errlen, "%s: %s", path, strerror(e));
		return -e;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_size > (off_t)1 << 34) {
		close(fd);
		snprintf(err, errlen, "%s: cannot size it", path);
		return -EINVAL;
	}
	size_t len = (size_t)st.st_size;
	uint8_t *buf = malloc(len ? len : 1);
	int got = buf ? io_read_all(fd, buf, len) : -ENOMEM;
	close(fd);
	if (got < 0) {
		free(buf);
		snprintf(err, errlen, "%s: read failed", path);
		return -EIO;
	}
	char why[512];
	int rc = state_decode(buf, len, s, why, sizeof(why));
	if (rc)
		snprintf(err, errlen, "%s: %s", path, why);
	free(buf);
	return rc;
}

int state_read(const char *path, struct state *s, char *err, size_t errlen)
{
	return state_read_fd(open(path, O_RDONLY | O_CLOEXEC), path, s, err, errlen);
}

int state_read_at(int dirfd, const char *dir, struct state *s, char *err, size_t errlen)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/" STATE_FILE, dir);
	return state_read_fd(openat(dirfd, STATE_FILE, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), path, s, err, errlen);
}
