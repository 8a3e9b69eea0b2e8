#!/bin/bash
# SPDX-License-Identifier: MIT
# Run every test executable of a build tree: tests/run.sh BUILD LABEL
# Exit 0 = pass, 77 = skip, anything else = fail. Each test's output goes to
# BUILD/test-logs/NAME.log and is shown when it fails; each line gives the
# program's time against its limit (TEST_TIMEOUT seconds, default 300), and one
# that took more than half of it is named at the end. Counts are appended to
# BUILD/test-results for tests/summary.sh.
set -u
build=${1:?build dir}
label=${2:-$build}
limit=${TEST_TIMEOUT:-300}
export TMPDIR=${TMPDIR:-/tmp}
logs=$build/test-logs
mkdir -p "$logs"
pass=0 fail=0 skip=0
failed=() slow=() times=()
for t in $(find "$build/tests" -path '*/tmp-*' -prune -o -type f -perm -u+x ! -name '*_helper' ! -name '*.so*' -print 2>/dev/null | sort); do
	name=${t#"$build/tests/"}
	log=$logs/${name//\//_}.log
	start=${EPOCHREALTIME/./}
	timeout --kill-after=10 "$limit" "$t" >"$log" 2>&1
	rc=$?
	ms=$(( (${EPOCHREALTIME/./} - start) / 1000 ))
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
		[ $rc = 124 ] && echo "    timed out after ${limit}s"
		tail -n 40 "$log" | sed 's/^/    /'
		;;
	esac
done
echo "[$label] slowest: $(printf '%s\n' "${times[@]}" | sort -rn | head -4 |
	awk '{ printf "%s%s %.1f s", NR > 1 ? ", " : "", $2, $1 / 1000 }')"
for s in "${slow[@]}"; do echo "[$label] over half its limit: $s"; done
echo "$pass $fail $skip" >>"$build/test-results"
echo "[$label] $pass passed, $fail failed, $skip skipped${failed:+ (failed: ${failed[*]})}"
[ $fail = 0 ]
