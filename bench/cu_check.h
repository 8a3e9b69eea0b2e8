/* SPDX-License-Identifier: MIT */
/* The benchmarks' driver-call check: a failed call stops the run, named. */
#ifndef CUSNAP_BENCH_CU_CHECK_H
#define CUSNAP_BENCH_CU_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda.h>

#define CU(x)                                                                                               \
	do {                                                                                                \
		CUresult r_ = (x);                                                                          \
		if (r_) {                                                                                   \
			fprintf(stderr, "%s: %s failed: %d\n", program_invocation_short_name, #x, (int)r_); \
			exit(1);                                                                            \
		}                                                                                           \
	} while (0)

#endif
