#!/bin/bash
# SPDX-License-Identifier: MIT
# bench/multicast.sh: cusnap suspend + resume in place of the example group
# with an NVLS-style multicast object (VMM_GROUP_MULTICAST=1), for groups of
# several sizes; prints the time of each multicast step next to the unicast
# ones and the whole, in ms (on cuemu: the control plane, not GPU work).
#   bench/multicast.sh [PROCESSES...] (default 2 4 8)
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$repo/build}
export LD_LIBRARY_PATH=$build/emu
work=$(mktemp -d /tmp/cusnap-bench-mc-XXXXXX)
trap 'rm -rf "$work"' EXIT
[ $# -gt 0 ] || set -- 2 4 8
step() { # NAME LOG: the step's ms from a progress line
	awk -v n="$1" '$2 == n {print $3}' "$2" | head -1
}
printf "%-9s %10s %10s %10s %10s %10s %10s %10s\n" processes PREP_MC PREPARE RESTORE_MC IMPORT_MC BIND_MC suspend resume
for procs in "$@"; do
	dir=$work/$procs
	export SNAPSHOT_CONTROL_DIR=$dir/control
	mkdir -p "$SNAPSHOT_CONTROL_DIR"
	VMM_GROUP_MULTICAST=1 setsid "$build/bin/cusnap" run -- "$build/examples/vmm_group" --workers $((procs - 1)) \
		--allocs 2 --timeout 120 >"$dir/log" 2>&1 </dev/null &
	pid=$!
	for _ in $(seq 300); do [ -f "$SNAPSHOT_CONTROL_DIR/ready-for-snapshot" ] && break; sleep 0.1; done
	t0=$(date +%s%N)
	"$build/bin/cusnap" suspend --pid $pid --dir "$dir/state" 2>"$dir/suspend.log" || { cat "$dir/suspend.log"; exit 1; }
	t1=$(date +%s%N)
	"$build/bin/cusnap" resume --pid $pid --dir "$dir/state" 2>"$dir/resume.log" || { cat "$dir/resume.log"; exit 1; }
	t2=$(date +%s%N)
	touch "$SNAPSHOT_CONTROL_DIR/restore-complete"
	wait $pid || { echo "the group failed its checks:"; cat "$dir/log"; exit 1; }
	printf "%-9s %10s %10s %10s %10s %10s %10.1f %10.1f\n" "$procs" \
		"$(step PREPARE_MULTICAST "$dir/suspend.log")" "$(step PREPARE "$dir/suspend.log")" \
		"$(step RESTORE_MULTICAST "$dir/resume.log")" "$(step RESTORE_MULTICAST_IMPORT "$dir/resume.log")" \
		"$(step RESTORE_MULTICAST_BIND "$dir/resume.log")" "$(((t1 - t0) / 100000))e-1" "$(((t2 - t1) / 100000))e-1"
done
