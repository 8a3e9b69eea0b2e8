/* SPDX-License-Identifier: MIT */
/* A library named libcudart.so.13 that is not the project's runtime (it lacks
 * cusnap_cudart_runtime): what cuemu must refuse to run beside, as it would
 * NVIDIA's (test_client_api loads it; nothing here is NVIDIA's). */
__attribute__((visibility("default"))) int not_the_project_runtime(void);

int not_the_project_runtime(void)
{
	return 1;
}
