#!/usr/bin/env bash
# scripts/deps.sh - installs everything fibril needs to build, run and test
# on a fresh Debian 12 machine (as root). Safe to run again.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(
	build-essential autoconf automake libtool pkg-config clang llvm
	libbpf-dev libelf-dev libnl-3-dev libnl-route-3-dev libjson-c-dev
	libcurl4-openssl-dev libwebsockets-dev libwebsockets-evlib-uv libinih-dev
	libuv1-dev libcunit1-dev
	valgrind curl python3 iproute2 binutils
	etcd-server etcd-client containernetworking-plugins libyaml-dev openssl
	bpftool golang-go golang-github-appc-cni-dev iperf3 iputils-ping procps
	libclang-rt-14-dev
	libssl-dev zlib1g-dev
	libsystemd-dev debhelper lintian fakeroot dpkg-dev
	groff-base util-linux systemd
	python3-prometheus-client
	chromium chromium-driver python3-selenium
	iptables nftables strace
	python3-scapy
	libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler python3-grpcio python3-grpc-tools
	mmdebstrap buildah
)
missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing: ${missing[*]}"
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
