/* SPDX-License-Identifier: MIT */
/* The state sidecar: golden bytes, round trip, every refusal with its own
 * message, and torn writes leaving the previous file intact. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../harness/test.h"
#include "cusnap/crc32c.h"
#include "cusnap/proto.h"
#include "cusnap/state.h"

static char dir[4096];

static void sample(struct state *s, struct proto_buf *records)
{
	struct cusnap_id id = {{0xaa, 0xbb}};
	size_t at = pbuf_begin(records, REC_PARTICIPANT);
	pbuf_put_id(records, F_ID, &id);
	pbuf_put_u32(records, F_NSPID, 7);
	pbuf_end(records, at);
	at = pbuf_begin(records, REC_ALLOCATION);
	pbuf_put_u64(records, F_SIZE, 2 << 20);
	pbuf_end(records, at);
	static struct state_participant p;
	memset(&p, 0, sizeof(p));
	p.id = id;
	p.nspid = 7;
	p.obs = 4242;
	p.stream = records->data;
	p.len = records->len;
	*s = (struct state){.created = 1700000000, .content = 1, .n = 1, .p = &p};
}

static uint8_t *file_bytes(size_t *len)
{
	char path[4200];
	snprintf(path, sizeof(path), "%s/" STATE_FILE, dir);
	char *text = NULL;
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	*len = (size_t)ftell(f);
	rewind(f);
	text = malloc(*len + 1);
	if (fread(text, 1, *len, f) != *len) {
		free(text);
		text = NULL;
	}
	fclose(f);
	return (uint8_t *)text;
}

static void crc_vector(void)
{
	/* The CRC32C check value of "123456789". */
	CHECK_EQ(crc32c(0, "123456789", 9), 0xe3069283);
	CHECK_EQ(crc32c(crc32c(0, "1234", 4), "56789", 5), 0xe3069283);
	/* The instruction and the table agree, at every length and alignment. */
	uint8_t buf[300];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 131 + 7);
	for (size_t off = 0; off < 8; off++)
		for (size_t len = 0; len + off <= sizeof(buf); len += 13)
			CHECK_EQ(crc32c(5, buf + off, len), crc32c_portable(5, buf + off, len));
	CHECK_EQ(crc32c_portable(0, "123456789", 9), 0xe3069283);
	/* n zero bytes at once: as if they were read (a sparse file's holes). */
	static uint8_t zeros[70000];
	static const uint64_t lens[] = {0, 1, 2, 3, 7, 8, 9, 63, 64, 255, 4096, 65536, 69999};
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		CHECK_EQ(crc32c_zeros(0, lens[i]), crc32c(0, zeros, lens[i]));
		CHECK_EQ(crc32c_zeros(0xe3069283u, lens[i]), crc32c(0xe3069283u, zeros, lens[i]));
	}
	/* Two CRCs into the CRC of both, without the second's bytes (file
	 * content's digest from its blocks' CRCs), the same length twice running
	 * (its map kept) and lengths that change. */
	static uint8_t data[70000];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 2654435761u >> 13);
	static const size_t cuts[][2] = {{0, 9}, {9, 0}, {1, 1}, {100, 4096}, {777, 4096}, {65536, 4464}, {3, 69997}};
	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		size_t la = cuts[i][0], lb = cuts[i][1];
		uint32_t a = crc32c(0, data, la), b = crc32c(0, data + la, lb);
		CHECK_EQ(crc32c_combine(a, b, lb), crc32c(0, data, la + lb));
		CHECK_EQ(crc32c_combine(a ^ 1, b, lb), crc32c(a ^ 1, data + la, lb));
	}
}

/* The sample state written to dir, and the file's bytes (*len of them,
 * malloc'ed; NULL, said, when it cannot be read back). */
/* The sample as state_write wrote it: its bytes, and the record it holds. */
struct written {
	struct proto_buf rec;
	uint8_t *b;
	size_t len;
};

static bool sample_written(struct written *w)
{
	struct state s;
	char err[512];
	*w = (struct written){0};
	sample(&s, &w->rec);
	CHECK_EQ(state_write(-1, dir, &s, err, sizeof(err)), 0);
	w->b = file_bytes(&w->len);
	CHECK(w->b != NULL);
	return w->b != NULL;
}

static void written_free(struct written *w)
{
	free(w->b);
	pbuf_free(&w->rec);
}

/* The checksum of the bytes before it, written again after a change. */
static void reseal(uint8_t *b, size_t len)
{
	uint32_t crc = crc32c(0, b, len - 4);
	for (int i = 0; i < 4; i++)
		b[len - 4 + i] = (uint8_t)(crc >> (8 * i));
}

static void golden_and_round_trip(void)
{
	struct written w;
	if (!sample_written(&w))
		return;
	const uint8_t *b = w.b;
	struct state back;
	char err[512];
	CHECK_EQ(w.len, 28 + 28 + w.rec.len + 4);
	static const uint8_t head[28] = {'C',  'S',  'V', 'M', 'S', 'T', 'A', 'T', 1, 0, 0, 0, 0x00, 0xf1,
					 0x53, 0x65, 0,   0,   0,   0,   1,   0,   0, 0, 1, 0, 0,    0};
	CHECK(memcmp(b, head, sizeof(head)) == 0);
	CHECK_EQ(b[28], 0xaa);                        /* participant id */
	CHECK_EQ(b[28 + 16], 7);                      /* nspid */
	CHECK_EQ(b[28 + 20] | b[28 + 21] << 8, 4242); /* observed pid */
	CHECK_EQ(state_decode(b, w.len, &back, err, sizeof(err)), 0);
	CHECK_EQ(back.n, 1);
	CHECK_EQ(back.created, 1700000000);
	CHECK_EQ(back.p[0].nspid, 7);
	CHECK_EQ(back.p[0].topo.nallocs, 1);
	CHECK_EQ(back.p[0].topo.allocs[0].size, 2 << 20);
	state_free(&back);
	written_free(&w);
}

static void refusals(void)
{
	struct written w;
	if (!sample_written(&w))
		return;
	const uint8_t *b = w.b;
	size_t len = w.len;
	struct state back;
	char err[512];
	CHECK_EQ(state_decode(b, 0, &back, err, sizeof(err)), -EINVAL);
	CHECK_STR(err, "empty file");
	CHECK_EQ(state_decode(b, len - 9, &back, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "checksum mismatch") != NULL); /* truncated */
	CHECK_EQ(state_decode(b, 20, &back, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "truncated") != NULL);
	uint8_t *flip = malloc(len);
	memcpy(flip, b, len);
	flip[40] ^= 0x10;
	CHECK_EQ(state_decode(flip, len, &back, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "checksum mismatch") != NULL);
	memcpy(flip, b, len);
	flip[0] = 'X';
	CHECK_EQ(state_decode(flip, len, &back, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "bad magic") != NULL);
	/* A newer major version, correctly checksummed. */
	memcpy(flip, b, len);
	flip[8] = STATE_MAJOR + 1;
	reseal(flip, len);
	CHECK_EQ(state_decode(flip, len, &back, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "newer than this reader") != NULL);
	/* A count that the bytes cannot hold, correctly checksummed. */
	memcpy(flip, b, len);
	flip[24] = 200;
	reseal(flip, len);
	CHECK_EQ(state_decode(flip, len, &back, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "participant count") != NULL);
	char path[4200];
	snprintf(path, sizeof(path), "%s/nonexistent/" STATE_FILE, dir);
	CHECK_EQ(state_read(path, &back, err, sizeof(err)), -ENOENT);
	free(flip);
	written_free(&w);
}

static void torn_write_keeps_old(void)
{
	struct state s;
	struct proto_buf rec = {0};
	sample(&s, &rec);
	char err[512];
	CHECK_EQ(state_write(-1, dir, &s, err, sizeof(err)), 0);
	size_t len0 = 0;
	uint8_t *before = file_bytes(&len0);
	/* The temporary file cannot be created: a directory stands at its name. */
	char tmp[4200];
	snprintf(tmp, sizeof(tmp), "%s/." STATE_FILE ".%d.tmp", dir, getpid());
	CHECK_EQ(mkdir(tmp, 0700), 0);
	s.created = 1800000000;
	CHECK(state_write(-1, dir, &s, err, sizeof(err)) < 0);
	CHECK(strstr(err, "create failed") != NULL);
	rmdir(tmp);
	size_t len1 = 0;
	uint8_t *after = file_bytes(&len1);
	CHECK(after && len1 == len0 && memcmp(before, after, len0) == 0);
	free(after);
	/* A full disk: a tiny tmpfs (root only). */
	char small[4200];
	snprintf(small, sizeof(small), "%s/small", dir);
	mkdir(small, 0700);
	if (geteuid() == 0 && mount("tmpfs", small, "tmpfs", 0, "size=8k") == 0) {
		s.created = 1700000000;
		CHECK_EQ(state_write(-1, small, &s, err, sizeof(err)), 0);
		size_t big = 64 << 10;
		uint8_t *huge = calloc(1, big);
		struct state_participant p = s.p[0];
		p.stream = huge;
		p.len = big;
		struct state s2 = s;
		s2.p = &p;
		CHECK(state_write(-1, small, &s2, err, sizeof(err)) < 0);
		CHECK(strstr(err, "write failed") != NULL && strstr(err, "No space") != NULL);
		struct state back;
		char path[4300];
		snprintf(path, sizeof(path), "%s/" STATE_FILE, small);
		CHECK_EQ(state_read(path, &back, err, sizeof(err)), 0); /* the old file, intact */
		CHECK_EQ(back.created, 1700000000);
		state_free(&back);
		/* and no temporary file left behind */
		char leftover[4400];
		snprintf(leftover, sizeof(leftover), "%s/." STATE_FILE ".%d.tmp", small, getpid());
		CHECK(access(leftover, F_OK) != 0);
		free(huge);
		umount(small);
	} else {
		printf("  (full-disk part skipped: needs root to mount a tmpfs)\n");
	}
	free(before);
	pbuf_free(&rec);
}

/* Through the directory's descriptor: the file goes where the descriptor
 * points although the path now names another directory (a link put there),
 * and is read back the same way; a link standing at the file's own name is
 * refused. */
static void through_descriptor(void)
{
	struct state s, back;
	struct proto_buf rec = {0};
	sample(&s, &rec);
	char err[512], held[4200], moved[4200], other[4200];
	snprintf(held, sizeof(held), "%s/held", dir);
	snprintf(moved, sizeof(moved), "%s/held.moved", dir);
	snprintf(other, sizeof(other), "%s/other", dir);
	CHECK_EQ(mkdir(held, 0700), 0);
	CHECK_EQ(mkdir(other, 0700), 0);
	int dfd = open(held, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(dfd >= 0);
	CHECK_EQ(rename(held, moved), 0);
	CHECK_EQ(symlink(other, held), 0);
	CHECK_EQ(state_write(dfd, held, &s, err, sizeof(err)), 0);
	char in_other[4300], in_moved[4300];
	snprintf(in_other, sizeof(in_other), "%s/" STATE_FILE, other);
	snprintf(in_moved, sizeof(in_moved), "%s/" STATE_FILE, moved);
	CHECK(access(in_other, F_OK) != 0);
	CHECK_EQ(access(in_moved, F_OK), 0);
	CHECK_EQ(state_read_at(dfd, held, &back, err, sizeof(err)), 0);
	CHECK_EQ(back.created, s.created);
	state_free(&back);
	CHECK_EQ(unlink(in_moved), 0);
	CHECK_EQ(symlink(in_other, in_moved), 0);
	CHECK(state_read_at(dfd, held, &back, err, sizeof(err)) < 0);
	close(dfd);
	pbuf_free(&rec);
}

int main(void)
{
	char *d = test_tempdir("state");
	if (!d)
		SKIP("no temporary directory");
	snprintf(dir, sizeof(dir), "%s", d);
	test_run("CRC32C check value, zeros at once", crc_vector);
	test_run("golden header and round trip", golden_and_round_trip);
	test_run("empty, truncated, bit-flipped, bad magic, newer, bad count: each refused", refusals);
	test_run("a failed write (create, full disk) leaves the old file intact", torn_write_keeps_old);
	test_run("through the directory's descriptor: written and read where it points, a link refused",
		 through_descriptor);
	char *argv[] = {"rm", "-rf", dir, NULL};
	test_run_cmd(argv, NULL, 10000);
	free(d);
	return test_done();
}
