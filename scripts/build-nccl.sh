#!/bin/bash
# SPDX-License-Identifier: MIT
# Build NCCL 2.28.9 from its source into BUILD/nccl (include/nccl.h,
# lib/libnccl.so.2) for the emulator (DESIGN.md §15):
#
#   scripts/build-nccl.sh [BUILD_DIR]
#
# - the source: $NCCL_SOURCE, else ../shared/third_party/nccl-2.28.9-1.tar.gz
#   beside the checkout (NCCL's tag v2.28.9-1, `git archive --prefix=nccl-2.28.9-1/`);
#   its SHA-256 must match the one published there when that is present (a
#   clone elsewhere names its own archive of the tag, said when none is found);
# - host code linked against the project's CUDA runtime (BUILD/lib/libcudart.so.13,
#   named in libnccl's DT_RPATH so that it is found before any other): NVIDIA's
#   libcudart never runs on cuemu (and cuemu refuses cuInit beside it);
# - device code compiled by the toolkit's nvcc for one architecture (sm_90, what
#   cuemu's devices report) and only the kernels the tests' collectives load
#   (AllReduce of f32 sums, every algorithm and protocol, and SendRecv): kernels
#   never run on cuemu, so it is compiled without optimisation (ptxas and
#   cicc at -O0: most of the build's time otherwise); ONLY_FUNCS does not reach
#   the symmetric-memory kernels (src/device/symmetric/generate.py lists every
#   collective and type: 16 files, about 115 s of nvcc here), so the copy of
#   that generator is narrowed to the same choice, AllReduce of f32 sums (a
#   symmetric collective of another type or kind finds no kernel);
# - host code at -O0 without debug information, through a wrapper that puts
#   those flags last (NCCL's makefile appends -O3 -g to whatever CXXFLAGS it
#   is given): what the tests ask of NCCL's host code is its calls, not its
#   speed.
# Built once: BUILD/nccl/.stamp names the source's SHA-256 and these settings; a
# build with the same stamp is kept. The log is BUILD/nccl-build.log.
# Exit 0 built or kept; 69 no source, no nvcc or no runtime; 1 the build failed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
mkdir -p "$build"
build=$(cd "$build" && pwd)
tarball=${NCCL_SOURCE:-$here/../shared/third_party/nccl-2.28.9-1.tar.gz}
sums=$here/../shared/third_party/nccl-2.28.9-1.tar.gz.sha256
cuda=${CUDA_HOME:-/usr/local/cuda}
funcs='AllReduce Sum f32 * *|SendRecv'
symk='k.coll == "AllReduce" and k.ty == "f32"' # the symmetric kernels kept
arch='-gencode=arch=compute_90,code=sm_90'
quick='-Xptxas -O0 -Xcicc -O0' # device code never runs: no optimisation
host='-O0 -g0'                 # nor is the host code measured or debugged
if [ ! -f "$tarball" ]; then
	cat >&2 <<-EOF
	build-nccl: no NCCL source at $tarball
	  NCCL's source is not part of this project: a checkout beside ../shared/third_party finds it there;
	  elsewhere make an archive of NCCL's tag v2.28.9-1 from NVIDIA's nccl repository and name it:
	    git clone --branch v2.28.9-1 --depth 1 https://github.com/NVIDIA/nccl.git nccl
	    git -C nccl archive --prefix=nccl-2.28.9-1/ -o \$PWD/nccl-2.28.9-1.tar.gz v2.28.9-1
	    NCCL_SOURCE=\$PWD/nccl-2.28.9-1.tar.gz make nccl
	EOF
	exit 69
fi
[ -x "$cuda/bin/nvcc" ] || { echo "build-nccl: no nvcc at $cuda/bin/nvcc (set CUDA_HOME)" >&2; exit 69; }
[ -f "$build/lib/libcudart.so.13" ] || { echo "build-nccl: no $build/lib/libcudart.so.13: run make first" >&2; exit 69; }
sum=$(sha256sum "$tarball" | cut -d' ' -f1)
if [ -f "$sums" ] && [ "$sum" != "$(cut -d' ' -f1 "$sums")" ]; then
	echo "build-nccl: $tarball has SHA-256 $sum, not the published $(cut -d' ' -f1 "$sums"): refusing it" >&2
	exit 69
fi
out=$build/nccl
stamp="$sum $arch $quick host=$host $funcs symk=$symk cudart=$build/lib"
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ] && [ -f "$out/lib/libnccl.so.2" ]; then
	echo "build-nccl: $out is up to date"
	exit 0
fi
rm -rf "$build/nccl-src" "$out"
mkdir -p "$build/nccl-src"
tar -xzf "$tarball" -C "$build/nccl-src" --strip-components=1
# The symmetric generator's list, filtered: its enumerate_kernels() is renamed
# and a filtering one of that name put before its first user.
gen=$build/nccl-src/src/device/symmetric/generate.py
sed -i -e 's/^def enumerate_kernels():/def every_kernel():/' \
	-e "s/^def required_cuda(k):/def enumerate_kernels():\n  return (k for k in every_kernel() if $symk)\n\n&/" "$gen"
grep -q '^def every_kernel():' "$gen" && grep -q "if $symk)\$" "$gen" ||
	{ echo "build-nccl: $gen is not shaped as expected: its symmetric kernels cannot be narrowed" >&2; exit 1; }
log=$build/nccl-build.log
cxx=$build/nccl-src/cxx-quick
printf '#!/bin/sh\nexec '\''%s'\'' "$@" %s\n' "$(command -v "${CXX:-g++}")" "$host" >"$cxx"
chmod 0755 "$cxx"
start=$SECONDS
echo "build-nccl: building NCCL into $out (log: $log)"
# CUDA_LIB is where NCCL's link looks for libcudart: the project's, with its
# directory as libnccl's run path. `lib` builds the headers and the shared
# library only (no static archive, no tools). CXX is also nvcc's host compiler.
if ! make -C "$build/nccl-src/src" lib -j"$(nproc)" BUILDDIR="$out" CUDA_HOME="$cuda" CXX="$cxx" \
	CUDA_LIB="$build/lib -Wl,-rpath,$build/lib -Wl,--disable-new-dtags" CUDARTLIB=cudart \
	NVCC_GENCODE="$arch $quick" ONLY_FUNCS="$funcs" >"$log" 2>&1; then
	echo "build-nccl: the build failed; the end of $log:" >&2
	tail -n 30 "$log" >&2
	exit 1
fi
# Never the toolkit's runtime: libnccl must name ours first.
if ! readelf -d "$out/lib/libnccl.so.2" | grep -q "RPATH.*$build/lib"; then
	echo "build-nccl: $out/lib/libnccl.so.2 does not name $build/lib as its run path" >&2
	exit 1
fi
echo "$stamp" >"$out/.stamp"
echo "build-nccl: built in $((SECONDS - start)) s"
