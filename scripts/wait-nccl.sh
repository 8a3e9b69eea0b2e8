#!/bin/bash
# SPDX-License-Identifier: MIT
# scripts/wait-nccl.sh BUILD: wait (at most 30 minutes) for the background NCCL
# build `make test` started to write BUILD/nccl-status, and print how it went.
# The build ran at the lowest priority beside the passes; from here nothing
# else of the suite runs, so it is given back the normal one (BUILD/nccl-pid
# and its descendants): on a machine busy with others' work, a build at nice 19
# would not end within the wait.
# Exit 0 when it built NCCL, else its exit status (69: unavailable, no nvcc or
# no source; 1: it failed).
set -u
build=${1:?build dir}
# pid and every descendant of it, one per line.
tree() {
	echo "$1"
	local c
	for c in $(pgrep -P "$1"); do tree "$c"; done
}
pid=$(cat "$build/nccl-pid" 2>/dev/null)
if [ -n "$pid" ] && [ ! -s "$build/nccl-status" ] && kill -0 "$pid" 2>/dev/null; then
	mapfile -t pids < <(tree "$pid")
	renice -n 0 -p "${pids[@]}" >/dev/null 2>&1
fi
for _ in $(seq 1800); do
	[ -s "$build/nccl-status" ] && break
	sleep 1
done
rc=$(cat "$build/nccl-status" 2>/dev/null || echo 124)
[ "$rc" = 124 ] && echo 124 >"$build/nccl-status"
tail -n 1 "$build/nccl-make.log" 2>/dev/null
exit "$rc"
