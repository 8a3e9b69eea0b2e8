#!/bin/bash
# SPDX-License-Identifier: MIT
# What the interposer costs real NCCL (DESIGN.md §11): ncclCommInitRank time and
# driver calls per rank, 8 ranks of examples/nccl/nccl_group on cuemu, P2P and
# NVLS, with and without the shim. Prints figures; asserts nothing.
#
#   bench/nccl_init.sh [BUILD] [RUNS]     (make nccl first; RUNS default 3)
#
# Init time: the slowest rank's ncclCommInitRank, median over RUNS. Driver calls:
# every cuemu entry point called by the ranks over the example's whole life (init,
# allocation, registration, collectives, teardown), per rank, from cuemu's
# counters (CUSNAP_COUNT), median over RUNS.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:-$here/build}" && pwd)
runs=${2:-3}
ranks=8
[ -x "$B/examples/nccl_group" ] || { echo "bench/nccl_init: no $B/examples/nccl_group (make nccl)"; exit 69; }
work=$(mktemp -d /tmp/cusnap-nccl-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
for kind in pcie nvswitch; do "$B/bin/cuemu-topo" --kind $kind --devices $ranks >"$work/$kind.xml"; done

# One run: "INIT_MS CALLS_PER_RANK", or nothing when it failed.
one() {
	local mode=$1 shim=$2 n=$3 ctl=$work/ctl-$n counts=$work/counts-$n log=$work/log-$n
	local kind=pcie extra=(NCCL_NVLS_ENABLE=0)
	[ "$mode" = NVLS ] && kind=nvswitch extra=(NCCL_NVLS_ENABLE=1 CUEMU_TOPO=nvswitch)
	local cmd=("$B/examples/nccl_group" --ranks $ranks --timeout 120)
	[ "$shim" = shim ] && cmd=("$B/bin/cusnap" run -- "${cmd[@]}")
	rm -rf "$ctl" "$counts"
	: >"$counts"
	env LD_LIBRARY_PATH="$B/emu:$B/lib" CUEMU_DEVICES=$ranks NCCL_TOPO_FILE="$work/$kind.xml" \
		SNAPSHOT_CONTROL_DIR="$ctl" CUSNAP_COUNT="$counts" "${extra[@]}" "${cmd[@]}" >"$log" 2>&1 &
	local pid=$! waited=0
	while [ ! -f "$ctl/ready-for-snapshot" ] && [ $waited -lt 1200 ] && kill -0 $pid 2>/dev/null; do
		sleep 0.1
		waited=$((waited + 1))
	done
	touch "$ctl/restore-complete" 2>/dev/null
	wait $pid || return 0
	local init calls
	init=$(sed -n 's/.*ncclCommInitRank \([0-9.]*\) ms/\1/p' "$log" | sort -g | tail -1)
	# The call counters (256) follow 8 other slots (include/cusnap/counters.h), 8 bytes each.
	calls=$(od -An -t u8 -j 64 -N 2048 "$counts" | awk -v r=$ranks '{for (i = 1; i <= NF; i++) s += $i} END {printf "%.0f", s / r}')
	echo "$init $calls"
}

median() { sort -g | awk '{v[NR] = $1} END {print NR ? v[int((NR + 1) / 2)] : "-"}'; }

printf "%-5s %-6s %14s %16s\n" mode shim "init ms (max)" "driver calls/rank"
for mode in P2P NVLS; do
	for shim in none shim; do
		: >"$work/res"
		for n in $(seq 1 "$runs"); do one $mode $shim "$mode-$shim-$n" >>"$work/res"; done
		printf "%-5s %-6s %14s %16s\n" $mode $shim "$(cut -d' ' -f1 "$work/res" | median)" \
			"$(cut -d' ' -f2 "$work/res" | median)"
	done
done
