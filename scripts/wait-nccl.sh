#!/bin/bash
# SPDX-License-Identifier: MIT
# scripts/wait-nccl.sh BUILD: wait (at most 30 minutes) for the background NCCL
# build `make test` started to write BUILD/nccl-status, and print how it went.
# Exit 0 when it built NCCL, else its exit status (69: unavailable, no nvcc or
# no source; 1: it failed).
set -u
build=${1:?build dir}
for _ in $(seq 1800); do
	[ -s "$build/nccl-status" ] && break
	sleep 1
done
rc=$(cat "$build/nccl-status" 2>/dev/null || echo 124)
[ "$rc" = 124 ] && echo 124 >"$build/nccl-status"
tail -n 1 "$build/nccl-make.log" 2>/dev/null
exit "$rc"
