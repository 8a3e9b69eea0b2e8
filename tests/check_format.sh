#!/bin/bash
# SPDX-License-Identifier: MIT
# Every C source and header is as .clang-format lays it out (clang-format 14,
# Debian bookworm's; scripts/deps.sh installs it). Fix with:
#   git ls-files '*.c' '*.h' | xargs clang-format -i
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo" || exit 1
[ -n "${CUSNAP_SANITIZER:-}" ] && { echo "SKIP: the sources are checked once, in the plain pass"; exit 77; }
command -v clang-format >/dev/null || { echo "SKIP: clang-format is not installed (scripts/deps.sh installs it)"; exit 77; }
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find src include emu tests examples bench -name '*.[ch]')
bad=0
# One clang-format over them all (a process per file took 20 s); file by file
# only to say which, when one is not.
if ! clang-format --dry-run -Werror $files >/dev/null 2>&1; then
	for f in $files; do
		if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
			echo "FAIL: $f is not formatted (clang-format -i $f):"
			clang-format "$f" | diff -u "$f" - | head -20 | sed 's/^/    /'
			bad=$((bad + 1))
		fi
	done
	[ $bad = 0 ] && { echo "FAIL: clang-format fails over all the files and passes each one"; bad=1; }
fi
[ $bad = 0 ] && echo "ok   $(echo "$files" | wc -w) files formatted as .clang-format says"
# verdict FOUND FAILS OK: a check's line (FOUND, one per line: each a failure).
verdict() {
	if [ -n "$1" ]; then
		echo "FAIL: $2:"
		echo "$1" | sed 's/^/    /'
		bad=$((bad + 1))
	else
		echo "ok   $3"
	fi
}
# No function in src/ or emu/ over 150 lines (from the "{" that opens it at
# the start of a line to the "}" that closes it), so that each reads as one step.
long=$(for f in $files; do
	case $f in src/*.c | emu/*.c) ;; *) continue ;; esac
	awk -v f="$f" '/^\{/ { s = NR; name = prev } /^\}/ { if (s && NR - s > 150) printf "%s:%d: %d lines: %s\n", f, s, NR - s, name; s = 0 } { prev = $0 }' "$f"
done)
verdict "$long" "functions over 150 lines (split them)" "no function in src/ or emu/ over 150 lines"
# No file in src/ or emu/ over 800 lines: past that it holds more than one
# responsibility (split it, DESIGN.md §2).
over=$(for f in $files; do
	case $f in src/* | emu/*) ;; *) continue ;; esac
	n=$(wc -l <"$f")
	[ "$n" -gt 800 ] && echo "$f: $n lines"
done)
verdict "$over" "files over 800 lines (split them)" "no file in src/ or emu/ over 800 lines"
# No issue of this project's tracker named in the tree: the code and the docs
# say what and why, the history says when (another project's issue, named
# with its project, is a reference).
cited=$(git grep -nIiE "\bissues? #?[0-9]+" -- . ':!*.md' 2>/dev/null | grep -viE "NVIDIA/|github|cuda-checkpoint" |
	grep -v '^tests/check_format.sh:')
cited_md=$(git grep -nIiE "\bissues? #?[0-9]+" -- '*.md' 2>/dev/null | grep -viE "NVIDIA/|github|cuda-checkpoint")
verdict "$(printf '%s\n%s' "$cited" "$cited_md" | grep -v '^$')" "issue numbers in the tree (say what, not which issue)" \
	"no issue numbers in the tree"
# The tests repeat themselves in at most 15 places (the workplace's
# `duplicates`, where it is installed: pairs of places sharing six or more
# lines, alike to the letter or in shape): a sixteenth wants a helper.
if command -v duplicates >/dev/null; then
	pairs=$(duplicates --repo tests --most 200 --seconds 120 2>&1)
	n=$(echo "$pairs" | sed -n '1s/^\([0-9][0-9]*\) pairs\{0,1\} of places.*/\1/p')
	case "$pairs" in "no duplicates"*) n=0 ;; esac
	if [ -z "$n" ] || echo "$pairs" | grep -q '^incomplete:'; then
		echo "FAIL: duplicates did not answer over tests/:"
		echo "$pairs" | head -5 | sed 's/^/    /'
		bad=$((bad + 1))
	elif [ "$n" -gt 15 ]; then
		echo "FAIL: $n pairs of repeated places in tests/ (at most 15: make a helper serve both):"
		echo "$pairs" | sed 's/^/    /'
		bad=$((bad + 1))
	else
		echo "ok   $n pairs of repeated places in tests/ (at most 15)"
	fi
else
	echo "ok   (duplicates not installed: the tests' repeated places not counted)"
fi
# Every section of docs/DESIGN.md the code cites ("DESIGN.md §6.2") is there.
cited=$(git grep -hoE "DESIGN\.md §[0-9]+(\.[0-9]+)?" 2>/dev/null | sed 's/.*§//' | sort -uV)
missing=""
for n in $cited; do
	grep -qE "^#+ ${n//./\\.}\.? " docs/DESIGN.md || missing="$missing §$n"
done
if [ -n "$missing" ]; then
	echo "FAIL: sections cited but not in docs/DESIGN.md:$missing"
	bad=$((bad + 1))
else
	echo "ok   every section of docs/DESIGN.md the code cites exists ($(echo $cited | wc -w) sections)"
fi
[ $bad = 0 ]
