#!/bin/bash
# SPDX-License-Identifier: MIT
# bench/datapath.sh: the bytes of a checkpoint and a restore, leg by leg
# (DESIGN.md §6.2, §6.3, §11). For each size (GiB of VMM memory shared by the
# example group: a parent and one worker, 4 allocations), each content mode
# (host: cusnap copies the shared bytes into the creator's arena; file: into a
# file of their own in the checkpoint directory, not through the process's
# memory; native: the driver's checkpoint carries them) and each place (tmpfs, /dev/shm, keeps the
# disk out; disk, /var/tmp), `cusnap checkpoint` and `cusnap restore --json`
# give every phase's time and bytes; printed with GiB/s:
#   prep    PREPARE (host: device to host into the arena; file: to the file)
#   native  the native checkpoint (GPU memory released; cuemu copies to host;
#           GiB/s of the shared bytes with native content only)
#   dump    CRIU's dump (the images' bytes)
#   crest   CRIU's restore (the images' bytes)
#   nrest   native restore + unlock
#   rebuild RESTORE_CREATORS (host, file: host to device)
# with the whole checkpoint and restore, the workload's peak extra anonymous
# memory during the checkpoint (sampled every 50 ms, against before it), and
# beside them, in the same run: the CRIU floor (a plain process holding as
# many bytes as the group's images, `criu dump` and `criu restore`), this
# machine's single-core memcpy, the rate of a first write to fresh memory (what
# bounds every leg that lands in new pages) and a page-cache read. Needs root.
#   bench/datapath.sh            BENCH_SIZES="1 2" (GiB), BENCH_PLACES="tmpfs disk",
#                                BENCH_CONTENTS="host file native", BENCH_WORKER_MIB=64
#                                (BENCH_SIZES="" runs the worker shape alone)
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$repo/build}
sizes=${BENCH_SIZES-1 2}
places=${BENCH_PLACES-tmpfs disk}
contents=${BENCH_CONTENTS:-host file native}
export LD_LIBRARY_PATH=$build/emu
[ "$(id -u)" = 0 ] || { echo "bench/datapath.sh: needs root (CRIU)" >&2; exit 69; }
criu=$("$repo/scripts/setup-criu.sh" "$build" 2>/dev/null | tail -1) || { echo "no CRIU" >&2; exit 69; }
[ -x "$build/bench/hold" ] || { echo "build/bench/hold missing: make bench" >&2; exit 69; }
cusnap=$build/bin/cusnap
tmp_tmpfs=$(mktemp -d /dev/shm/cusnap-datapath-XXXXXX)
tmp_disk=$(mktemp -d /var/tmp/cusnap-datapath-XXXXXX)
trap 'rm -rf "$tmp_tmpfs" "$tmp_disk"' EXIT

# One field of one phase of a --json summary: phase FIELD JSON NAME.
phase() {
	grep -o "{\"phase\":\"$3\",[^}]*}" <<<"$2" | head -1 | grep -o "\"$1\":[0-9.e+-]*" | cut -d: -f2
}
# GiB/s of BYTES in SECONDS ("-" when either is missing).
rate() { awk -v b="${1:-0}" -v s="${2:-0}" 'BEGIN { if (b > 0 && s > 0) printf "%.2f", b / 1073741824 / s; else printf "-" }'; }
secs() { awk -v s="${1:-0}" 'BEGIN { printf "%.2f", s }'; }
# The tree of PID: its processes.
tree() { local p=$1; echo "$p"; for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do tree "$c"; done; }
# Anonymous resident memory of the tree of PID, in bytes.
anon() {
	local t=0 p kib
	for p in $(tree "$1"); do
		kib=$(awk '/^RssAnon:/ { print $2 }' /proc/"$p"/status 2>/dev/null)
		t=$((t + ${kib:-0} * 1024))
	done
	echo $t
}
# Wait until every PID listed is gone (init reaps the dumped workers).
gone() { local p; for p in "$@"; do for _ in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done; done; }

# One checkpoint and restore of the group: prints a table row. GPU: the bytes
# the native legs' rates are of (0: not printed); the rest, vmm_group's options.
group_run() { # LABEL CONTENT PLACE DIR GPU VMM_GROUP_ARGS...
	local gib=$1 content=$2 place=$3 dir=$4 gpu=$5
	shift 5
	mkdir -p "$dir/control"
	export SNAPSHOT_CONTROL_DIR=$dir/control
	setsid "$cusnap" run -- "$build/examples/vmm_group" "$@" --timeout 600 >"$dir/log" 2>&1 </dev/null &
	local pid=$!
	for _ in $(seq 1200); do [ -f "$dir/control/ready-for-snapshot" ] && break; sleep 0.1; done
	local procs base peak=0 c r
	procs=$(tree "$pid")
	base=$(anon "$pid")
	( while kill -0 "$pid" 2>/dev/null; do echo $(($(anon "$pid") - base)); sleep 0.05; done ) >"$dir/mem" &
	local sampler=$!
	own_mem=$base
	c=$("$cusnap" checkpoint --pid "$pid" --dir "$dir/ckpt" --criu "$criu" --content "$content" --json --quiet 2>"$dir/ckpt.err")
	kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
	peak=$(sort -n "$dir/mem" | tail -1)
	kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
	gone $procs
	r=$("$cusnap" restore --dir "$dir/ckpt" --criu "$criu" --json --quiet 2>"$dir/restore.err")
	local root
	root=$(grep -o '"root_pid":[0-9]*' <<<"$r" | cut -d: -f2)
	[ -n "$root" ] && tail --pid="$root" -f /dev/null
	local pass
	pass=$(grep -c '^PASS' "$dir/log")
	local images total_c total_r
	images=$(grep -o '"image_bytes":[0-9]*' <<<"$c" | cut -d: -f2)
	total_c=$(grep -o '"total":[0-9.]*' <<<"$c" | cut -d: -f2)
	total_r=$(grep -o '"total":[0-9.]*' <<<"$r" | cut -d: -f2)
	local pb ps ns db ds cs cb nr rb rs
	pb=$(phase bytes "$c" PREPARE) ps=$(phase seconds "$c" PREPARE) ns=$(phase seconds "$c" "native checkpoint")
	db=$(phase bytes "$c" "criu dump") ds=$(phase seconds "$c" "criu dump")
	cb=$(phase bytes "$r" "criu restore") cs=$(phase seconds "$r" "criu restore")
	nr=$(phase seconds "$r" "native restore+unlock")
	rb=$(phase bytes "$r" RESTORE_CREATORS) rs=$(phase seconds "$r" RESTORE_CREATORS)
	# The native legs: the GPU memory they moved, as the phases say, else GPU.
	local nb
	nb=$(phase bytes "$c" "native checkpoint")
	[ "${nb:-0}" -gt 0 ] 2>/dev/null && gpu=$nb
	[ "$content" = native ] || [ "${nb:-0}" -gt 0 ] 2>/dev/null || gpu=0
	printf "%-4s %-6s %-5s | %5s %5s | %5s %5s | %5s %5s | %6s %6s | %5s %5s | %5s %5s | %6s %6s | %6s | %s/2\n" \
		"$gib" "$content" "$place" "$(secs "$ps")" "$(rate "$pb" "$ps")" "$(secs "$ns")" "$(rate "$gpu" "$ns")" \
		"$(secs "$ds")" "$(rate "$db" "$ds")" "$(secs "$cs")" "$(rate "$cb" "$cs")" "$(secs "$nr")" \
		"$(rate "$gpu" "$nr")" "$(secs "$rs")" "$(rate "$rb" "$rs")" "$(awk -v t="${total_c:-0}" 'BEGIN{printf "%.2f", t/1000}')" \
		"$(awk -v t="${total_r:-0}" 'BEGIN{printf "%.2f", t/1000}')" "$(awk -v m="${peak:-0}" 'BEGIN{printf "%.2f", m/1073741824}')" "$pass"
	echo "${images:-0}" >"$dir/images-bytes"
	echo "${images:-0} $((${own_mem:-0} + ${nb:-0})) ${total_c:-0} ${total_r:-0}" >"$dir/sums"
	rm -rf "$dir/ckpt"
}

# The CRIU floor for BYTES in DIR: "dump-s restore-s".
floor_run() { # BYTES DIR
	local bytes=$1 dir=$2
	mkdir -p "$dir/images"
	setsid "$build/bench/hold" "$bytes" "$dir/ready" </dev/null >/dev/null 2>&1 &
	local pid=$!
	for _ in $(seq 1200); do [ -f "$dir/ready" ] && break; sleep 0.05; done
	local t0 t1 t2
	t0=$(date +%s.%N)
	"$criu" dump -t "$pid" -D "$dir/images" -o dump.log >/dev/null 2>&1
	t1=$(date +%s.%N)
	wait "$pid" 2>/dev/null
	"$criu" restore -d -D "$dir/images" -o restore.log >/dev/null 2>&1
	t2=$(date +%s.%N)
	kill -9 "$pid" 2>/dev/null
	gone "$pid"
	awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "%.2f %.2f", b - a, c - b }'
	rm -rf "$dir/images" "$dir/ready"
}

echo "bench/datapath.sh: $(nproc) cores, $(uname -r), CRIU $("$criu" --version 2>/dev/null | awk '/^Version/ { print $2 }')"
read -r mc ft fk <<<"$("$build/bench/hold" --memcpy $((1 << 30)))"
echo "single-core memcpy: $mc GiB/s (1 GiB, best of 3); fresh memory written the first time: $ft GiB/s" \
	"through a fault a page, $fk GiB/s by the kernel into a fresh file (pwrite)"
echo
echo "                  | prep        | native      | criu dump   | criu restore  | native rest | rebuild     | total         | peak   |"
echo "GiB content place |   s   GiB/s |   s   GiB/s |   s   GiB/s |    s   GiB/s  |   s   GiB/s |   s   GiB/s |  ckpt   rest  | +GiB   | PASS"
floors=()
for gib in $sizes; do
	for place in $places; do
		base=$tmp_tmpfs
		[ "$place" = disk ] && base=$tmp_disk
		for content in $contents; do
			per=$((gib * (1 << 30) / 4))
			gpu=0
			[ "$content" = native ] && gpu=$((gib * (1 << 30)))
			group_run "$gib" "$content" "$place" "$base/g-$gib-$content" "$gpu" --workers 1 --allocs 4 --size "$per"
		done
		imgs=$(cat "$base/g-$gib-host/images-bytes" 2>/dev/null || cat "$base"/g-"$gib"-*/images-bytes | head -1)
		floors+=("$gib $place $imgs $(floor_run "$imgs" "$base/floor-$gib")")
	done
done
# The worker shape (issue of record: DESIGN.md §11.1): 2 processes, each with
# private weights (cuMemAlloc), a KV cache of which a quarter is written, an
# expandable segment and an untracked pool, and a buffer shared with the
# neighbour; BENCH_WORKER_MIB (64) sizes the weights and the KV cache.
wm=${BENCH_WORKER_MIB:-64}
worker_rows=()
for place in $places; do
	base=$tmp_tmpfs
	[ "$place" = disk ] && base=$tmp_disk
	for content in $contents; do
		VMM_GROUP_PRIVATE=1 VMM_GROUP_WEIGHTS=$((wm << 20)) VMM_GROUP_KV=$((wm << 20)) \
			VMM_GROUP_KV_USED=$((wm << 18)) group_run "w$wm" "$content" "$place" "$base/w-$content" 0 \
			--workers 1 --allocs 1 --size $((8 << 20))
	done
	# What the worker wrote: the shared buffer; each process's untracked 8 MiB,
	# weights (64 KiB + W), segment (3 x 2 MiB) and KV cache's used quarter.
	written=$(((8 << 20) + 2 * ((8 << 20) + (64 << 10) + (wm << 20) + (6 << 20) + (wm << 18))))
	read -r fd fr <<<"$(floor_run "$written" "$base/floor-w")"
	for content in $contents; do
		read -r im own tc tr <"$base/w-$content/sums"
		worker_rows+=("$(printf "  %-6s %-5s: images %6.1f MiB (the processes' own memory, the driver's copy of untracked GPU memory in it: %6.1f MiB), checkpoint + restore %5.2f s = %.2fx the floor's %5.2f s" \
			"$content" "$place" "$(awk -v b="$im" 'BEGIN{print b/1048576}')" "$(awk -v b="$own" 'BEGIN{print b/1048576}')" \
			"$(awk -v a="$tc" -v b="$tr" 'BEGIN{print (a+b)/1000}')" \
			"$(awk -v a="$tc" -v b="$tr" -v c="$fd" -v d="$fr" 'BEGIN{ if (c+d > 0) print (a+b)/1000/(c+d); else print 0 }')" \
			"$(awk -v c="$fd" -v d="$fr" 'BEGIN{print c+d}')")")
	done
	worker_rows+=("$(printf "  floor  %-5s: %.1f MiB the worker wrote: dump %5.2f s, restore %5.2f s" "$place" "$(awk -v b="$written" 'BEGIN{print b/1048576}')" "$fd" "$fr")")
done
echo
echo "the worker shape (rows w$wm above), against the CRIU floor of the bytes it wrote:"
for w in "${worker_rows[@]}"; do echo "$w"; done
echo
echo "CRIU floor: a plain process holding as many bytes as the group's host-content images"
for f in "${floors[@]}"; do
	read -r gib place bytes d r <<<"$f"
	printf "  %s GiB group, %-5s: %.2f GiB: dump %5.2f s (%s GiB/s), restore %5.2f s (%s GiB/s)\n" "$gib" "$place" \
		"$(awk -v b="$bytes" 'BEGIN{print b/1073741824}')" "$d" "$(rate "$bytes" "$d")" "$r" "$(rate "$bytes" "$r")"
done
# The page cache: one image file read twice, the second time timed.
f=$(mktemp "$tmp_tmpfs/read-XXXXXX")
head -c $((1 << 30)) /dev/urandom >"$f"
cat "$f" >/dev/null
t0=$(date +%s.%N)
cat "$f" >/dev/null
t1=$(date +%s.%N)
echo "page-cache read (tmpfs, 1 GiB, cat): $(rate $((1 << 30)) "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')") GiB/s"
