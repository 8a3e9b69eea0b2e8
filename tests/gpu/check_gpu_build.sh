#!/bin/bash
# SPDX-License-Identifier: MIT
# `make gpu-build` compiles everything tests/gpu/run.sh needs (here, without a
# GPU), so that the GPU code never rots; the script parses, refuses cuemu at
# once, fails clearly without a driver, and a rehearsal of every step on cuemu
# (CUSNAP_GPU_REHEARSAL=1) writes its report, with the checks cuemu can pass
# passing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)
repo=$(cd "$build/.." && pwd)
[ -n "${CUSNAP_SANITIZER:-}" ] && { echo "SKIP: compiled once, in the plain build"; exit 77; }
out=$(make -s -C "$repo" gpu-build BUILD="$build" 2>&1) || { echo "FAIL: make gpu-build"; echo "$out"; exit 1; }
for f in gpu/probe gpu/rt_clients gpu/copy_bench gpu/gate tests/emu/target_helper; do
	[ -x "$build/$f" ] || { echo "FAIL: $f was not built"; exit 1; }
done
nvcc=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
if [ -x "$nvcc" ]; then
	[ -x "$build/gpu/kernel_share" ] || { echo "FAIL: nvcc is there but kernel_share was not built"; exit 1; }
	echo "ok   make gpu-build: probe, rt_clients, copy_bench, target_helper, and kernel_share with nvcc"
else
	echo "ok   make gpu-build: probe, rt_clients, copy_bench, target_helper (no nvcc: no kernel_share)"
fi
run=$repo/tests/gpu/run.sh
bash -n "$run" || { echo "FAIL: tests/gpu/run.sh does not parse"; exit 1; }
status=0
LD_LIBRARY_PATH=$build/emu timeout 20 bash "$run" "$build" >/tmp/gpu-check.$$ 2>&1
rc=$?
if [ $rc = 2 ] && grep -q "refusing to qualify" /tmp/gpu-check.$$; then
	echo "ok   run.sh refuses to qualify cuemu (exit 2)"
else
	echo "FAIL: run.sh on cuemu exited $rc:"; sed 's/^/    /' /tmp/gpu-check.$$; status=1
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
	LD_LIBRARY_PATH= timeout 20 bash "$run" "$build" >/tmp/gpu-check.$$ 2>&1
	rc=$?
	if [ $rc = 69 ] && grep -q "no usable libcuda.so.1" /tmp/gpu-check.$$; then
		echo "ok   run.sh without a driver: exit 69 naming libcuda.so.1"
	else
		echo "FAIL: run.sh without a driver exited $rc:"; sed 's/^/    /' /tmp/gpu-check.$$; status=1
	fi
fi
rm -f /tmp/gpu-check.$$
# The rehearsal: every step on cuemu, to test the script itself.
rep=$(mktemp -d)
CUSNAP_GPU_REHEARSAL=1 GPU_DATAPATH_BYTES=$((16 << 20)) GPU_COPY_BYTES=$((64 << 20)) GPU_WORKER_BYTES=$((8 << 20)) \
	GPU_RUN_BUDGET_S=270 OUT=$rep \
	LD_LIBRARY_PATH=$build/emu timeout 300 bash "$run" "$build" >"$rep/stdout" 2>"$rep/stderr"
for f in report.txt report.json logs.tar.gz; do
	[ -s "$rep/$f" ] || { echo "FAIL: the rehearsal wrote no $f"; status=1; }
done
if [ -s "$rep/report.json" ] && command -v python3 >/dev/null; then
	python3 - "$rep/report.json" <<'PY' || status=1
import json, sys
d = json.load(open(sys.argv[1]))
st = {r["id"]: r["status"] for r in d["results"]}
want = ["G1a", "G2", "G3", "G4", "D", "W", "E8", "G7-host", "G7-native", "G8", "G9", "G10-host", "G10-native", "E4",
        "E6", "E7"]
bad = [i for i in want if st.get(i) != "PASS"]
# On cuemu, what the script asks of the driver about IPC, cuInit and holders is what cuemu does.
bad += ["assumption: " + a["what"] + " (seen " + a["seen"] + ")" for a in d["assumptions"]
        if ("IPC" in a["what"] or "cuInit" in a["what"] or "exports again" in a["what"] or "job" in a["what"] or "lock" in a["what"])
        and a["verdict"] != "confirmed"]
if st.get("P") != "SKIP" and not any(r["id"] == "P" and r["status"] == "SKIP" for r in d["results"]):
    bad.append("P (no REHEARSAL mark)")
if bad:
    print("FAIL: rehearsal on cuemu: not PASS:", ", ".join(bad))
    for r in d["results"]:
        print("    %s %s %s" % (r["status"], r["id"], r["facts"][:300]))
    sys.exit(1)
print("ok   rehearsal on cuemu: report.json valid, %d checks, %s pass there, %d assumptions listed"
      % (len(d["results"]), "/".join(want), len(d["assumptions"])))
PY
fi
rm -rf "$rep"
exit $status
