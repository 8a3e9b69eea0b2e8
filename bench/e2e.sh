#!/bin/bash
# SPDX-License-Identifier: MIT
# bench/e2e.sh: CRIU checkpoint + restore of the example group with SIZE bytes
# of shared VMM memory (under the interposer), against the same group and size
# without the interposer (native steps only, the memory private to each
# process). Prints per-phase times; the VMM steps' share of the total is the
# figure DESIGN.md §11 targets (< 5 %). Then the native steps (lock, checkpoint,
# restore+unlock) of a suspend and resume of 1, 4 and 8 processes, run
# concurrently (as cusnap does) and one process after another
# (CUSNAP_NATIVE_PARALLEL=1, the old order). Needs root (CRIU).
#   bench/e2e.sh [SIZE_BYTES] (default 1 GiB)
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$repo/build}
size=${1:-$((1 << 30))}
per=$((size / 4))
export LD_LIBRARY_PATH=$build/emu
work=$(mktemp -d /tmp/cusnap-bench-e2e-XXXXXX)
trap 'rm -rf "$work"' EXIT
criu=$("$repo/scripts/setup-criu.sh" "$build" 2>/dev/null | tail -1) || { echo "no CRIU" >&2; exit 69; }

run() { # LABEL PLAIN(0|1)
	local label=$1 plain=$2 dir=$work/$1
	export SNAPSHOT_CONTROL_DIR=$dir/control
	mkdir -p "$SNAPSHOT_CONTROL_DIR"
	if [ "$plain" = 1 ]; then
		setsid "$build/examples/vmm_group" --workers 1 --allocs 4 --size "$per" --timeout 300 >"$dir/log" 2>&1 </dev/null &
	else
		setsid "$build/bin/cusnap" run -- "$build/examples/vmm_group" --workers 1 --allocs 4 --size "$per" --timeout 300 \
			>"$dir/log" 2>&1 </dev/null &
	fi
	local pid=$!
	for _ in $(seq 600); do [ -f "$SNAPSHOT_CONTROL_DIR/ready-for-snapshot" ] && break; sleep 0.1; done
	local c r kids
	kids=$(cat /proc/"$pid"/task/*/children 2>/dev/null)
	c=$("$build/bin/cusnap" checkpoint --pid "$pid" --dir "$dir/ckpt" --criu "$criu" --json 2>/dev/null)
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	# The workers must be gone (reaped by init) before CRIU can reuse their PIDs.
	for _ in $(seq 100); do
		local alive=0
		for k in $kids; do [ -e /proc/"$k" ] && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	r=$("$build/bin/cusnap" restore --dir "$dir/ckpt" --criu "$criu" --json 2>/dev/null)
	local root
	root=$(cat "$dir/ckpt/restore.pid" 2>/dev/null)
	for p in $(cat /proc/"$root"/task/*/children 2>/dev/null) $root; do kill -9 "$p" 2>/dev/null; done
	get() { echo "$1" | sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" | awk '{printf "%.1f", $1}'; }
	printf "%-22s %9s %9s %9s %9s %9s %9s %9s %9s\n" "$label" "$(get "$c" prepare)" "$(get "$c" checkpoint)" \
		"$(get "$c" criu_dump)" "$(get "$r" criu_restore)" "$(get "$r" native_restore)" "$(get "$r" vmm_restore)" \
		"$(awk -v a="$(get "$c" total)" -v b="$(get "$r" total)" 'BEGIN {printf "%.1f", a + b}')" \
		"$(get "$c" image_bytes | awk '{printf "%.0f", $1 / 1048576}')"
}

echo "example group, 2 processes, $((size >> 20)) MiB in 4 allocations; times in ms, images in MiB"
printf "%-22s %9s %9s %9s %9s %9s %9s %9s %9s\n" "" prepare native-ck criu-dump criu-rest native-rs vmm-rest total images
run shared-interposed 0
run private-plain 1

# The native steps alone: SIZE split over P processes, suspended and resumed in place.
native() { # P PARALLEL(0|1)
	local P=$1 dir=$work/native-$1-$2
	mkdir -p "$dir/control"
	export SNAPSHOT_CONTROL_DIR=$dir/control
	setsid "$build/bin/cusnap" run -- "$build/examples/vmm_group" --workers $((P - 1)) --allocs 4 \
		--size $((size / 4 / P)) --timeout 300 >"$dir/log" 2>&1 </dev/null &
	local pid=$!
	for _ in $(seq 600); do [ -f "$SNAPSHOT_CONTROL_DIR/ready-for-snapshot" ] && break; sleep 0.1; done
	local serial=${2/1/}
	env ${serial:+CUSNAP_NATIVE_PARALLEL=1} "$build/bin/cusnap" suspend --pid "$pid" --dir "$dir/ck" --content native \
		2>"$dir/suspend.err" >/dev/null
	env ${serial:+CUSNAP_NATIVE_PARALLEL=1} "$build/bin/cusnap" resume --pid "$pid" --dir "$dir/ck" \
		2>"$dir/resume.err" >/dev/null
	step() { sed -n "s/^cusnap: $1  *\([0-9.]*\) ms.*/\1/p" "$2" | head -1; }
	printf "%-10s %-12s %9s %11s %15s\n" "$P" "$([ "$2" = 1 ] && echo concurrent || echo serial)" \
		"$(step lock "$dir/suspend.err")" "$(step "native checkpoint" "$dir/suspend.err")" \
		"$(step "native restore+unlock" "$dir/resume.err")"
	kill -9 -- -"$pid" 2>/dev/null
	wait "$pid" 2>/dev/null || true
}

echo
echo "native steps of a suspend and resume (native content, $((size >> 20)) MiB over the group); ms"
printf "%-10s %-12s %9s %11s %15s\n" processes order lock checkpoint restore+unlock
for P in 1 4 8; do
	native "$P" 1
	native "$P" 0
done
exit 0
