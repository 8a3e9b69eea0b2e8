#!/bin/bash
# SPDX-License-Identifier: MIT
# The shim exports exactly wrapped.def plus dlsym, and needs neither libcuda nor
# libcudart at load time (DESIGN.md §4.1).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)
repo=$(cd "$build/.." && pwd)
lib=$build/lib/libsnapshot_cuda_vmm.so
def=$repo/src/shim/wrapped.def
[ -f "$lib" ] || { echo "FAIL: $lib missing"; exit 1; }
want=$( (echo dlsym; sed -n 's/^\(DRV\|GATED\)\(_PTDS\)\?(\([A-Za-z0-9_]*\),.*$/\3/p; s/^RT(\([A-Za-z0-9_]*\))$/\1/p' "$def") | sort)
got=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort)
status=0
if [ "$want" != "$got" ]; then
	echo "FAIL: exported symbols differ from wrapped.def + dlsym:"
	diff <(echo "$want") <(echo "$got") | sed 's/^/    /'
	status=1
else
	echo "ok   exports are exactly wrapped.def + dlsym ($(echo "$got" | wc -l) symbols)"
fi
if readelf -d "$lib" | grep NEEDED | grep -Eq 'libcuda\.so|libcudart'; then
	echo "FAIL: the shim has a NEEDED entry for libcuda or libcudart:"
	readelf -d "$lib" | grep NEEDED | sed 's/^/    /'
	status=1
else
	echo "ok   no NEEDED libcuda/libcudart"
fi
# The tools' JSON, state-file and descriptor-check code stays out of the shim
# (src/common is a static library: only what the shim calls is linked in).
tools=$(nm "$lib" | awk '$2 ~ /^[tT]$/ {print $3}' | grep -E '^(json_|state_|fd_check_)' | tr '\n' ' ')
if [ -n "$tools" ]; then
	echo "FAIL: the shim holds the tools' code: $tools"
	status=1
else
	echo "ok   none of the tools' JSON or state-file code in the shim"
fi
exit $status
