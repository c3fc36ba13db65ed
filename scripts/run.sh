#!/usr/bin/env bash
# scripts/run.sh - the main job: install the build dependencies, build and
# install fibril (under /usr/local), start a one-member etcd on loopback for
# the cluster-wide IPAM pool, then run fibril-agent with its modules
# (all but k8s, which needs an API server) and show what it does with the fibril CLI: its modules, the node
# CIDR it claimed through etcd, and pod addresses handed out from it. The
# agent keeps running until Ctrl-C (or SIGTERM). Set FIBRIL_RUN_ONCE=1 to
# stop right after showing its status.
#
# (Pod networking itself - the CNI plugin, endpoints and the BPF datapath -
# arrives with the datapath work; this shows the host and its IPAM today.)
set -euo pipefail
umask 022
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "run as root (the agent manages BPF maps and /run/fibril)"; exit 1; }
scripts/deps.sh
[ -x configure ] || autoreconf -fi >/dev/null 2>&1
mkdir -p build/run
[ -f build/run/Makefile ] || (cd build/run && ../../configure -q --prefix=/usr/local)
make -C build/run -j"$(nproc)" >/dev/null
make -C build/run install >/dev/null
ldconfig

demo=/var/lib/fibril-demo
mkdir -p "$demo"
etcd_pid=""
agent=""
cleanup() {
	[ -n "$agent" ] && kill -TERM "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
	[ -n "$etcd_pid" ] && kill -TERM "$etcd_pid" 2>/dev/null && wait "$etcd_pid" 2>/dev/null
	return 0
}
trap cleanup EXIT INT TERM

if ! curl -s --max-time 1 http://127.0.0.1:2379/health >/dev/null 2>&1; then
	etcd --name fibril-demo --data-dir "$demo/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster fibril-demo=http://127.0.0.1:2380 >"$demo/etcd.log" 2>&1 &
	etcd_pid=$!
	for _ in $(seq 1 100); do
		curl -s --max-time 1 http://127.0.0.1:2379/health | grep -q true && break
		sleep 0.1
	done
fi

cat >"$demo/fibril.conf" <<'CONF'
# The demo's config: every installed module; the node claims a /24 of
# 10.244.0.0/16 through etcd and hands pod addresses out of it.
[agent]
node-name = demo-node
# every installed module but k8s, which needs a Kubernetes API server
modules = hello, kvstore-etcd, ipam-cluster-pool, ipam-api

[providers]
ipam = ipam-cluster-pool

[kvstore-etcd]
endpoints = http://127.0.0.1:2379

[ipam-cluster-pool]
cluster-pool-ipv4-cidr = 10.244.0.0/16
cluster-pool-ipv4-mask-size = 24
CONF

/usr/local/sbin/fibril-agent --config "$demo/fibril.conf" &
agent=$!
for _ in $(seq 1 300); do
	/usr/local/bin/fibril health >/dev/null 2>&1 && break
	kill -0 "$agent" || exit 1
	sleep 0.1
done
fibril() { /usr/local/bin/fibril "$@"; }
echo
fibril modules
echo
fibril ipam allocate demo/pod-a/eth0
fibril ipam allocate demo/pod-b/eth0
echo
fibril status
echo
fibril ipam list
echo
echo "the agent is running (pid $agent, API on /run/fibril/fibril.sock); Ctrl-C stops it"
[ -n "${FIBRIL_RUN_ONCE:-}" ] && exit 0
wait "$agent"
