#!/bin/bash
# SPDX-License-Identifier: MIT
# Run the test programs of a build tree as tests/suite.def describes them:
# tests/run.sh BUILD LABEL (TESTS_ONLY, TESTS_SKIP: extended regular
# expressions over the names, e2e/test_nccl).
# Exit 0 = pass, 77 = skip, anything else = fail. Each program's output goes
# to BUILD/test-logs/NAME.log and is shown when it fails; each line gives the
# program's time against its limit, and one that took more than half of it is
# named at the end, with the counts and the pass's own time. A program with no
# descriptor, or a descriptor with no program, fails. Counts are appended to
# BUILD/test-results for tests/summary.sh.
#
# The pass (TEST_PASS: plain, asan or tsan) is the plain build's unless
# CUSNAP_SANITIZER is set (then tsan where TSAN_OPTIONS is set, else asan); a
# program runs in the passes its descriptor lists.
#
# TEST_JOBS programs run at once (default two per core: a program spends much
# of its time waiting for the processes it drives), in the order of
# tests/suite.def (slowest first, so that the short ones fill in beside them).
# A program whose needs are not met here, or that is not for this pass, is
# skipped before it starts. The sanitizer passes give each program
# TEST_LIMIT_SCALE (default 3) times its limit; TEST_TIMEOUT, when set, is
# every program's limit.
set -u
build=${1:?build dir}
label=${2:-$build}
here=$(cd "$(dirname "$0")" && pwd)
jobs_max=${TEST_JOBS:-$((2 * $(nproc)))}
scale=1
[ -n "${CUSNAP_SANITIZER:-}" ] && scale=${TEST_LIMIT_SCALE:-3}
pass_name=${TEST_PASS:-plain}
[ -z "${TEST_PASS:-}" ] && [ -n "${CUSNAP_SANITIZER:-}" ] && pass_name=asan && [ -n "${TSAN_OPTIONS:-}" ] && pass_name=tsan
export TEST_PASS=$pass_name # the harness shares some loops out between the passes (test_share)
export TMPDIR=${TMPDIR:-/tmp}
# No descriptor of whoever started the suite reaches the programs: CRIU will
# not dump a workload holding one opened in another mount namespace (a
# /dev/null a caller's shell kept as fd 10 failed every dump of test_nccl).
for fd in /proc/$$/fd/*; do
	fd=${fd##*/}
	[ "$fd" -gt 2 ] && [ "$fd" != 255 ] && eval "exec $fd>&-" 2>/dev/null
done
logs=$build/test-logs
mkdir -p "$logs"
rm -f "$logs"/*.done
pass=0 fail=0 skip=0
failed=() slow=() times=() running=()
declare -A where limit passes needs

log_of() { local name=$1; echo "$logs/${name//\//_}.log"; }

# The descriptors: NAME WHERE LIMIT PASSES NEEDS, in the order they run.
order=()
while read -r name w l p n; do
	case $name in '' | '#'*) continue ;; esac
	where[$name]=$w limit[$name]=$((${TEST_TIMEOUT:-$l} * scale)) passes[$name]=$p needs[$name]=$n
	order+=("$name")
done <"$here/suite.def"

# Why a need of a program is not met here, or nothing.
unmet() {
	local need criu
	for need in ${1//,/ }; do
		case $need in
		-) ;;
		root) [ "$(id -u)" = 0 ] || { echo "needs root"; return; } ;;
		criu)
			[ -n "${CUSNAP_SANITIZER:-}" ] && { echo "CRIU does not dump sanitizer runtimes' shadow memory"; return; }
			[ "$(id -u)" = 0 ] || { echo "CRIU needs root"; return; }
			criu=${CRIU:-$(head -n1 "$build/criu-path" 2>/dev/null)}
			[ -x "${criu:-$build/criu/criu}" ] || { echo "no CRIU (scripts/setup-criu.sh; see $build/criu-setup.log)"; return; }
			;;
		etcd)
			[ -x "$(head -n1 "$build/etcd-path" 2>/dev/null)" ] || command -v etcd >/dev/null ||
				{ echo "no etcd (scripts/setup-etcd.sh; see $build/etcd-setup.log)"; return; }
			;;
		*) echo "tests/suite.def names an unknown need '$need'"; return ;;
		esac
	done
}

# One program, its exit status and milliseconds into LOG.done; one that runs
# in namespaces of its own goes through nsrun_helper (tests/nsrun.c).
run_one() {
	local name=$1 t=$2 log=$3 start rc
	start=${EPOCHREALTIME/./}
	: >"$log"
	# (Namespaces for the restores of CRIU, which no sanitizer pass runs; LSan
	# cannot stop a process's threads as a PID namespace's child.)
	if [ "${where[$name]}" = ns ] && [ -z "${CUSNAP_SANITIZER:-}" ]; then
		timeout --kill-after=10 "${limit[$name]}" "$build/tests/nsrun_helper" "$log" "$t" >>"$log" 2>&1
	else
		timeout --kill-after=10 "${limit[$name]}" "$t" >>"$log" 2>&1
	fi
	rc=$?
	echo "$rc $(((${EPOCHREALTIME/./} - start) / 1000))" >"$log.done.tmp" && mv "$log.done.tmp" "$log.done"
}

report() {
	local name=$1 log rc ms secs of lim=${limit[$1]:-0}
	log=$(log_of "$name")
	read -r rc ms <"$log.done"
	rm -f "$log.done"
	secs=$((ms / 1000)).$((ms % 1000 / 100))
	of="${secs} s of ${lim} s"
	times+=("$ms $name")
	[ $((ms * 2)) -gt $((lim * 1000)) ] && [ "$rc" != 77 ] && slow+=("$name ($of)")
	case $rc in
	0) pass=$((pass + 1)); echo "[$label] PASS $name ($of)" ;;
	77) skip=$((skip + 1)); echo "[$label] SKIP $name: $(grep -m1 '^SKIP' "$log" | cut -c7-)" ;;
	*)
		fail=$((fail + 1)); failed+=("$name")
		echo "[$label] FAIL $name (exit $rc, $of)"
		[ "$rc" = 124 ] && echo "    timed out after ${lim}s"
		tail -n 40 "$log" | sed 's/^/    /'
		;;
	esac
}

# A result that needs no run: rc and a line for the log.
settle() {
	local name=$1 rc=$2 line=$3 log
	log=$(log_of "$name")
	echo "$line" >"$log"
	echo "$rc 0" >"$log.done"
	report "$name"
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

declare -A built
for t in $(find "$build/tests" -path '*/tmp-*' -prune -o -type f -perm -u+x ! -name '*_helper' ! -name '*.so*' -print 2>/dev/null); do
	name=${t#"$build/tests/"}
	built[$name]=$t
	[ -n "${where[$name]:-}" ] || order+=("$name")
done

for name in "${order[@]}"; do
	[ -n "${TESTS_ONLY:-}" ] && ! [[ $name =~ $TESTS_ONLY ]] && continue
	[ -n "${TESTS_SKIP:-}" ] && [[ $name =~ $TESTS_SKIP ]] && continue
	t=${built[$name]:-}
	if [ -z "${where[$name]:-}" ]; then
		settle "$name" 1 "no descriptor for $name in tests/suite.def (NAME WHERE LIMIT PASSES NEEDS)"
		continue
	fi
	why=$(unmet "${needs[$name]}")
	[[ ,${passes[$name]}, == *,$pass_name,* ]] || why="not in the $pass_name pass (tests/suite.def: ${passes[$name]} only)"
	if [ -n "$why" ]; then
		settle "$name" 77 "SKIP: $why"
		continue
	elif [ -z "$t" ]; then
		settle "$name" 1 "tests/suite.def describes $name, which is not built in $build/tests"
		continue
	fi
	case ${where[$name]} in
	alone)
		drain_to 1
		run_one "$name" "$t" "$(log_of "$name")"
		report "$name"
		;;
	beside | ns)
		drain_to "$jobs_max"
		run_one "$name" "$t" "$(log_of "$name")" &
		running+=("$name")
		;;
	*) settle "$name" 1 "tests/suite.def: $name runs '${where[$name]}', not alone, beside or ns" ;;
	esac
done
drain_to 1
echo "[$label] slowest: $(printf '%s\n' "${times[@]}" | sort -rn | head -4 |
	awk '{ printf "%s%s %.1f s", (NR > 1 ? ", " : ""), $2, $1 / 1000 }')"
for s in "${slow[@]}"; do echo "[$label] over half its limit: $s"; done
echo "$pass $fail $skip" >>"$build/test-results"
echo "[$label] $pass passed, $fail failed, $skip skipped${failed:+ (failed: ${failed[*]})} in $SECONDS s"
[ $fail = 0 ]
