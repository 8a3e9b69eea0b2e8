#!/bin/bash
# SPDX-License-Identifier: MIT
# The README's "Try it here" blocks, run as written: every fenced block that
# follows a line `<!-- check_readme: N PASS -->` runs, in the README's order,
# in one bash (set -eu) started in the checkout's root, as a new user would
# paste them. Each block must finish, and print exactly N lines starting
# "PASS " and none starting "FAIL ". Their scratch directories (mktemp -d) lie
# in a directory of this test's own, and must be gone when they end; whatever
# the blocks started is killed at the end. (The Podman recipe: check_podman.) Runs in the plain build only (the blocks name build/), as root
# with a working CRIU; skips (77) otherwise.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/.." && pwd)
repo=$(cd "$build/.." && pwd)
[ -n "${CUSNAP_SANITIZER:-}" ] && { echo "SKIP: run once, in the plain build (the README names build/)"; exit 77; }
[ "$build" = "$repo/build" ] || { echo "SKIP: the README's blocks name build/, this is $build"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: the blocks checkpoint with CRIU, which needs root"; exit 77; }
[ -x "$build/criu/criu" ] && "$build/criu/criu" --version >/dev/null 2>&1 ||
	{ echo "SKIP: no CRIU in build/criu (scripts/setup-criu.sh build)"; exit 77; }

tmp=$(mktemp -d) || exit 1
chmod 0700 "$tmp"
# What the blocks started: every process whose control directory lies in tmp.
kill_started() {
	local p
	for p in /proc/[0-9]*; do
		{ tr '\0' '\n' <"$p/environ" | grep -qx "SNAPSHOT_CONTROL_DIR=$tmp/.*" && kill -9 "${p#/proc/}"; } 2>/dev/null
	done
}
trap 'kill_started; rm -rf "$tmp"' EXIT

# The blocks, each followed by a line marking its end, and what each must print.
awk -v script="$tmp/blocks.sh" -v want="$tmp/want" '
	/^<!-- check_readme: [0-9]+ PASS -->$/ { n = $3; armed = 1; next }
	armed && /^```/ { armed = 0; inside = 1; k++; print n > want; next }
	armed { print "README: a check_readme marker not followed by a fenced block" > "/dev/stderr"; exit 1 }
	inside && /^```$/ { inside = 0; print "echo \"check_readme: block " k " done\"" > script; next }
	inside { print > script }
' "$repo/README.md" || exit 1
blocks=$(wc -l <"$tmp/want")
[ "$blocks" -ge 3 ] || { echo "FAIL: $blocks marked blocks in README.md (expected the 3 of \"Try it here\")"; exit 1; }

(cd "$repo" && TMPDIR=$tmp timeout --kill-after=5 240 bash -eu "$tmp/blocks.sh") >"$tmp/out" 2>&1
rc=$?
fail=0
k=0
while read -r n; do
	k=$((k + 1))
	# This block's lines: after the previous block's end marker, up to its own.
	out=$(awk -v k=$k '/^check_readme: block [0-9]+ done$/ { b = $3; if (b == k) exit; next } b == k - 1' "$tmp/out")
	got=$(grep -c '^PASS ' <<<"$out")
	if ! grep -qx "check_readme: block $k done" "$tmp/out"; then
		echo "FAIL: README block $k did not finish (bash exit $rc)"; fail=1; break
	elif [ "$got" != "$n" ] || grep -q '^FAIL ' <<<"$out"; then
		echo "FAIL: README block $k printed $got PASS line(s), $n expected"; fail=1
	else
		echo "ok   README block $k: $n PASS"
	fi
done <"$tmp/want"
# (each block removes its scratch directory: a user's /tmp keeps nothing of them)
left=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d)
[ -z "$left" ] || { echo "FAIL: the blocks left behind: $left"; fail=1; }
[ $fail = 0 ] && [ $rc = 0 ] && exit 0
[ $rc = 0 ] || echo "FAIL: the blocks' bash exited $rc"
echo "--- their output:"
cat "$tmp/out"
exit 1
