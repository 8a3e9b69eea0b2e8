#!/bin/bash
# SPDX-License-Identifier: MIT
# A fault point is named in code by its identifier from include/cusnap/faults.def
# (enum fault), so a misspelt point does not compile: a file that reaches
# a real point compiles, the same file with the name misspelt does not.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -n "${CUSNAP_SANITIZER:-}" ] && { echo "SKIP: compiled once, in the plain build"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
compiles() {
	printf '#include "cusnap/fault.h"\nvoid reach(void);\nvoid reach(void) { fault_point(%s); }\n' "$1" >"$tmp/f.c"
	${CC:-cc} -std=c17 -D_GNU_SOURCE -Werror -I"$repo/include" -I"$cuda/include" -c -o "$tmp/f.o" "$tmp/f.c" \
		>"$tmp/err" 2>&1
}
compiles FAULT_KILL_AFTER_QUIESCE || { echo "FAIL: a real fault point does not compile:"; cat "$tmp/err"; exit 1; }
if compiles FAULT_KILL_AFTER_QUIESCED; then
	echo "FAIL: a misspelt fault point (FAULT_KILL_AFTER_QUIESCED) compiled"
	exit 1
fi
grep -q "FAULT_KILL_AFTER_QUIESCED" "$tmp/err" || { echo "FAIL: the compiler did not name the misspelt point:"; cat "$tmp/err"; exit 1; }
echo "ok   a real fault point compiles, a misspelt one is refused by the compiler"

# At run time: CUSNAP_FAULT naming no point, or no action, is refused (64)
# before anything is done, by the tool (the plugin refuses its dumps likewise).
build=$(cd "$here/.." && pwd)
for spec in kill-after-quiesced:self kill-after-quiesce:later; do
	out=$(CUSNAP_FAULT=$spec "$build/bin/cusnap" inspect --pid 1 2>&1)
	rc=$?
	[ $rc = 64 ] && echo "$out" | grep -q "CUSNAP_FAULT=$spec" ||
		{ echo "FAIL: CUSNAP_FAULT=$spec: exit $rc, said: $out"; exit 1; }
done
out=$(CUSNAP_FAULT=kill-after-quiesce:self "$build/bin/cusnap" --help 2>&1)
[ $? = 0 ] || { echo "FAIL: CUSNAP_FAULT naming a real point was refused: $out"; exit 1; }
echo "ok   CUSNAP_FAULT naming no fault point, or no action, is refused (64)"
