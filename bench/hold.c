/* SPDX-License-Identifier: MIT */
/* bench/hold: the CRIU floor's process (bench/datapath.sh). It holds SIZE bytes
 * of anonymous memory, every page written (a pattern CRIU cannot skip as
 * zero), writes READY_FILE once they are, and waits to be dumped.
 *   build/bench/hold SIZE READY_FILE
 * With --memcpy SIZE it prints instead this machine's single-core memcpy
 * between two populated buffers of SIZE bytes, in GiB/s (the best of three),
 * and the rate at which fresh anonymous memory is written the first time
 * (page faults, zeroing, and on a virtual machine the host backing the page):
 * every leg that lands in new memory is bounded by it. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
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
	char *fresh = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fresh == MAP_FAILED)
		return 1;
	double t0 = now_s();
	memset(fresh, 3, size);
	double first = now_s() - t0;
	printf("%.2f %.2f\n", (double)size / (1u << 30) / best, (double)size / (1u << 30) / first);
	return b[size - 1] != 1 || fresh[size - 1] != 3;
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
