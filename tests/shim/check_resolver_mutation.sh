#!/bin/bash
# SPDX-License-Identifier: MIT
# The resolver tests can fail: with the shim's substitution switched off
# (SNAPSHOT_CUDA_VMM_TEST_NO_SUBSTITUTE=1, resolvers hand out the driver's own
# pointers) every resolver path of test_resolvers must fail. cuemu hands out its
# own entry points, as the real driver does, so nothing else can mask it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
SNAPSHOT_CUDA_VMM_TEST_NO_SUBSTITUTE=1 "$here/test_resolvers" >"$log" 2>&1
rc=$?
status=0
if [ $rc = 0 ]; then
	echo "FAIL: test_resolvers passed with substitution switched off"
	status=1
fi
for path in 'dlsym on a dlopen' 'cuGetProcAddress_v2 at' 'cudaGetDriverEntryPoint(ByVersion)' \
	'every wrapped.def entry through dlsym' 'a multicast object made through a resolved pointer' \
	'cuMemAlloc and legacy IPC through the resolvers' \
	'cuGetProcAddress by ABI version and stream flags' 'a runtime closed and loaded again'; do
	if grep -q "^FAIL $path" "$log"; then
		echo "ok   without substitution, fails: $path"
	else
		echo "FAIL: without substitution, did not fail: $path"
		status=1
	fi
done
[ $status = 0 ] || sed 's/^/    /' "$log"
exit $status
