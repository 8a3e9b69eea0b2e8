#!/bin/bash
# SPDX-License-Identifier: MIT
# CRIU's own test suite (zdtm) with cusnap's plugin loaded: proof that the
# plugin leaves processes without CUDA alone.
#
#   scripts/zdtm.sh --all [BUILD_DIR]  every test below (make zdtm)
#   scripts/zdtm.sh [BUILD_DIR]        a share of them, one of each kind (make
#                                      test, through tests/criu/check_zdtm.sh)
#   scripts/zdtm.sh --prepare [BUILD_DIR]   only what needs the network: the
#                                           packages and the source, made ready
#                                           (make test, before its programs run
#                                           in namespaces with the loopback only)
#
# The source of the CRIU in use (scripts/setup-criu.sh: Debian's 4.2.1) is
# fetched with apt-get source --download-only from the archive apt already uses
# (the .dsc may not be served: only the upstream tarball is needed), unpacked
# under BUILD_DIR/zdtm (kept: later runs reuse it), its Python bindings
# generated (protoc; Debian's protobuf-compiler, libprotobuf-dev (descriptor.proto), python3-protobuf and
# python3-yaml are installed when missing), and zdtm.py runs the static tests
# below in the host flavour with cusnap_plugin.so in the plugin directory it
# gives CRIU (test/plugins, CRIU_LIBS_DIR), the way CRIU's CI runs its own
# plugins. Every test must pass, and every dump and restore log must show the
# plugin loaded and its hooks called.
#
# Adaptations to where it runs, each said when it applies:
# - without CAP_SYS_RESOURCE CRIU cannot read the resource limits of a process
#   of another user, so zdtm's tests run as root instead of as its uid 18943
#   (zdtm.py is patched to honour ZDTM_AS_ROOT);
# - zdtm.py makes no named cgroup hierarchies (they are for its cgroup tests,
#   none of which run here, and they break CRIU dumps elsewhere on the machine);
# - the socket tests run only under a CRIU that can dump inet sockets here
#   (4.2 on kernels 6.16 and later, where SO_PASSCRED on them reads EOPNOTSUPP),
#   with CRIU's nftables network lock where iptables is not installed.
#
# Exit 0 all passed, 1 a failure, 77 skipped (no CRIU, no source, no root).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
prepare=0 all=0
[ "${1:-}" = --prepare ] && prepare=1 && shift
[ "${1:-}" = --all ] && all=1 && shift
build=${1:-$here/build}
build=$(cd "$build" && pwd)
say() { echo "zdtm: $*" >&2; }
skip() { echo "SKIP: $*"; exit 77; }

tests=(maps00 maps02 busyloop00 sigpending pthread00 pthread01 env00 pipe00 pipe01 sockets00 unlink_fstat00
	file_shared cwd00 umask00 fifo mmx00 sse00 fpu00 sleeping00 zombie00 wait00 futex vdso00 mprotect00
	sigaltstack write_read00 caps00 pstree)
# Sockets (CRIU 4.2 on kernels >= 6.16; 4.1 cannot dump inet sockets there):
# TCP established (v4, v6, over loopback), listening (v4, v6, one with a
# client queued), closed states, UDP, a listening Unix socket.
socket_tests=(socket-tcp socket-tcp6 socket-tcp-local socket_listen socket_listen6 socket-tcp-listen
	socket-tcp-last-ack socket-tcp-close-wait socket-tcp-fin-wait1 socket-tcp-fin-wait2 socket_udp sk-unix-listen01)
# make test's share (each test is a build, a dump and a restore, about 5-9 s
# here): memory, threads, signals, pipes and files, a zombie, the vDSO, and
# the sockets a networked worker holds (TCP over v4 and v6, a listener, UDP,
# a listening Unix socket).
if [ $all = 0 ]; then
	tests=(maps00 pthread00 sigpending pipe00 unlink_fstat00 zombie00 vdso00)
	socket_tests=(socket-tcp socket-tcp6 socket_listen socket_udp sk-unix-listen01)
fi

[ "$(id -u)" = 0 ] || skip "CRIU's tests need root"
plugin=$build/lib/criu/cusnap_plugin.so
[ -f "$plugin" ] || { say "$plugin is not built (make)"; exit 1; }
criu=$("$here/scripts/setup-criu.sh" "$build" 2>"$build/zdtm-criu.log" | tail -n1)
[ -x "$criu" ] || skip "no working CRIU (see $build/zdtm-criu.log)"
version=$("$criu" --version | sed -n 's/^Version: *//p' | head -n1)
[ -n "$version" ] || skip "cannot tell the version of $criu"
kernel=$(uname -r | awk -F. '{ printf "%d", $1 * 1000 + $2 }')
minor=${version#*.} minor=${minor%%.*}
if [ "${version%%.*}" -gt 4 ] || [ "$minor" -ge 2 ] || [ "$kernel" -lt 6016 ]; then
	tests+=("${socket_tests[@]}")
else
	say "CRIU $version cannot dump inet sockets on this kernel: the socket tests are left out"
fi

# Debian packages zdtm.py needs.
. "$here/scripts/apt-lib.sh"
apt_install_missing "$build/zdtm-apt.log" protobuf-compiler libprotobuf-dev python3-protobuf python3-yaml python3 make gcc ||
	skip "cannot install zdtm's packages (see $build/zdtm-apt.log)"
python=/usr/bin/python3 # Debian's, with its protobuf and yaml

# CRIU's source, once.
dest=$build/zdtm
src=$dest/criu-$version
if [ ! -f "$src/.cusnap-ready" ]; then
	mirror=${CRIU_DEBIAN_MIRROR:-$(apt_debian_mirror || true)}
	[ -n "$mirror" ] || skip "no Debian archive in apt's sources; set CRIU_DEBIAN_MIRROR"
	apt=$dest/apt
	rm -rf "$dest" && mkdir -p "$apt/lists/partial" "$apt/archives/partial"
	# The suite the CRIU in use came from (setup-criu.sh notes it), else any
	# that serves its version.
	suites=${CRIU_DEBIAN_SUITE:-$(cat "$build/criu/suite" 2>/dev/null)}
	suites="$suites forky sid trixie"
	: >"$apt/status"
	opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
		-o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/status" -o "Dir::Cache=$apt"
		-o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
	tarball=
	for suite in $suites; do
		echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" >"$apt/sources.list"
		rm -rf "$apt/lists" && mkdir -p "$apt/lists/partial"
		apt-get "${opts[@]}" -qq update >>"$dest/apt.log" 2>&1 || continue
		# The .dsc and the Debian diff may not be served: the tarball is all zdtm needs.
		(cd "$dest" && apt-get "${opts[@]}" source --download-only criu >>"$dest/apt.log" 2>&1)
		tarball=$(ls "$dest"/criu_"$version".orig.tar.* 2>/dev/null | head -n1)
		[ -n "$tarball" ] && break
	done
	[ -n "$tarball" ] || skip "criu_$version.orig.tar.* was not served by Debian ($suites; see $dest/apt.log)"
	tar -C "$dest" -xf "$tarball" || { say "cannot unpack $tarball"; exit 1; }
	[ -f "$src/test/zdtm.py" ] || { say "$tarball holds no test/zdtm.py"; exit 1; }
	# pycriu: its protobuf modules, as lib/pycriu's Makefiles would make them.
	py=$src/lib/pycriu
	mapfile -t protos < <(ls "$src"/images/*.proto | grep -v '/rpc\.proto$')
	protoc -I="$src/images" -I=/usr/include --python_out="$py/images" "${protos[@]}" &&
		protoc -I="$src/images" --python_out="$py" "$src/images/rpc.proto" &&
		"$python" "$src/scripts/magic-gen.py" "$src/criu/include/magic.h" "$py/images/magic.py" || {
		say "cannot generate CRIU's Python bindings"
		exit 1
	}
	{
		echo "# Autogenerated. Do not edit!"
		for p in "${protos[@]}"; do
			m=$(basename "$p" .proto)
			m=${m//-/_}_pb2
			[ "$m" = opts_pb2 ] || echo "from .$m import *"
		done
	} >"$py/images/pb.py"
	echo "__version__ = '$version'" >"$py/version.py"
	sed -i "s/^\( *\)if not test_flag(self.__desc, 'suid'):/\1if not test_flag(self.__desc, 'suid') and not os.environ.get('ZDTM_AS_ROOT'):/" \
		"$src/test/zdtm.py"
	grep -q ZDTM_AS_ROOT "$src/test/zdtm.py" || { say "zdtm.py changed: cannot make it run tests as root"; exit 1; }
	# zdtm's library only (zdtm.py would build every test, some needing protoc-c);
	# each test is built when it runs.
	make -C "$src/test/zdtm/lib" -j"$(nproc)" >"$dest/make.log" 2>&1 || { say "cannot build zdtm's library (see $dest/make.log)"; exit 1; }
	touch "$src/.cusnap-ready"
fi
[ $prepare = 1 ] && { echo "zdtm: CRIU $version's tests ready in $src"; exit 0; }

export PATH=/usr/sbin:/usr/bin:/sbin:/bin # zdtm.py runs python3 itself: Debian's
cap_eff=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
if [ $(((0x$cap_eff >> 24) & 1)) = 0 ]; then
	say "no CAP_SYS_RESOURCE here: the tests run as root (CRIU cannot read another user's limits without it)"
	export ZDTM_AS_ROOT=1
fi
# CRIU locks TCP connections while it works: with iptables, or where that is
# not installed with its own nftables (CRIU reads CRIU_CONFIG_FILE even under
# zdtm's --no-default-config).
if ! command -v iptables-restore >/dev/null; then
	echo "network-lock nftables" >"$dest/criu.conf"
	export CRIU_CONFIG_FILE=$dest/criu.conf
fi
cd "$src/test" || exit 1
# zdtm.py mounts two named cgroup v1 hierarchies for the whole run (for its
# cgroup tests, none of which run here). They are system-wide: every process
# appears in them, and a CRIU dump elsewhere on the machine (the suite's other
# programs, beside this one) fails on them ("Unable to create the cgroup
# (name=zdtmtst.defaultroot) ... busy"). So they are not made.
for f in zdtm_mount_cgroups zdtm_umount_cgroups; do
	printf '#!/bin/sh\n# cusnap: no named cgroup hierarchies (scripts/zdtm.sh says why)\nexit 0\n' >"$f"
	chmod 0755 "$f"
done
install -m 0644 "$plugin" plugins/cusnap_plugin.so
rm -rf dump
args=()
for t in "${tests[@]}"; do args+=(-t "zdtm/static/$t"); done
log=$build/zdtm.log
say "${#tests[@]} static tests of CRIU $version with cusnap_plugin.so loaded (log: $log)"
start=$(date +%s)
"$python" zdtm.py run "${args[@]}" -f h --keep-going --keep-img always --criu-bin "$criu" >"$log" 2>&1
rc=$?
passed=$(grep -cE '^=+ Test zdtm/static/[^ ]+ PASS' "$log")
failed=$(grep -E 'Test zdtm/static/[^ ]+ FAIL' "$log" | sed -E 's/.*Test (zdtm\/static\/[^ ]+) FAIL.*/\1/' | tr '\n' ' ')
# The plugin was there: loaded into every CRIU run, and asked about every dumped tree.
logs=$(ls dump/zdtm/static/*/*/1/dump.log dump/zdtm/static/*/*/1/restore.log 2>/dev/null)
without=$(for f in $logs; do grep -q 'Plugin "cusnap"' "$f" || echo "$f"; done)
unasked=$(for f in $(ls dump/zdtm/static/*/*/1/dump.log 2>/dev/null); do grep -q "plugin: .cusnap' hook 10" "$f" || echo "$f"; done)
echo "zdtm: $passed of ${#tests[@]} passed in $(($(date +%s) - start)) s; $(echo "$logs" | grep -c .) CRIU logs, $(echo "$without" | grep -c .) without the plugin"
ok=1
[ "$rc" = 0 ] && [ "$passed" = "${#tests[@]}" ] || { ok=0; say "failed: ${failed:-zdtm.py exited $rc}"; tail -n 40 "$log" >&2; }
[ -n "$logs" ] && [ -z "$without" ] || { ok=0; say "the plugin was not loaded in: ${without:-(no logs kept)}"; }
[ -z "$unasked" ] || { ok=0; say "the plugin's pause hook was never called in: $unasked"; }
[ $ok = 1 ] && echo "ok   CRIU $version zdtm: ${#tests[@]} static tests pass with cusnap's plugin loaded (each dump asked it)"
[ $ok = 1 ]
