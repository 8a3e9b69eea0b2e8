#!/bin/bash
# SPDX-License-Identifier: MIT
# make bench-group: an etcd on the loopback (scripts/setup-etcd.sh), its data in
# a temporary directory, then build/bench/group_barrier against it (ROUNDS,
# default 10, per member count); the etcd stopped and its data removed after.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$here/build}
etcd=$("$here/scripts/setup-etcd.sh" "$build" | tail -n1)
dir=$(mktemp -d /tmp/cusnap-bench-etcd-XXXXXX)
port=$((23000 + RANDOM % 20000))
"$etcd" --name bench --data-dir "$dir/data" --listen-client-urls "http://127.0.0.1:$port" \
	--advertise-client-urls "http://127.0.0.1:$port" --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
	--initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
	--initial-cluster "bench=http://127.0.0.1:$((port + 1))" >"$dir/etcd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
	curl -s -m 1 -X POST -d '{}' "http://127.0.0.1:$port/v3/maintenance/status" >/dev/null && break
	sleep 0.1
done
echo "etcd $("$etcd" --version | head -n1 | awk '{print $3}') on the loopback; $(nproc) cores"
rc=0
"$build/bench/group_barrier" "http://127.0.0.1:$port" "${ROUNDS:-10}" 2>"$dir/said" || rc=$?
sort -u "$dir/said" | sed 's/group bench-[0-9-]*/group bench-.../' | sort -u >&2 # (each member's warning, once)
exit $rc
