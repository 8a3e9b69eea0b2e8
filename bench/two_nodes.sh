#!/bin/bash
# SPDX-License-Identifier: MIT
# make bench-two-nodes: the longest gap a TCP stream between two simulated
# nodes sees across a group checkpoint and restore (--tcp-established), the
# nodes restored together and 10 s apart. The stream carries a byte every
# millisecond from node b to node a; tests/e2e/test_two_nodes makes the nodes
# (network namespaces on a bridge, 198.18.0.0/24, in namespaces of its own) and
# prints what node a's reader saw. Root, CRIU and etcd (as make test).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
cd "$here"
"$here/scripts/setup-criu.sh" "$build" >"$build/criu-path" 2>/dev/null || { echo "bench-two-nodes: no CRIU" >&2; exit 69; }
"$here/scripts/setup-etcd.sh" "$build" >"$build/etcd-path" 2>/dev/null || { echo "bench-two-nodes: no etcd" >&2; exit 69; }
TESTS_ONLY='^e2e/test_two_nodes$' tests/run.sh "$build" plain >/dev/null || true
log=$build/test-logs/e2e_test_two_nodes.log
echo "the stream's longest gap across a group checkpoint --tcp-established and restore ($(nproc) cores):"
grep -E "^  tcp(2|10): the stream's longest gap" "$log" | sed -e 's/^  tcp2:/  restored together:   /' \
	-e 's/^  tcp10:/  node b 10 s after a:/' || { echo "bench-two-nodes: no figures (see $log)" >&2; exit 1; }
