#!/bin/bash
# SPDX-License-Identifier: MIT
# CRIU's own static tests (zdtm) with cusnap's plugin loaded: it must leave
# processes without CUDA alone (scripts/zdtm.sh; also `make zdtm`).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)
repo=$(cd "$build/.." && pwd)
[ -n "${CUSNAP_SANITIZER:-}" ] && { echo "SKIP: CRIU loads the plugin of the plain build only"; exit 77; }
exec "$repo/scripts/zdtm.sh" "$build"
