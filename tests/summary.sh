#!/bin/bash
# SPDX-License-Identifier: MIT
# Add up the counts written by tests/run.sh and print the closing line CI reads.
pass=0 fail=0 skip=0 runs=0
for f in "$@"; do
	[ -f "$f" ] || { echo "summary: $f missing: a test pass did not run" >&2; fail=$((fail + 1)); continue; }
	while read -r p f2 s; do
		pass=$((pass + p)); fail=$((fail + f2)); skip=$((skip + s)); runs=$((runs + 1))
	done <"$f"
done
echo "$pass passed, $fail failed, $skip skipped"
[ $fail = 0 ] && [ $runs -gt 0 ] && [ $pass -gt 0 ]
