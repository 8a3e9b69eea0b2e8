#!/bin/bash
# SPDX-License-Identifier: MIT
# Podman through runc with cusnap's CRIU plugin, as users deploy containers:
# a container running an interposed group (the example, 2 processes sharing 2
# allocations) checkpointed with `podman container checkpoint` and restored
# with `podman container restore`, host and native content (native through the
# plugin's configuration file, since runc gives CRIU only PATH); then one
# exported with --export and restored with --import into a new container (file
# content: its files travel in the archive); a container joined to a named
# network namespace; and two containers in two simulated nodes' namespaces as
# one group (nodes_case). Each restored group verifies its bytes and sharing
# itself and exits 0.
#
# check_podman.sh --nccl (tests/e2e/test_nccl runs it, once NCCL is built): a
# 2-rank group of the real NCCL in a container checkpointed and restored with
# --tcp-established, its bootstrap connections restored; every rank checks
# its bytes, its marks through its imports, splits a communicator and passes.
# The container uses the host's network namespace, and NCCL its loopback alone
# (NCCL_SOCKET_IFNAME=lo): with --network none, podman restores the container
# into a new namespace whose loopback is not up when CRIU reconnects the
# sockets ("Can't connect inet socket back: Network is unreachable"); here
# the plugin clears the TIME_WAIT entries NCCL's own connections left on its
# ports before CRIU binds them again.
#
# Installs Debian's podman and runc when missing. What it has to set, and why:
# - runtime runc (Debian's crun 1.8.1 fails: "cgroups in hybrid mode not
#   supported"), cgroup_manager cgroupfs, and default_ulimits = [] (machines
#   like this one refuse raising RLIMIT_NOFILE/NPROC): a containers.conf of its
#   own (CONTAINERS_CONF), storage of its own (--root, --runroot);
# - no image registry: an image imported from a directory of mount points,
#   with /usr, /lib, /lib64 and /bin bound read-only and the build bound at
#   its own path; all of podman's own (storage, run root) outside the build, in
#   /dev/shm (see below);
# - the project's CRIU first on PATH (runc runs `criu swrk` from there);
# - CRIU options in a file named by the OCI annotation org.criu.config: libdir
#   for the plugin; at restore also mntns-compat-mode (CRIU's mount-v2 cannot
#   move these bind mounts; the dump refuses the option);
# - the plugin's settings in cusnap.conf beside it (the driver's path: CRIU runs
#   through its own loader; the content mode).
# And the README's Podman recipe, run as written (its IMAGE and WORKER this
# test's). Skips (77), with the reason, where containers cannot run.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/../.." && pwd)
# (run from the source tree, tests/criu: the plain build beside it)
[ -f "$build/Makefile" ] && [ -d "$build/build/lib/criu" ] && build=$build/build
repo=$(cd "$build/.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() {
	echo "FAIL: $*"
	# CRIU's own account (podman removes its logs with the container).
	for log in "${w:-/nonexistent}"/storage/overlay-containers/*/userdata/{dump,restore}.log; do
		[ -f "$log" ] && { echo "--- $log:"; grep -E 'Error|cusnap' "$log" | tail -n 15; }
	done
	exit 1
}
nccl=0
[ "${1:-}" = --nccl ] && nccl=1
[ -n "${CUSNAP_SANITIZER:-}" ] && skip "CRIU loads the plugin of the plain build only"
[ $nccl = 0 ] || [ -x "$build/examples/nccl_group" ] || skip "no $build/examples/nccl_group (make nccl)"
[ "$(id -u)" = 0 ] || skip "podman checkpoint needs root"
criu=$("$repo/scripts/setup-criu.sh" "$build" 2>/dev/null | tail -n1)
[ -x "$criu" ] || skip "no working CRIU (scripts/setup-criu.sh)"
plugin=$build/lib/criu/cusnap_plugin.so
[ -f "$plugin" ] || fail "$plugin is not built"

. "$repo/scripts/apt-lib.sh"
apt_install_missing "$build/podman-apt.log" podman runc || skip "cannot install podman and runc (see $build/podman-apt.log)"

# Everything podman makes (storage, run root, the rootfs, the control
# directories) lies outside the build that is bound into the container: CRIU
# records the mounts a container sees, and one holding the container's own
# rootfs (its /etc/hosts and /etc/hostname file binds seen twice) makes its
# compat mount engine fail at restore ("Not a directory").
w=$(mktemp -d /dev/shm/cusnap-podman-XXXXXX) || fail "mktemp in /dev/shm"
chmod 0711 "$w"
P=(podman --root "$w/storage" --runroot "$w/run")
recipe_dir=/var/lib/cusnap/worker # (the README's recipe's: made and removed by it)
made_recipe_dir=0
netns= # (a named network namespace of this test's, once made)
node_ns=() etcd_pid= # (the two nodes' namespaces, their etcd)
cleanup() {
	[ $made_recipe_dir = 1 ] && rm -rf "$recipe_dir" && rmdir "${recipe_dir%/*}" 2>/dev/null
	[ -n "$netns" ] && ip netns del "$netns" 2>/dev/null
	for n in "${node_ns[@]}"; do ip netns del "$n" 2>/dev/null; done
	[ -n "$etcd_pid" ] && kill "$etcd_pid" 2>/dev/null
	[ -n "${KEEP:-}" ] && { echo "kept: $w"; return; } # (KEEP=1: for a look at CRIU's logs)
	"${P[@]}" rm -a -f >/dev/null 2>&1
	"${P[@]}" system reset -f >/dev/null 2>&1 # (the storage's mounts)
	rm -rf "$w"
}
trap cleanup EXIT
mkdir -p "$w/rootfs"/{usr,lib,lib64,bin,proc,sys,dev,etc,tmp} "$w/plugins" "$w/bin"
# The files podman binds over: there at the restore too (else CRIU's compat
# mount engine cannot bind a file onto them).
touch "$w/rootfs/etc"/{hostname,hosts,resolv.conf}
cat >"$w/containers.conf" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
export CONTAINERS_CONF=$w/containers.conf
ln -s "$criu" "$w/bin/criu"
export PATH=$w/bin:$PATH
ln -s "$plugin" "$w/plugins/cusnap_plugin.so"
say_conf() { printf 'libcuda = %s\ncontent = %s\n' "$build/emu/libcuda.so.1" "$1" >"$w/plugins/cusnap.conf"; }
criu_conf() { # dump | restore
	echo "libdir $w/plugins" >"$w/criu.conf"
	# TCP connections are locked while CRIU works: with CRIU's own nftables
	# where iptables-restore is not installed.
	command -v iptables-restore >/dev/null || echo "network-lock nftables" >>"$w/criu.conf"
	[ "$1" = restore ] && echo "mntns-compat-mode" >>"$w/criu.conf"
	return 0
}
criu_conf dump
binds=(-v /usr:/usr:ro -v /lib:/lib:ro -v /bin:/bin:ro -v "$build:$build:ro")
[ -d /lib64 ] && binds+=(-v /lib64:/lib64:ro)

# The image: the rootfs of mount points, imported (no registry needed; a
# container made with --rootfs instead cannot be restored with --import).
out=$(tar -C "$w/rootfs" -c . | "${P[@]}" import - localhost/cusnap-rootfs 2>&1) ||
	skip "podman cannot import an image here: $(echo "$out" | tail -n1)"
out=$("${P[@]}" run --rm --network none "${binds[@]}" localhost/cusnap-rootfs /bin/true 2>&1) ||
	skip "containers cannot run here: $(echo "$out" | tail -n1)"

# start NAME CTL [PODMAN-RUN-OPTIONS...]: a container running the interposed
# group, parked until restore-complete (its network: none, unless the options
# name one).
start() {
	local name=$1 ctl=$2
	shift 2
	local opts=("$@")
	[ ${#opts[@]} = 0 ] && opts=(--network none)
	mkdir -p "$ctl"
	"${P[@]}" run -d --name "$name" "${opts[@]}" --annotation "org.criu.config=${CRIU_CONF:-$w/criu.conf}" \
		-e LD_LIBRARY_PATH="$build/emu" -e SNAPSHOT_CONTROL_DIR="$ctl" "${binds[@]}" -v "$ctl:$ctl" \
		--tmpfs /tmp localhost/cusnap-rootfs /bin/sh -c \
		"exec $build/bin/cusnap run -- $build/examples/vmm_group --workers 1 --allocs 2 --timeout 120 >$ctl/group.log 2>&1" \
		>/dev/null || return 1
	for _ in $(seq 300); do
		[ -e "$ctl/ready-for-snapshot" ] && return 0
		sleep 0.1
	done
	echo "the group in $name did not get ready:"
	cat "$ctl/group.log"
	return 1
}

# passed NAME CTL: the restored container's group verified itself and exited 0.
passed() {
	local name=$1 ctl=$2 rc
	rc=$(timeout 120 "${P[@]}" wait "$name" 2>&1 | tail -n1)
	[ "$rc" = 0 ] && [ "$(grep -c '^PASS vmm_group' "$ctl/group.log")" = 2 ] && return 0
	echo "container $name exited ${rc:-?}; its group's log:"
	cat "$ctl/group.log"
	return 1
}

if [ $nccl = 1 ]; then
	name=nccl ctl=$w/ctl-nccl
	mkdir -p "$ctl"
	"$build/bin/cuemu-topo" --kind pcie --devices 2 >"$w/topo.xml" || fail "cuemu-topo"
	say_conf host
	criu_conf dump
	"${P[@]}" run -d --name "$name" --network host --annotation "org.criu.config=$w/criu.conf" \
		-e LD_LIBRARY_PATH="$build/emu:$build/lib" -e SNAPSHOT_CONTROL_DIR="$ctl" -e CUEMU_DEVICES=2 \
		-e NCCL_TOPO_FILE="$w/topo.xml" -e NCCL_HOSTID=cusnap-podman -e NCCL_NVLS_ENABLE=0 \
		-e NCCL_SOCKET_IFNAME=lo "${binds[@]}" -v "$ctl:$ctl" -v "$w/topo.xml:$w/topo.xml:ro" \
		--tmpfs /tmp localhost/cusnap-rootfs /bin/sh -c \
		"exec $build/bin/cusnap run -- $build/examples/nccl_group --ranks 2 --timeout 180 >$ctl/group.log 2>&1" \
		>/dev/null || fail "cannot start $name"
	for _ in $(seq 1200); do
		[ -e "$ctl/ready-for-snapshot" ] && break
		sleep 0.1
	done
	[ -e "$ctl/ready-for-snapshot" ] || { cat "$ctl/group.log"; fail "the NCCL group did not get ready"; }
	out=$("${P[@]}" container checkpoint --tcp-established "$name" 2>&1) ||
		fail "podman container checkpoint --tcp-established $name: $out"
	criu_conf restore
	out=$("${P[@]}" container restore --tcp-established "$name" 2>&1) ||
		fail "podman container restore --tcp-established $name: $out"
	rc=$(timeout 180 "${P[@]}" wait "$name" 2>&1 | tail -n1)
	[ "$rc" = 0 ] && [ "$(grep -c '^PASS nccl_group rank' "$ctl/group.log")" = 2 ] &&
		[ "$(grep -c 'after release: bytes, marks through imports, ncclCommSplit' "$ctl/group.log")" = 2 ] || {
		cat "$ctl/group.log"
		fail "the restored NCCL group did not pass (container exited ${rc:-?})"
	}
	echo "ok   podman checkpoint/restore --tcp-established of a 2-rank NCCL group: its connections restored"
	exit 0
fi

# The README's recipe, as written: its IMAGE this test's image (with what it
# needs to run the build) and its WORKER the example under cusnap run; the
# restored group verifies itself and the container exits 0.
# (a plain `podman`, as the recipe runs it, uses the same storage, with the driver podman chose)
driver=$("${P[@]}" info --format '{{.Store.GraphDriverName}}' 2>/dev/null)
printf '[storage]\ndriver = "%s"\ngraphroot = "%s"\nrunroot = "%s"\n' "${driver:-overlay}" "$w/storage" "$w/run" \
	>"$w/storage.conf"
export CONTAINERS_STORAGE_CONF=$w/storage.conf
recipe=$(awk '/^<!-- check_podman: the recipe -->$/ { armed = 1; next }
	armed && /^```/ { if (inside) exit; inside = 1; next }
	inside { print }' "$repo/README.md")
[ -n "$recipe" ] || fail "README.md has no block after <!-- check_podman: the recipe -->"
if [ -e "$recipe_dir" ]; then
	echo "  (the README's recipe not run: $recipe_dir exists, and it is the recipe's)"
else
	made_recipe_dir=1
	ctl=$w/ctl-recipe
	mkdir -p "$ctl"
	IMAGE="--network none -e LD_LIBRARY_PATH=$build/emu ${binds[*]} -v $ctl:/snapshot-control --tmpfs /tmp"
	IMAGE="$IMAGE localhost/cusnap-rootfs"
	WORKER="$build/bin/cusnap run -- $build/examples/vmm_group --workers 1 --allocs 2 --timeout 120"
	# Its `make install` goes to a scratch directory (PREFIX and CRIU_PLUGIN_DIR
	# from the environment), never into the machine's: a cusnap plugin in CRIU's
	# own directory is loaded by every plain CRIU run on the machine.
	recipe=${recipe//\/usr\/lib\/criu/$w/criu-lib}
	out=$(cd "$repo" && IMAGE=$IMAGE WORKER=$WORKER PREFIX=$w/prefix CRIU_PLUGIN_DIR=$w/criu-lib \
		timeout 300 bash -eu -c "$recipe" 2>&1) ||
		fail "the README's Podman recipe: $(echo "$out" | tail -n 20)"
	[ -f "$w/criu-lib/cusnap_plugin.so" ] && [ -x "$w/prefix/bin/cusnap" ] ||
		fail "the README's recipe: its make install did not install into the scratch directory"
	rc=$(timeout 120 podman wait worker 2>&1 | tail -n1)
	logs=$(podman logs worker 2>&1)
	[ "$rc" = 0 ] && [ "$(grep -c '^PASS vmm_group' <<<"$logs")" = 2 ] ||
		fail "the README's recipe: the restored worker exited ${rc:-?}: $logs"
	podman rm -f worker >/dev/null
	rm -rf "$recipe_dir" && rmdir "${recipe_dir%/*}" 2>/dev/null
	made_recipe_dir=0
	echo "ok   the README's Podman recipe as written: checkpointed, restored, the worker passed"
fi

for content in host native; do
	name=grp-$content ctl=$w/ctl-$content
	say_conf "$content"
	criu_conf dump
	start "$name" "$ctl" || fail "cannot start $name"
	out=$("${P[@]}" container checkpoint "$name" 2>&1) || fail "podman container checkpoint $name: $out"
	image=$(ls "$w"/storage/overlay-containers/*/userdata/checkpoint/cusnap-plugin.json 2>/dev/null | head -n1)
	grep -q "\"content\":\"$content\"" "$image" 2>/dev/null ||
		fail "$name: the checkpoint has no cusnap-plugin.json of $content content (the plugin did not run)"
	criu_conf restore
	out=$("${P[@]}" container restore "$name" 2>&1) || fail "podman container restore $name: $out"
	passed "$name" "$ctl" || fail "$name did not pass after its restore"
	echo "ok   podman checkpoint/restore of an interposed group, $content content"
	"${P[@]}" rm -f "$name" >/dev/null
done

# A container joined to a named network namespace, as a node's or a pod's
# (--network ns:PATH: it outlives the container): its listener's own short
# connections leave TIME_WAIT entries there, which the restore into that
# namespace meets; checkpointed and restored --tcp-established, the plugin
# clears them there first (CRIU failed to bind the listener before).
if command -v ip >/dev/null; then
	netns=cusnap-podman-$$
	ip netns add "$netns" && ip -n "$netns" link set lo up || fail "ip netns add $netns"
	name=grp-joined ctl=$w/ctl-joined
	say_conf host
	criu_conf dump
	start "$name" "$ctl" --network "ns:/run/netns/$netns" -e VMM_GROUP_TCP=self || fail "cannot start $name"
	out=$("${P[@]}" container checkpoint --tcp-established "$name" 2>&1) ||
		fail "podman container checkpoint --tcp-established $name: $out"
	criu_conf restore
	out=$("${P[@]}" container restore --tcp-established "$name" 2>&1) ||
		fail "podman container restore --tcp-established $name: $out"
	passed "$name" "$ctl" || fail "$name did not pass after its restore"
	grep -q "the listener accepted a new connection" "$ctl/group.log" || fail "$name: its listener was not restored"
	echo "ok   podman checkpoint/restore --tcp-established of a container in a named network namespace"
	"${P[@]}" rm -f "$name" >/dev/null
	ip netns del "$netns"
	netns=
fi

# Two simulated nodes: network namespaces of this test's own linked by a veth
# pair (198.18.0.2 and .3), a container joined to each (--network ns:PATH),
# the two linked by a TCP stream across the nodes, each with its own plugin
# settings (its own criu.conf naming its own libdir and cusnap.conf: member n0
# or n1 of one group, meeting in an etcd of this test's on the loopback, which
# the plugin reaches from CRIU's namespace); both checkpointed at once with
# --tcp-established, meeting at the group's boundary, then both restored at
# once: each group verifies itself, and the stream carried a token after
# restore-complete.
nodes_case() {
	local etcd port client peer n i
	etcd=$("$repo/scripts/setup-etcd.sh" "$build" 2>/dev/null | tail -n1)
	[ -x "$etcd" ] || { echo "  (two nodes skipped: no etcd: scripts/setup-etcd.sh)"; return 0; }
	node_ns=(cusnap-pn-$$-a cusnap-pn-$$-b)
	ip netns add "${node_ns[0]}" && ip netns add "${node_ns[1]}" || fail "ip netns add"
	ip link add "cpn$$a" netns "${node_ns[0]}" type veth peer name "cpn$$b" netns "${node_ns[1]}" ||
		fail "ip link add a veth pair between the nodes"
	for i in 0 1; do
		n=$([ $i = 0 ] && echo a || echo b)
		ip -n "${node_ns[$i]}" link set "cpn$$$n" name eth0 &&
			ip -n "${node_ns[$i]}" addr add "198.18.0.$((i + 2))/24" dev eth0 &&
			ip -n "${node_ns[$i]}" link set eth0 up && ip -n "${node_ns[$i]}" link set lo up ||
			fail "addressing node $n"
	done
	client=$((30000 + $$ % 15000)) peer=$((client + 15000))
	"$etcd" --name pn --data-dir "$w/etcd" --listen-client-urls "http://127.0.0.1:$client" \
		--advertise-client-urls "http://127.0.0.1:$client" --listen-peer-urls "http://127.0.0.1:$peer" \
		--initial-advertise-peer-urls "http://127.0.0.1:$peer" --initial-cluster "pn=http://127.0.0.1:$peer" \
		>"$w/etcd.log" 2>&1 &
	etcd_pid=$!
	for _ in $(seq 100); do
		"$build/bin/cusnap" inspect --group probe --etcd "http://127.0.0.1:$client" >/dev/null 2>&1 && break
		sleep 0.1
	done
	port=$((20000 + $$ % 10000))
	for i in 0 1; do
		n=$([ $i = 0 ] && echo a || echo b)
		mkdir -p "$w/plugins-$n"
		ln -s "$plugin" "$w/plugins-$n/cusnap_plugin.so"
		printf 'libcuda = %s\ncontent = file\ngroup = podnodes\nmembers = 2\nmember = n%d\netcd = %s\ngroup-timeout = 40000\n' \
			"$build/emu/libcuda.so.1" $i "http://127.0.0.1:$client" >"$w/plugins-$n/cusnap.conf"
		printf 'libdir %s\nnetwork-lock nftables\n' "$w/plugins-$n" >"$w/criu-$n.conf"
	done
	local t_start
	t_start=$(date +%s.%N)
	CRIU_CONF=$w/criu-a.conf start node-a "$w/ctl-a" --network "ns:/run/netns/${node_ns[0]}" \
		-e VMM_GROUP_TCP=listen:198.18.0.2:$port -e VMM_GROUP_TCP_STREAM=1 >"$w/start-a.log" 2>&1 &
	local sa=$!
	CRIU_CONF=$w/criu-b.conf start node-b "$w/ctl-b" --network "ns:/run/netns/${node_ns[1]}" \
		-e VMM_GROUP_TCP=connect:198.18.0.2:$port -e VMM_GROUP_TCP_STREAM=1 >"$w/start-b.log" 2>&1 &
	local sb=$!
	wait $sa || fail "cannot start node a's container: $(cat "$w/start-a.log")"
	wait $sb || fail "cannot start node b's container: $(cat "$w/start-b.log")"
	local op pa pb t0 took
	t0=$(date +%s.%N)
	took="started $(awk -v a="$t_start" -v b="$t0" 'BEGIN { printf "%.1f s", b - a }')"
	for op in checkpoint restore; do # (both at once: each waits at the group's boundary for the other)
		"${P[@]}" container "$op" --tcp-established node-a >"$w/$op-a.log" 2>&1 &
		pa=$!
		"${P[@]}" container "$op" --tcp-established node-b >"$w/$op-b.log" 2>&1 &
		pb=$!
		wait $pa || fail "podman container $op node-a: $(cat "$w/$op-a.log")"
		wait $pb || fail "podman container $op node-b: $(cat "$w/$op-b.log")"
		for n in a b; do echo "mntns-compat-mode" >>"$w/criu-$n.conf"; done
		took="$took $op $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }')"
		t0=$(date +%s.%N)
	done
	for n in a b; do
		# (its group's own word, read from its log: `podman wait` took 20 s to
		# see these containers, restored into a namespace they joined, end)
		for _ in $(seq 1200); do
			[ "$(grep -c '^PASS vmm_group' "$w/ctl-$n/group.log")" = 2 ] && break
			grep -q '^FAIL' "$w/ctl-$n/group.log" && break
			sleep 0.1
		done
		[ "$(grep -c '^PASS vmm_group' "$w/ctl-$n/group.log")" = 2 ] || {
			cat "$w/ctl-$n/group.log"
			fail "node $n's container did not pass after its restore"
		}
		[ "$(grep -c 'tcp: token' "$w/ctl-$n/group.log")" = 2 ] ||
			fail "node $n: the stream across the nodes carried no token after the restore"
		"${P[@]}" rm -f "node-$n" >/dev/null
	done
	echo "ok   podman containers in two nodes' namespaces as one group: checkpoint and restore --tcp-established ($took)"
}

if command -v ip >/dev/null; then
	nodes_case
fi

# (file content: the shared bytes in files of their own beside the images must
# travel in the archive and be read back from the import)
name=grp-export ctl=$w/ctl-export
say_conf file
criu_conf dump
start "$name" "$ctl" || fail "cannot start $name"
out=$("${P[@]}" container checkpoint --export "$w/export.tar.gz" "$name" 2>&1) ||
	fail "podman container checkpoint --export: $out"
tar -tf "$w/export.tar.gz" | grep -q 'cuda-vmm-.*\.bytes$' ||
	fail "the exported archive holds no file of file content"
"${P[@]}" rm -f "$name" >/dev/null
criu_conf restore
out=$("${P[@]}" container restore --import "$w/export.tar.gz" --name grp-imported 2>&1) ||
	fail "podman container restore --import: $out"
passed grp-imported "$ctl" || fail "the imported container did not pass"
echo "ok   podman checkpoint --export, then restore --import into a new container (file content)"
