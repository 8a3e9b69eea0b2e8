#!/bin/bash
# SPDX-License-Identifier: MIT
# snapshot-cuda-vmm-launch: finds the shim in the build tree and in an install
# tree made by `make install PREFIX=...`, prepends it to LD_PRELOAD once, and
# fails clearly when the program or the library is missing.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)
repo=$(cd "$build/.." && pwd)
status=0
# Sanitizer builds preload an instrumented shim into /bin/sh.
[ -n "${CUSNAP_SANITIZER:-}" ] && export ASAN_OPTIONS=verify_asan_link_order=0
fail() { echo "FAIL: $*"; status=1; }

out=$(LD_PRELOAD=/lib/x86_64-linux-gnu/libc.so.6 "$build/bin/snapshot-cuda-vmm-launch" /bin/sh -c 'echo "$LD_PRELOAD"')
[ "$out" = "$build/lib/libsnapshot_cuda_vmm.so:/lib/x86_64-linux-gnu/libc.so.6" ] || fail "build tree: LD_PRELOAD='$out'"
again=$(LD_PRELOAD=$out "$build/bin/snapshot-cuda-vmm-launch" /bin/sh -c 'echo "$LD_PRELOAD"')
[ "$again" = "$out" ] || fail "the shim is preloaded twice: '$again'"

prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
# (the CRIU plugin into the test's tree too, never into the machine's CRIU)
make -s -C "$repo" install BUILD="$build" PREFIX="$prefix" CRIU_PLUGIN_DIR="$prefix/lib/criu" >/dev/null ||
	fail "make install"
for f in lib/snapshot/libsnapshot_cuda_vmm.so bin/snapshot-cuda-vmm-launch bin/snapshot-cuda-vmm bin/cusnap; do
	[ -x "$prefix/$f" ] || fail "make install did not install $f"
done
[ -f "$prefix/lib/criu/cusnap_plugin.so" ] || fail "make install did not install the CRIU plugin"
out=$(env -u LD_PRELOAD "$prefix/bin/snapshot-cuda-vmm-launch" /bin/sh -c 'echo "$LD_PRELOAD"')
[ "$out" = "$prefix/lib/snapshot/libsnapshot_cuda_vmm.so" ] || fail "install tree: LD_PRELOAD='$out'"

err=$(SNAPSHOT_CUDA_VMM_LIBRARY=/nonexistent/lib.so "$build/bin/snapshot-cuda-vmm-launch" /bin/true 2>&1)
[ $? = 69 ] && [[ "$err" == *"/nonexistent/lib.so"* ]] || fail "missing library: exit/message '$err'"
err=$("$build/bin/snapshot-cuda-vmm-launch" /nonexistent/program 2>&1)
[ $? = 127 ] && [[ "$err" == *"/nonexistent/program"* ]] || fail "missing program: exit/message '$err'"
"$build/bin/snapshot-cuda-vmm-launch" >/dev/null 2>&1
[ $? = 64 ] || fail "no program: not a usage error"
[ $status = 0 ] && echo "ok   launcher: build tree, install tree, LD_PRELOAD once, clear errors"
exit $status
