#!/bin/bash
# SPDX-License-Identifier: MIT
# apt helpers, sourced by scripts/setup-criu.sh, scripts/zdtm.sh and
# tests/criu/check_podman.sh.
#
# The Debian archive this machine's apt already uses: the URI that serves the
# system's own release (VERSION_CODENAME of /etc/os-release) with component
# main, from the one-line (sources.list, *.list) or deb822 (*.sources) files.
# The same archive serves $suite. CRIU_DEBIAN_MIRROR overrides it.
apt_debian_mirror() {
	local codename
	codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
	[ -n "$codename" ] || return 1
	{
		cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
			sed -e 's/#.*//' -e 's/\[[^]]*\]//' |
			awk -v c="$codename" '$1 == "deb" && $3 == c { for (i = 4; i <= NF; i++) if ($i == "main") { print $2; exit } }'
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -r "$f" ] || continue
			# deb822 stanzas, separated by blank lines
			awk -v c="$codename" '
				function flush() { if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " c " ") && (" " comps " ") ~ / main /) { split(uris, u, " "); print u[1]; found = 1 } types = suites = comps = uris = "" }
				/^[ \t]*#/ { next }
				/^[ \t]*$/ { flush(); if (found) exit; next }
				{ key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
				  if (key == "types") types = $0; else if (key == "suites") suites = $0
				  else if (key == "components") comps = $0; else if (key == "uris") uris = $0 }
				END { if (!found) flush() }' "$f"
		done
	} | head -n1 | grep .
}

# Install those of the Debian packages named that are missing (as root; apt's
# output into LOG): 0, or 1 when they cannot be installed.
apt_install_missing() {
	local log=$1 pkg need=()
	shift
	for pkg in "$@"; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
	done
	[ ${#need[@]} -eq 0 ] && return 0
	echo "installing ${need[*]}" >&2
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		"${need[@]}"; } >"$log" 2>&1
}
