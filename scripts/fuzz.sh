#!/bin/bash
# SPDX-License-Identifier: MIT
# make fuzz FUZZ_SECONDS=N: every libFuzzer target (ASan+UBSan) for N seconds
# over a copy of its seed corpus; prints execs and the result per target.
# Exit 1 when any target found a crash, a leak or undefined behaviour.
set -u
build=${1:?build dir}
seconds=${FUZZ_SECONDS:-60}
status=0
shopt -s nullglob
helpers=("$build"/tests/fuzz/fuzz_*_helper)
[ ${#helpers[@]} -gt 0 ] || { echo "fuzz: no targets built (needs clang with -fsanitize=fuzzer)"; exit 1; }
for helper in "${helpers[@]}"; do
	name=$(basename "$helper"); name=${name#fuzz_}; name=${name%_helper}
	work=$(mktemp -d)
	cp -r tests/fuzz/corpus/"$name"/. "$work"/ 2>/dev/null || true
	log=$build/fuzz-$name.log
	"$helper" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 "$work" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
	if [ $rc = 0 ]; then
		echo "fuzz_$name: ${execs:-?} execs in ${seconds} s (${rate:-?}/s), no crash, leak or undefined behaviour"
	else
		echo "fuzz_$name: FAILED after ${execs:-?} execs (log: $log)"
		grep -m5 -E "ERROR|SUMMARY" "$log" | sed 's/^/    /'
		status=1
	fi
	rm -rf "$work"
done
exit $status
