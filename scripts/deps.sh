#!/bin/bash
# SPDX-License-Identifier: MIT
# Install the Debian packages the build, the tests and the demo need; idempotent:
# nothing is downloaded when everything is present.
set -euo pipefail
need=()
for pkg in gcc make libc6-dev util-linux procps dpkg-dev apt ca-certificates clang-format libjansson-dev libcurl4-openssl-dev iproute2 curl openssl; do
	dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages: ${need[*]} (run as root to install them with apt-get)" >&2
	exit 1
fi
echo "deps: installing ${need[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
