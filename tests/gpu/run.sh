#!/bin/bash
# tests/gpu/run.sh: the real-driver qualification run, for a GPU host (issue 7).
# Builds what it needs (gcc, nvcc, the real cuda.h) and runs against the real
# libcuda.so.1:
#   1. two processes sharing VMM memory through the interposer, checked by kernels;
#   2. cusnap suspend/resume of that group in both content modes (kernels check
#      the sharing afterwards; GPU memory in use must drop while suspended), and
#      of the example group (4 allocations across devices);
#   3. the same for processes without the interposer (native steps only);
#   4. host-mode copy bandwidth against a pinned cuMemcpy baseline (GB/s, ratio);
#   5. which of cuemu's documented driver behaviours hold on this driver;
#   6. a multicast group (issue 6) suspended and resumed, where the host
#      supports multicast objects.
# Prints one report; exits non-zero on any failure. Needs root for nothing but
# reading other processes' /proc entries of the same user.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$repo/build}
cd "$repo"
report=()
failures=0
note() { report+=("$1"); echo "gpu: $1" >&2; }
failed() { note "FAIL $1"; failures=$((failures + 1)); }
passed() { note "PASS $1"; }

command -v nvidia-smi >/dev/null || { echo "gpu: nvidia-smi not found: this is not a GPU host" >&2; exit 69; }
nvidia-smi -L >&2 || { echo "gpu: nvidia-smi sees no GPU" >&2; exit 69; }
make -s BUILD="$build" gpu-build >&2 || { echo "gpu: make gpu-build failed" >&2; exit 1; }

# The real driver, not cuemu: binaries linked against cuemu carry a RUNPATH that
# LD_LIBRARY_PATH overrides.
drvdir=$(dirname "$(ldconfig -p | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')")
export LD_LIBRARY_PATH=$drvdir
unset CUEMU_FAULT CUEMU_PROFILE
work=$(mktemp -d /tmp/cusnap-gpu-XXXXXX)
export SNAPSHOT_CONTROL_DIR=$work/control
mkdir -p "$SNAPSHOT_CONTROL_DIR"
cusnap=$build/bin/cusnap
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | awk '{s += $1} END {print s}'; }

# Start a parked workload (our child, so that we can wait for it) and wait for
# ready-for-snapshot; sets pid.
start() {
	rm -f "$SNAPSHOT_CONTROL_DIR"/ready-for-snapshot "$SNAPSHOT_CONTROL_DIR"/restore-complete
	setsid "$@" >"$work/log" 2>&1 </dev/null &
	pid=$!
	for _ in $(seq 600); do
		[ -f "$SNAPSHOT_CONTROL_DIR/ready-for-snapshot" ] && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.1
	done
}

finish() { # PID: let it verify; 0 when it passed
	touch "$SNAPSHOT_CONTROL_DIR/restore-complete"
	local rc=0
	wait "$1" || rc=$?
	return $rc
}

# 1. Sharing through the interposer, checked by kernels.
if timeout 60 "$cusnap" run -- "$build/gpu/kernel_share" >"$work/log" 2>&1; then
	passed "1 kernels in two processes share VMM memory through capabilities"
else
	failed "1 kernel sharing through the interposer: $(tail -3 "$work/log" | tr '\n' ' ')"
fi

# 2. suspend/resume, both content modes.
for content in host native; do
	start "$cusnap" run -- "$build/gpu/kernel_share" --park
	before=$(gpu_used)
	if "$cusnap" suspend --pid "$pid" --content "$content" --dir "$work/s-$content" 2>"$work/suspend.log"; then
		during=$(gpu_used)
		"$cusnap" resume --pid "$pid" --dir "$work/s-$content" 2>"$work/resume.log" || failed "2 resume ($content): $(tail -2 "$work/resume.log" | tr '\n' ' ')"
		if finish "$pid"; then
			passed "2 suspend/resume ($content content): kernels see shared memory again; GPU memory ${before} -> ${during} MiB while suspended"
		else
			failed "2 suspend/resume ($content): $(grep -h FAIL "$work/log" | tr '\n' ' ')"
		fi
		[ "$during" -lt "$before" ] || failed "2 GPU memory did not drop while suspended ($before -> $during MiB)"
	else
		failed "2 suspend ($content): $(tail -3 "$work/suspend.log" | tr '\n' ' ')"
		kill -9 "$pid" 2>/dev/null
	fi
done
start "$cusnap" run -- "$build/examples/vmm_group" --workers 2 --allocs 4
if "$cusnap" suspend --pid "$pid" --dir "$work/s-group" 2>"$work/suspend.log" &&
	"$cusnap" resume --pid "$pid" --dir "$work/s-group" 2>"$work/resume.log" && finish "$pid"; then
	passed "2 example group (3 processes, 4 allocations across devices): suspend/resume"
else
	failed "2 example group: $(cat "$work/suspend.log" "$work/resume.log" | tail -3 | tr '\n' ' ')"
fi

# 6. Multicast: the object is taken down before the native checkpoint (which
# would hang on it) and rebuilt after; the workload checks its members and
# rebinds with its old handle.
start env VMM_GROUP_MULTICAST=1 "$cusnap" run -- "$build/examples/vmm_group" --workers 1 --allocs 1
if grep -q "CUDA_ERROR_NOT_SUPPORTED\|CUDA_ERROR_INVALID_DEVICE" "$work/log"; then
	note "SKIP 6 multicast: this host does not support multicast objects ($(grep -m1 multicast "$work/log"))"
	kill -9 "$pid" 2>/dev/null
elif timeout 120 "$cusnap" suspend --pid "$pid" --dir "$work/s-mc" 2>"$work/suspend.log" &&
	timeout 120 "$cusnap" resume --pid "$pid" --dir "$work/s-mc" 2>"$work/resume.log" && finish "$pid"; then
	passed "6 multicast group (2 processes): suspend/resume, binds and mappings rebuilt"
else
	failed "6 multicast group: $(cat "$work/log" "$work/suspend.log" "$work/resume.log" | grep -v '^PASS' | tail -4 | tr '\n' ' ')"
	kill -9 "$pid" 2>/dev/null
fi

# 3 and 5a. Without the interposer: native steps only. Is an import restored private?
start "$build/gpu/kernel_share" --park
if "$cusnap" suspend --pid "$pid" --dir "$work/s-native" 2>/dev/null && "$cusnap" resume --pid "$pid" --dir "$work/s-native" 2>/dev/null; then
	passed "3 suspend/resume without the interposer (native steps only)"
	if finish "$pid"; then private="no (sharing survived)"; else private="yes (kernels no longer see each other's writes)"; fi
else
	failed "3 native-only suspend/resume"
	kill -9 "$pid" 2>/dev/null
	private="unknown"
fi

# 5b. Re-export of a natively restored exportable allocation.
helper=$build/tests/emu/target_helper
if [ -x "$helper" ]; then
	mkdir -p "$work/t"
	setsid "$helper" "$work/t" a >"$work/t/a.log" 2>&1 </dev/null &
	tpid=$!
	for _ in $(seq 100); do [ -f "$work/t/a.ready" ] && break; sleep 0.1; done
	"$cusnap" suspend --pid "$tpid" --dir "$work/s-t" 2>/dev/null && "$cusnap" resume --pid "$tpid" --dir "$work/s-t" 2>/dev/null
	echo export >"$work/t/a.cmd"
	for _ in $(seq 100); do [ -f "$work/t/a.out" ] && break; sleep 0.1; done
	reexport=$(cat "$work/t/a.out" 2>/dev/null || echo unknown)
	kill -9 "$tpid" 2>/dev/null
else
	reexport="not measured (tests not built)"
fi

# 4. Host-mode copy bandwidth against the pinned baseline.
baseline=$("$build/gpu/copy_bench" $((1 << 30)) 2>/dev/null || echo 0)
start "$cusnap" run -- "$build/examples/vmm_group" --workers 1 --allocs 4 --size $((256 << 20))
json=$("$build/bin/snapshot-cuda-vmm" --prepare --json --checkpoint-dir "$work" --process "$pid" "$pid" \
	$(for c in $(cat /proc/"$pid"/task/*/children); do echo --process "$c" "$c"; done) 2>/dev/null)
"$build/bin/snapshot-cuda-vmm" --restore --checkpoint-dir "$work" --process "$pid" "$pid" \
	$(for c in $(cat /proc/"$pid"/task/*/children); do echo --process "$c" "$c"; done) 2>/dev/null
finish "$pid" || failed "4 the example group after prepare+restore"
bytes=$(echo "$json" | sed -n 's/.*"bytes_copied":\([0-9]*\).*/\1/p')
ms=$(echo "$json" | sed -n 's/.*"prepare":\([0-9.]*\).*/\1/p')
rate=$(awk -v b="${bytes:-0}" -v m="${ms:-0}" 'BEGIN { if (m > 0) printf "%.2f", b / (m / 1000) / 1e9; else print 0 }')
ratio=$(awk -v r="$rate" -v p="$baseline" 'BEGIN { if (p > 0) printf "%.2f", r / p; else print 0 }')
note "4 host-mode prepare copied ${bytes:-?} bytes in ${ms:-?} ms: $rate GB/s; pinned cuMemcpyDtoH baseline $baseline GB/s; ratio $ratio (target >= 0.8)"

echo
echo "==== cusnap GPU qualification report ($(date -u +%FT%TZ)) ===="
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/GPU: /'
for line in "${report[@]}"; do echo "$line"; done
echo
echo "driver behaviours (cuemu profiles assume these):"
printf '  %-58s %s\n' "import restored natively as a private copy" "$private"
printf '  %-58s %s\n' "re-export of a natively restored exportable allocation" "$reexport"
echo
[ $failures = 0 ] && echo "RESULT: PASS" || echo "RESULT: FAIL ($failures)"
rm -rf "$work"
[ $failures = 0 ]
