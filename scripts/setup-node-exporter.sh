#!/bin/bash
# SPDX-License-Identifier: MIT
# Provide Prometheus' node_exporter for the metrics test (it reads the file
# `--metrics-dir` writes through its textfile collector) and print its path.
#
#   scripts/setup-node-exporter.sh [BUILD_DIR]
#
# A `prometheus-node-exporter` or `node_exporter` on PATH is used as it is;
# otherwise Debian's package is downloaded with apt (from the archive apt is
# configured with) and unpacked under BUILD_DIR/node-exporter, never installed:
# installing it would start a service listening on every address. Nothing is
# started here; the test starts its own on the loopback. Idempotent. Exit 0
# with the path as the last line on stdout, 69 when none can be provided.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
for name in prometheus-node-exporter node_exporter; do
	if command -v "$name" >/dev/null 2>&1; then
		command -v "$name"
		exit 0
	fi
done
dest=$build/node-exporter
bin=$dest/root/usr/bin/prometheus-node-exporter
if [ ! -x "$bin" ]; then
	mkdir -p "$dest"
	rm -rf "$dest/root" "$dest"/*.deb
	log=$dest/apt.log
	if ! (cd "$dest" && apt-get download prometheus-node-exporter) >"$log" 2>&1; then
		# The package lists may be missing on a fresh machine.
		if [ "$(id -u)" != 0 ] || ! { apt-get update -qq && (cd "$dest" && apt-get download prometheus-node-exporter); } >>"$log" 2>&1; then
			echo "setup-node-exporter: cannot download Debian's prometheus-node-exporter (log: $log)" >&2
			exit 69
		fi
	fi
	dpkg-deb -x "$dest"/prometheus-node-exporter_*.deb "$dest/root" ||
		{ echo "setup-node-exporter: cannot unpack $(ls "$dest"/*.deb)" >&2; exit 69; }
fi
"$bin" --version >/dev/null 2>&1 || { echo "setup-node-exporter: $bin --version failed" >&2; exit 69; }
echo "$bin"
