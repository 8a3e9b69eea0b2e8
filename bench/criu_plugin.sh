#!/bin/bash
# SPDX-License-Identifier: MIT
# bench/criu_plugin.sh: the same example group (3 processes, SIZE bytes of
# shared VMM memory in 4 allocations, under the interposer) checkpointed and
# restored twice in one run: with `cusnap checkpoint` + `cusnap restore`, and
# with plain `criu dump` + `criu restore` and cusnap's CRIU plugin
# (build/lib/criu). Prints the wall time of each half and their sum, and the
# images' size; both restores must pass the group's own checks. Needs root (CRIU).
#   bench/criu_plugin.sh [SIZE_BYTES] [CONTENT] (default 256 MiB, host)
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$repo/build}
size=${1:-$((256 << 20))}
content=${2:-host}
per=$((size / 4))
export LD_LIBRARY_PATH=$build/emu
work=$(mktemp -d /tmp/cusnap-bench-plugin-XXXXXX)
trap 'rm -rf "$work"' EXIT
criu=$("$repo/scripts/setup-criu.sh" "$build" 2>/dev/null | tail -1) || { echo "no CRIU" >&2; exit 69; }
ms() { echo $(($(date +%s%N) / 1000000)); }

start_group() { # DIR: sets pid and kids
	export SNAPSHOT_CONTROL_DIR=$1/control
	mkdir -p "$SNAPSHOT_CONTROL_DIR" "$1/ckpt/images"
	setsid "$build/bin/cusnap" run -- "$build/examples/vmm_group" --workers 2 --allocs 4 --size "$per" \
		--timeout 300 >"$1/log" 2>&1 </dev/null &
	pid=$!
	disown "$pid" # (no job notice when the dump ends it)
	for _ in $(seq 600); do [ -f "$SNAPSHOT_CONTROL_DIR/ready-for-snapshot" ] && break; sleep 0.1; done
	kids=$(cat /proc/"$pid"/task/*/children 2>/dev/null)
}
gone() { # the dumped processes reaped, so that the restore can take their PIDs
	wait "$pid" 2>/dev/null
	for p in $pid $kids; do for _ in $(seq 100); do [ -e /proc/"$p" ] || break; sleep 0.1; done; done
}
passed() { # DIR ROOT: the restored group verified itself
	for _ in $(seq 600); do kill -0 "$2" 2>/dev/null || break; sleep 0.1; done
	grep -c "^PASS vmm_group" "$1/log"
}
line() { printf "%-28s %10s %10s %10s %8s %6s\n" "$@"; }

echo "example group, 3 processes, $((size >> 20)) MiB in 4 allocations, $content content; wall times in ms"
line "" checkpoint restore total images passed

d=$work/cusnap
start_group "$d"
t0=$(ms)
"$build/bin/cusnap" checkpoint --pid "$pid" --dir "$d/ckpt" --content "$content" --criu "$criu" >/dev/null 2>&1
t1=$(ms)
gone
"$build/bin/cusnap" restore --dir "$d/ckpt" --criu "$criu" >/dev/null 2>&1
t2=$(ms)
line "cusnap checkpoint+restore" $((t1 - t0)) $((t2 - t1)) $((t2 - t0)) "$(du -sm "$d/ckpt/images" | cut -f1)M" \
	"$(passed "$d" "$(cat "$d/ckpt/restore.pid" 2>/dev/null || echo 0)")/3"

d=$work/plugin
start_group "$d"
shell=--shell-job
[ "$(ps -o sid= -p "$pid" | tr -d ' ')" = "$pid" ] && shell=
export CUSNAP_LIBCUDA=$build/emu/libcuda.so.1 CUSNAP_CONTENT=$content
t0=$(ms)
"$criu" dump -t "$pid" -D "$d/ckpt/images" -o dump.log --libdir "$build/lib/criu" $shell >/dev/null 2>&1
t1=$(ms)
gone
"$criu" restore -d -D "$d/ckpt/images" -o restore.log --libdir "$build/lib/criu" --pidfile "$d/ckpt/restore.pid" \
	$shell >/dev/null 2>&1
t2=$(ms)
line "criu dump+restore, plugin" $((t1 - t0)) $((t2 - t1)) $((t2 - t0)) "$(du -sm "$d/ckpt/images" | cut -f1)M" \
	"$(passed "$d" "$(cat "$d/ckpt/restore.pid" 2>/dev/null || echo 0)")/3"
