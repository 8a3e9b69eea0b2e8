#!/bin/bash
# SPDX-License-Identifier: MIT
# Run every test executable of a build tree: tests/run.sh BUILD LABEL
# Exit 0 = pass, 77 = skip, anything else = fail. Each test's output goes to
# BUILD/test-logs/NAME.log and is shown when it fails. Counts are appended to
# BUILD/test-results for tests/summary.sh.
set -u
build=${1:?build dir}
label=${2:-$build}
limit=${TEST_TIMEOUT:-300}
export TMPDIR=${TMPDIR:-/tmp}
logs=$build/test-logs
mkdir -p "$logs"
pass=0 fail=0 skip=0
failed=()
for t in $(find "$build/tests" -path '*/tmp-*' -prune -o -type f -perm -u+x ! -name '*_helper' ! -name '*.so*' -print 2>/dev/null | sort); do
	name=${t#"$build/tests/"}
	log=$logs/${name//\//_}.log
	start=${EPOCHREALTIME/./}
	timeout --kill-after=10 "$limit" "$t" >"$log" 2>&1
	rc=$?
	ms=$(( (${EPOCHREALTIME/./} - start) / 1000 ))
	secs=$((ms / 1000)).$((ms % 1000 / 100))
	case $rc in
	0) pass=$((pass + 1)); echo "[$label] PASS $name (${secs}s)" ;;
	77) skip=$((skip + 1)); echo "[$label] SKIP $name: $(grep -m1 '^SKIP' "$log" | cut -c7-)" ;;
	*)
		fail=$((fail + 1)); failed+=("$name")
		echo "[$label] FAIL $name (exit $rc${secs:+, ${secs}s})"
		[ $rc = 124 ] && echo "    timed out after ${limit}s"
		tail -n 40 "$log" | sed 's/^/    /'
		;;
	esac
done
echo "$pass $fail $skip" >>"$build/test-results"
echo "[$label] $pass passed, $fail failed, $skip skipped${failed:+ (failed: ${failed[*]})}"
[ $fail = 0 ]
