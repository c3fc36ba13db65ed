#!/bin/bash
# tests/bench/bench_rss.sh - memory of the README's module set (scripts/run.sh:
# kvstore-etcd, ipam-cluster-pool claiming its node CIDR through etcd,
# ipam-api, endpoint, datapath) with 1,000 endpoints, beside the reference:
# the same set without kvstore-etcd (ipam-cluster-pool with a static
# node-cidr). Both agents run at the same time, each in a network namespace
# of its own holding its veths (both ends: the endpoints need a host device
# to attach the datapath to, not a pod), and get the same calls: POST
# /v1/ipam and PUT /v1/endpoint per endpoint, as fibril-cni makes them.
# Prints VmRSS and VmHWM after start, after the endpoints and after a
# restart that restores them, and a breakdown of the main agent's RSS
# (anonymous, and file-backed: the shared libraries' pages) with the
# libraries kvstore-etcd brings in. Run by tests/bench/run.sh (make bench);
# needs root, etcd, ip and python3. ENDPOINTS=N changes the count.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
# shellcheck source=../lib/common.sh
. "$top_srcdir/tests/lib/common.sh" # $WORK, cleanup
BPFFS_DIR="/sys/fs/bpf/fibril-bench-rss-$$"

N=${ENDPOINTS:-1000}
# shellcheck source=bench_lib.sh
BENCH_NAME=bench_rss . "$top_srcdir/tests/bench/bench_lib.sh"
die() { bench_die "$@"; }
MODS=(kvstore-etcd ipam-cluster-pool ipam-api endpoint datapath)
bench_require ip python3 etcd
bench_require_modules "${MODS[@]}"
bench_find_agent

MAIN=fbr-$$-main
REF=fbr-$$-ref
bench_cleanup() {
	local rc=$?
	set +e
	bench_kill_netns "$MAIN" "$REF"
	(exit "$rc")
	cleanup # common.sh: kills what still runs from $WORK (etcd), removes $WORK and $BPFFS_DIR
}
trap bench_cleanup EXIT INT TERM

for ns in "$MAIN" "$REF"; do
	ip netns add "$ns"
	ip -n "$ns" link set lo up
done
mkdir -p "$WORK/main" "$WORK/ref"
bench_install_modules "$WORK/mods" "${MODS[@]}"

# etcd on the main agent's loopback, as scripts/run.sh runs it
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
peer=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# (in a subshell, so that bash does not report its kill at the end)
(
	ip netns exec "$MAIN" etcd --name bench --data-dir "$WORK/etcd" \
		--listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
		--listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
		--initial-cluster "bench=http://127.0.0.1:$peer" >"$WORK/etcd.log" 2>&1 &
	echo $! >"$WORK/etcd.pid"
)
etcd_ok=""
for _ in $(seq 1 100); do
	ip netns exec "$MAIN" python3 -c "import urllib.request, sys
sys.exit(0 if b'true' in urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1).read() else 1)" \
		2>/dev/null && { etcd_ok=1; break; }
	sleep 0.1 # sleep: the poll interval of a wait with a deadline
done
[ -n "$etcd_ok" ] || die "etcd did not become healthy: $(tail -n 5 "$WORK/etcd.log")"

# the veths: N pairs in each namespace, both ends there
for ns in "$MAIN" "$REF"; do
	python3 -c "
import sys
for i in range(int(sys.argv[1])):
    print(f'link add h{i} type veth peer name p{i}')
    print(f'link set h{i} up')
    print(f'link set p{i} up')" "$N" >"$WORK/$ns.batch"
	ip -n "$ns" -batch "$WORK/$ns.batch" || die "cannot create the veths in $ns"
done

# conf NAME MODULES EXTRA... : an agent config under $WORK/NAME
conf() {
	local name=$1 mods=$2
	shift 2
	{
		printf '[agent]\nnode-name = bench-%s\nmodules = %s\n' "$name" "$mods"
		printf 'module-dir = %s\nstate-dir = %s\nrun-dir = %s\n' "$WORK/mods" "$WORK/$name/state" "$WORK/$name/run"
		printf 'socket = %s\nbpffs-dir = %s\n\n[providers]\nipam = ipam-cluster-pool\n' \
			"$WORK/$name/fibril.sock" "$BPFFS_DIR/$name"
		printf '%s\n' "$@"
	} >"$WORK/$name/fibril.conf"
}
conf main "kvstore-etcd, ipam-cluster-pool, ipam-api, endpoint, datapath" \
	"[kvstore-etcd]" "endpoints = http://127.0.0.1:$port" \
	"[ipam-cluster-pool]" "cluster-pool-ipv4-cidr = 10.244.0.0/16" "cluster-pool-ipv4-mask-size = 20"
conf ref "ipam-cluster-pool, ipam-api, endpoint, datapath" \
	"[ipam-cluster-pool]" "node-cidr = 10.97.0.0/20"

cat >"$WORK/rss.py" <<'EOF'
# rss.py - driver of tests/bench/bench_rss.sh: starts both agents (each in
# its netns), makes the calls, reads /proc/PID/status and smaps_rollup.
import ctypes, json, os, signal, socket, subprocess, sys, time

libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000

def die(msg):
    print(f"bench_rss: {msg}", file=sys.stderr)
    sys.exit(1)

def enter_netns(name):
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            die(f"setns {name}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)

class Api:
    """HTTP/1.1 with keep-alive over the agent's unix socket."""
    def __init__(self, path):
        self.path, self.s, self.buf = path, None, b""
    def close(self):
        if self.s:
            self.s.close()
        self.s, self.buf = None, b""
    def call(self, method, path, body=None, retry=True):
        try:
            return self.call_once(method, path, body)
        except OSError:
            self.close()  # the agent closed an idle connection: once more
            if retry:
                return self.call(method, path, body, retry=False)
            raise
    def call_once(self, method, path, body):
        if not self.s:
            self.s = socket.socket(socket.AF_UNIX)
            self.s.settimeout(30)
            self.s.connect(self.path)
        data = json.dumps(body).encode() if body is not None else b""
        self.s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        while b"\r\n\r\n" not in self.buf:
            more = self.s.recv(65536)
            if not more:
                raise OSError("closed")
            self.buf += more
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        n = 0
        for l in lines[1:]:
            k, _, v = l.partition(":")
            if k.strip().lower() == "content-length":
                n = int(v.strip())
        while len(self.buf) < n:
            more = self.s.recv(65536)
            if not more:
                raise OSError("closed")
            self.buf += more
        out, self.buf = self.buf[:n], self.buf[n:]
        return status, out

def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1

class Agent:
    def __init__(self, name, netns, argv, work):
        self.name, self.netns, self.argv, self.work = name, netns, argv, work
        self.sock = f"{work}/{name}/fibril.sock"
        self.api, self.proc = Api(self.sock), None
    def start(self):
        self.api.close()
        enter_netns(self.netns)
        log = open(f"{self.work}/{self.name}.log", "a")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        with open(f"{self.work}/{self.name}.pid", "w") as f:
            f.write(str(self.proc.pid))
        t0 = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                die(f"the {self.name} agent exited ({self.proc.returncode}); log: "
                    + open(f"{self.work}/{self.name}.log").read()[-2000:])
            if time.monotonic() - t0 > 60:
                die(f"the {self.name} agent is not ready after 60 s")
            try:
                if self.api.call("GET", "/v1/healthz", retry=False)[0] == 200:
                    break
            except OSError:
                self.api.close()
            time.sleep(0.02)  # sleep: the poll interval of a wait with a deadline
        time.sleep(1)  # sleep: it settles (first keepalives, watches) before its RSS is read
    def stop(self):
        self.api.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()
    def mem(self):
        return status_kb(self.proc.pid, "VmRSS"), status_kb(self.proc.pid, "VmHWM")
    def breakdown(self):
        """RssAnon, RssFile, and kB resident per mapped file."""
        anon, fil = status_kb(self.proc.pid, "RssAnon"), status_kb(self.proc.pid, "RssFile")
        per, cur = {}, None
        with open(f"/proc/{self.proc.pid}/smaps") as f:
            for line in f:
                p = line.split()
                if "-" in p[0] and len(p) >= 5 and not p[0].endswith(":"):
                    cur = os.path.basename(p[5]) if len(p) > 5 and p[5].startswith("/") else None
                elif p[0] == "Rss:" and cur:
                    per[cur] = per.get(cur, 0) + int(p[1])
        return anon, fil, per

def run(work, n, main_ns, ref_ns, main_argv, ref_argv):
    out = lambda k, v: print(f"{k}={v}", flush=True)
    main = Agent("main", main_ns, main_argv, work)
    ref = Agent("ref", ref_ns, ref_argv, work)
    for a in (ref, main):
        a.start()
    out("start", "%d %d %d %d" % (main.mem() + ref.mem()))
    for a in (main, ref):
        enter_netns(a.netns)
        for i in range(n):
            owner = f"bench{i:06d}/eth0"
            st, body = a.api.call("POST", f"/v1/ipam?family=ipv4&owner={owner}")
            if st not in (200, 201):
                die(f"{a.name}: POST /v1/ipam owner {owner}: HTTP {st}: {body.decode()}")
            addr = json.loads(body)["addresses"][0]["address"]
            b = {"container-id": f"bench{i:06d}", "ifname": "eth0", "netns": f"/run/netns/{a.netns}",
                 "host-ifname": f"h{i}", "host-ifindex": socket.if_nametoindex(f"h{i}"),
                 "mac": "02:fe:00:00:%02x:%02x" % (i >> 8, i & 255),
                 "host-mac": "02:fb:00:00:%02x:%02x" % (i >> 8, i & 255),
                 "pod-namespace": f"ns{i % 10}", "pod-name": f"web-{i}", "ipv4": addr}
            st, body = a.api.call("PUT", f"/v1/endpoint/container-id:bench{i:06d}:eth0", b)
            if st != 201:
                die(f"{a.name}: PUT endpoint {i}: HTTP {st}: {body.decode()}")
    for a in (main, ref):
        st, body = a.api.call("GET", "/v1/endpoint")
        eps = json.loads(body)["endpoints"] if st == 200 else []
        if len(eps) != n or any(e["state"] != "ready" for e in eps):
            die(f"{a.name}: GET /v1/endpoint: HTTP {st}, {len(eps)} endpoints, "
                f"{sum(e['state'] != 'ready' for e in eps)} not ready; expected {n} ready")
    out("endpoints", "%d %d %d %d" % (main.mem() + ref.mem()))
    anon, fil, per = main.breakdown()
    ranon, rfil, rper = ref.breakdown()
    out("main_split", f"{anon} {fil}")
    out("ref_split", f"{ranon} {rfil}")
    extra = sorted(((kb - rper.get(f, 0), f) for f, kb in per.items() if kb - rper.get(f, 0) >= 64), reverse=True)
    out("main_files", " ".join(f"{f}:{kb}" for kb, f in extra[:10]))
    for a in (main, ref):
        a.stop()
    for a in (ref, main):
        a.start()
    out("restart", "%d %d %d %d" % (main.mem() + ref.mem()))
    for a in (main, ref):
        st, body = a.api.call("GET", "/v1/endpoint")
        if st != 200 or len(json.loads(body)["endpoints"]) != n:
            die(f"{a.name}: after the restart GET /v1/endpoint: HTTP {st}, expected {n} endpoints")
    out("restart_get", "%d %d %d %d" % (main.mem() + ref.mem()))
    for a in (main, ref):
        a.stop()

if __name__ == "__main__":
    sep = sys.argv.index("--")
    sep2 = sys.argv.index("--", sep + 1)
    a = sys.argv[1:sep]
    run(a[0], int(a[1]), a[2], a[3], sys.argv[sep + 1:sep2], sys.argv[sep2 + 1:])
EOF

python3 "$WORK/rss.py" "$WORK" "$N" "$MAIN" "$REF" -- "$AGENT_BIN" --config "$WORK/main/fibril.conf" \
	-- "$AGENT_BIN" --config "$WORK/ref/fibril.conf" >"$WORK/run.out" ||
	{ cat "$WORK/run.out"; die "the run failed (agent logs: $WORK/main.log, $WORK/ref.log)"; }

val() { sed -n "s/^$1=//p" "$WORK/run.out"; }
mb() { awk -v k="$1" 'BEGIN { printf "%.2f", k / 1024 }'; }
# row LABEL KEY : VmRSS and VmHWM of both agents at one moment
row() {
	local m_rss m_hwm r_rss r_hwm
	read -r m_rss m_hwm r_rss r_hwm <<<"$(val "$2")"
	printf '%-50s %8s / %-8s %8s / %-8s %+7s MB\n' "$1" "$(mb "$m_rss")" "$(mb "$m_hwm")" \
		"$(mb "$r_rss")" "$(mb "$r_hwm")" "$(awk -v a="$m_rss" -v b="$r_rss" 'BEGIN { printf "%.2f", (a - b) / 1024 }')"
}
max_rss=$( (val endpoints; val restart; val restart_get) | awk '{ print $1 }' | sort -g | tail -n 1)
echo "== memory of the README's module set with $N endpoints ($(nproc) cores, $(uname -r), load $(cut -d' ' -f1 /proc/loadavg)) =="
echo "   main: kvstore-etcd, ipam-cluster-pool (node CIDR claimed through etcd), ipam-api, endpoint, datapath"
echo "   reference: the same without kvstore-etcd (static node-cidr), in the same run"
printf '%-50s %19s %19s %10s\n' "MB, VmRSS / VmHWM" "main" "reference" "difference"
row "after start, 0 endpoints" start
row "after $N x (POST /v1/ipam + PUT /v1/endpoint)" endpoints
row "after a restart (restored $N endpoints)" restart
row "... and GET /v1/endpoint" restart_get
read -r anon fil <<<"$(val main_split)"
read -r ranon rfil <<<"$(val ref_split)"
echo "   with $N endpoints, anonymous: main $(mb "$anon") MB, reference $(mb "$ranon") MB;" \
	"file-backed (libraries): main $(mb "$fil") MB, reference $(mb "$rfil") MB"
echo "   resident kB that only the main agent has, by file: $(val main_files)"
echo "goal VmRSS < 16 MB with $N endpoints: max $(mb "$max_rss") MB:" \
	"$(awk -v v="$max_rss" 'BEGIN { print ((v + 0 < 16384) ? "met" : "NOT met") }')"
