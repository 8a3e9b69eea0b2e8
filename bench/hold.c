/* SPDX-License-Identifier: MIT */
/* bench/hold: the CRIU floor's process (bench/datapath.sh). It holds SIZE bytes
 * of anonymous memory, every page written (a pattern CRIU cannot skip as
 * zero), writes READY_FILE once they are, and waits to be dumped.
 *   build/bench/hold SIZE READY_FILE
 * With --memcpy SIZE it prints instead this machine's single-core memcpy
 * between two populated buffers of SIZE bytes, in GiB/s (the best of three),
 * the rate at which fresh anonymous memory is written the first time (a page
 * fault a page, and zeroing), and the rate at which the kernel writes fresh
 * pages of a file (pwrite into a new memfd: no fault, no page of this
 * process's mappings touched). On this project's VMs the first is 20 times
 * slower (DESIGN.md §11.1). */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

enum { RING_SLOT = 16 << 20 };

/* Written the first time, in GiB/s: a new mapping of size bytes, memset (a
 * fault a page); or, by_kernel, a new memfd of size bytes written from src
 * with pwrite, 16 MiB at a time (its pages made and filled by the kernel, as
 * file content's are from a slot of the ring). */
static double first_write(size_t size, bool by_kernel, const char *src)
{
	if (by_kernel) {
		int fd = memfd_create("hold", MFD_CLOEXEC);
		if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
			return 0;
		double t0 = now_s();
		size_t done = 0;
		for (ssize_t n = 1; n > 0 && done < size; done += (size_t)n) /* (from one 16 MiB ring slot) */
			n = pwrite(fd, src, size - done < RING_SLOT ? size - done : RING_SLOT, (off_t)done);
		double t = now_s() - t0;
		close(fd);
		return done == size ? (double)size / (1u << 30) / t : 0;
	}
	char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 0;
	double t0 = now_s();
	memset(p, 3, size);
	double t = now_s() - t0;
	bool ok = p[size - 1] == 3;
	munmap(p, size);
	return ok ? (double)size / (1u << 30) / t : 0;
}

static int memcpy_rate(size_t size)
{
	char *a = malloc(size), *b = malloc(size);
	if (!a || !b)
		return 1;
	memset(a, 1, size);
	memset(b, 2, size);
	double best = 1e9;
	for (int i = 0; i < 3; i++) {
		double t0 = now_s();
		memcpy(b, a, size);
		double t = now_s() - t0;
		best = t < best ? t : best;
	}
	bool copied = b[size - 1] == 1;
	free(b); /* (what follows reuses its pages, just freed) */
	double faults = first_write(size, false, NULL), kernel = first_write(size, true, a);
	printf("%.2f %.2f %.2f\n", (double)size / (1u << 30) / best, faults, kernel);
	free(a);
	return !copied || faults == 0 || kernel == 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--memcpy"))
		return memcpy_rate(strtoull(argv[2], NULL, 0));
	if (argc != 3) {
		fprintf(stderr, "usage: hold SIZE READY_FILE\n");
		return 64;
	}
	size_t size = strtoull(argv[1], NULL, 0);
	unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!size || p == MAP_FAILED) {
		perror("hold: mmap");
		return 1;
	}
	for (size_t i = 0; i < size; i += 64)
		memset(p + i, (int)(i >> 12) | 1, 64);
	int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		perror("hold: ready file");
		return 1;
	}
	close(fd);
	for (;;)
		pause();
}
