#!/bin/bash
# SPDX-License-Identifier: MIT
# Run a libFuzzer target briefly over a copy of its committed seed corpus.
# Installed as build/tests/fuzz/test_fuzz_NAME; the target is fuzz_NAME_helper.
set -u
here=$(cd "$(dirname "$0")" && pwd)
name=$(basename "$0"); name=${name#test_fuzz_}
helper=$here/fuzz_${name}_helper
seeds=$here/../../../tests/fuzz/corpus/$name
if [ ! -x "$helper" ]; then
	echo "SKIP: $helper not built (needs clang with -fsanitize=fuzzer)"
	exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$seeds"/. "$work"/ 2>/dev/null || true
"$helper" -runs="${FUZZ_RUNS:-200000}" -max_total_time="${FUZZ_SECONDS:-20}" -max_len=4096 "$work" 2>&1 | tail -n 5
status=${PIPESTATUS[0]}
[ "$status" = 0 ] && echo "ok   fuzz_$name: no crash, leak or undefined behaviour"
exit "$status"
