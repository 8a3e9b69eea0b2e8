#!/bin/bash
# `make gpu-build` compiles everything tests/gpu/run.sh needs (here, without a
# GPU), so that the GPU code never rots.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)
repo=$(cd "$build/.." && pwd)
[ -n "${CUSNAP_SANITIZER:-}" ] && { echo "SKIP: compiled once, in the plain build"; exit 77; }
nvcc=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
[ -x "$nvcc" ] || { echo "SKIP: no nvcc at $nvcc"; exit 77; }
out=$(make -s -C "$repo" gpu-build BUILD="$build" 2>&1) || { echo "FAIL: make gpu-build"; echo "$out"; exit 1; }
for f in gpu/kernel_share gpu/copy_bench; do
	[ -x "$build/$f" ] || { echo "FAIL: $f was not built"; exit 1; }
done
bash -n "$repo/tests/gpu/run.sh" || { echo "FAIL: tests/gpu/run.sh does not parse"; exit 1; }
echo "ok   make gpu-build: kernel_share and copy_bench built with nvcc against the real cuda.h"
