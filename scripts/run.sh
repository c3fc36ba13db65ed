#!/usr/bin/env bash
# scripts/run.sh - the main job: install the build dependencies, build and
# install fibril (under /usr/local), then run fibril-agent with its default
# modules from the installed module directory and show what it is doing
# with the fibril CLI. The agent keeps running until Ctrl-C (or SIGTERM).
# Set FIBRIL_RUN_ONCE=1 to stop it right after showing its status.
set -euo pipefail
umask 022
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "run as root (the agent manages BPF maps and /run/fibril)"; exit 1; }
scripts/deps.sh
[ -x configure ] || autoreconf -fi >/dev/null
mkdir -p build/run
[ -f build/run/Makefile ] || (cd build/run && ../../configure -q --prefix=/usr/local)
make -C build/run -j"$(nproc)" >/dev/null
make -C build/run install >/dev/null
ldconfig

/usr/local/sbin/fibril-agent &
agent=$!
trap 'kill -TERM $agent 2>/dev/null; wait $agent 2>/dev/null' EXIT INT TERM
for _ in $(seq 1 100); do
	/usr/local/bin/fibril health >/dev/null 2>&1 && break
	kill -0 $agent || exit 1
	sleep 0.1
done
echo
/usr/local/bin/fibril status
echo
/usr/local/bin/fibril modules
echo
/usr/local/bin/fibril map list
echo
echo "the agent is running (pid $agent, API on /run/fibril/fibril.sock); Ctrl-C stops it"
[ -n "${FIBRIL_RUN_ONCE:-}" ] && exit 0
wait $agent
