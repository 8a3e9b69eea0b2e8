#!/bin/bash
# SPDX-License-Identifier: MIT
# Provide etcd for the group tests (several trees standing for the nodes of one
# worker meet in it) and print the path of its server.
#
#   scripts/setup-etcd.sh [BUILD_DIR]
#
# An `etcd` on PATH is used as it is; otherwise Debian's etcd-server is
# installed (as root, through apt). Nothing is started here: each test starts
# its own etcd on the loopback with a temporary data directory and stops it.
# Idempotent. Exit 0 with the path as the last line on stdout, 69 when no etcd
# can be provided (the group tests then skip, saying why).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
mkdir -p "$build"
. "$here/scripts/apt-lib.sh"
if ! command -v etcd >/dev/null 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		echo "setup-etcd: no etcd on PATH, and installing Debian's etcd-server needs root" >&2
		exit 69
	fi
	apt_install_missing "$build/etcd-apt.log" etcd-server ||
		{ echo "setup-etcd: installing etcd-server failed (log: $build/etcd-apt.log)" >&2; exit 69; }
fi
etcd=$(command -v etcd) || { echo "setup-etcd: etcd-server installed no etcd" >&2; exit 69; }
"$etcd" --version >/dev/null 2>&1 || { echo "setup-etcd: $etcd --version failed" >&2; exit 69; }
echo "$etcd"
