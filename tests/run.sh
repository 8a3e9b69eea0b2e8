#!/bin/bash
# SPDX-License-Identifier: MIT
# Run every test executable of a build tree: tests/run.sh BUILD LABEL
# (TESTS_ONLY, TESTS_SKIP: regular expressions over the names, e2e/test_nccl)
# Exit 0 = pass, 77 = skip, anything else = fail. Each test's output goes to
# BUILD/test-logs/NAME.log and is shown when it fails; each line gives the
# program's time against its limit (TEST_TIMEOUT seconds, default 300), and one
# that took more than half of it is named at the end, with the counts and the
# pass's own time. Counts are appended to
# BUILD/test-results for tests/summary.sh.
#
# TEST_JOBS programs run at once (default 2: most of a program's time is spent
# waiting for the processes it drives). The CRIU programs run alone: a restore
# needs its dumped PIDs free, and another program's processes could take them.
set -u
build=${1:?build dir}
label=${2:-$build}
limit=${TEST_TIMEOUT:-300}
jobs_max=${TEST_JOBS:-2}
alone='^(check_readme|e2e/test_gate|e2e/test_operator|e2e/test_checkpoint|e2e/test_network|e2e/test_criu_plugin|e2e/test_sweep_checkpoint|e2e/test_nccl|emu/test_criu|criu/check_zdtm|criu/check_podman|e2e/test_group)$'
export TMPDIR=${TMPDIR:-/tmp}
logs=$build/test-logs
mkdir -p "$logs"
rm -f "$logs"/*.done
pass=0 fail=0 skip=0
failed=() slow=() times=() running=()

log_of() { local name=$1; echo "$logs/${name//\//_}.log"; }

# One program, its exit status and milliseconds into LOG.done.
run_one() {
	local t=$1 log=$2 start rc
	start=${EPOCHREALTIME/./}
	timeout --kill-after=10 "$limit" "$t" >"$log" 2>&1
	rc=$?
	echo "$rc $(((${EPOCHREALTIME/./} - start) / 1000))" >"$log.done.tmp" && mv "$log.done.tmp" "$log.done"
}

report() {
	local name=$1 log rc ms secs of
	log=$(log_of "$name")
	read -r rc ms <"$log.done"
	rm -f "$log.done"
	secs=$((ms / 1000)).$((ms % 1000 / 100))
	of="${secs} s of ${limit} s"
	times+=("$ms $name")
	[ $((ms * 2)) -gt $((limit * 1000)) ] && slow+=("$name ($of)")
	case $rc in
	0) pass=$((pass + 1)); echo "[$label] PASS $name ($of)" ;;
	77) skip=$((skip + 1)); echo "[$label] SKIP $name: $(grep -m1 '^SKIP' "$log" | cut -c7-)" ;;
	*)
		fail=$((fail + 1)); failed+=("$name")
		echo "[$label] FAIL $name (exit $rc, $of)"
		[ "$rc" = 124 ] && echo "    timed out after ${limit}s"
		tail -n 40 "$log" | sed 's/^/    /'
		;;
	esac
}

# Report the programs that finished; keep the others in running.
collect() {
	local still=() name
	for name in "${running[@]}"; do
		if [ -f "$(log_of "$name").done" ]; then report "$name"; else still+=("$name"); fi
	done
	running=("${still[@]}")
}

# Wait until fewer than $1 programs run.
drain_to() {
	collect
	while [ ${#running[@]} -ge "$1" ]; do
		wait -n 2>/dev/null || true
		collect
	done
}

for t in $(find "$build/tests" -path '*/tmp-*' -prune -o -type f -perm -u+x ! -name '*_helper' ! -name '*.so*' -print 2>/dev/null | sort); do
	name=${t#"$build/tests/"}
	# TESTS_ONLY / TESTS_SKIP: extended regular expressions over the names (e2e/test_nccl).
	[ -n "${TESTS_ONLY:-}" ] && ! [[ $name =~ $TESTS_ONLY ]] && continue
	[ -n "${TESTS_SKIP:-}" ] && [[ $name =~ $TESTS_SKIP ]] && continue
	if [[ $name =~ $alone ]]; then
		drain_to 1
		run_one "$t" "$(log_of "$name")"
		report "$name"
		continue
	fi
	drain_to "$jobs_max"
	run_one "$t" "$(log_of "$name")" &
	running+=("$name")
done
drain_to 1
echo "[$label] slowest: $(printf '%s\n' "${times[@]}" | sort -rn | head -4 |
	awk '{ printf "%s%s %.1f s", (NR > 1 ? ", " : ""), $2, $1 / 1000 }')"
for s in "${slow[@]}"; do echo "[$label] over half its limit: $s"; done
echo "$pass $fail $skip" >>"$build/test-results"
echo "[$label] $pass passed, $fail failed, $skip skipped${failed:+ (failed: ${failed[*]})} in $SECONDS s"
[ $fail = 0 ]
