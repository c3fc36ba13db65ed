#!/usr/bin/env bash
# tests/bench/bench_endpoints.sh - the agent with 1,000 endpoints (as root,
# by hand or from `make bench`; never by make check). A node netns runs the
# agent with ipam-cluster-pool (static node-cidr), ipam-api, endpoint and
# datapath; 1,000 pods are attached as fibril-cni does it (POST /v1/ipam
# for owner CID/IFNAME, a veth pair with the host side lxc<hash> in the
# node and the peer in a pod netns - 10 pod netns holding 100 peers each -
# then PUT /v1/endpoint/container-id:CID:IFNAME). A reference agent, same
# binary and modules, with 0 endpoints runs in its own netns. Measured, each
# next to its reference from the same run:
#   1. restart-to-ready: kill -9, exec again, until GET /v1/healthz is 200
#      (the API serves only after the restore), and until READY=1 on the
#      NOTIFY_SOCKET the bench listens on (as systemd's Type=notify would:
#      the packaging issue's figure); median and max of RESTARTS,
#      the two agents interleaved; plus the agent's own "restored N
#      endpoints in X ms" figure. Goal < 100 ms (1,000 endpoints), < 1 s
#      (10,000).
#   2. VmRSS and VmHWM after the PUTs and after each restart. Goal < 16 MB.
#   3. the loop's longest stall during each restart (GET /v1/status
#      loop.longest_stall_ms, right after ready, and where it was). Goal
#      < 50 ms.
# Beside each restart's wall time, the CPU time the agent's threads ran
# until ready (/proc/PID/task/*/schedstat): on a loaded machine the wall
# clock mostly measures the wait for a core.
# BASE=<another build dir> (e.g. /work/base/build, an older tree): its agent
# and modules restart on the same node, state and pins, interleaved with
# this build's, and its figures are printed beside them ("before"); its
# stall is the restore's own time (one uninterrupted run on the loop then:
# "restored N endpoints in X ms"), as it has no stall measurement.
# HOG=N: N busy loops run during the restarts (a loaded machine).
# Checked on the way (the bench fails with a message when broken): after
# every restart GET /v1/endpoint is the same as before (IDs, identities,
# addresses, everything), GET /v1/datapath shows every endpoint with the new
# program attached, `tc filter show dev lxc.. ingress` on a sample of host
# veths shows it too, and two pods in different netns ping each other.
# Figures are printed, never asserted. Run from a build dir:
#   top_srcdir=/work/main top_builddir=$PWD bash tests/bench/bench_endpoints.sh
# Environment: ENDPOINTS (1000; 10000 for the second goal), PODNS (10), RESTARTS (5),
# TC_SAMPLE (20), BASE, HOG,
# NODE_UPLINK (1: the node netns has an uplink eth0 holding an address,
# created before the pods; 0: none, see below).
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
. "$top_srcdir/tests/lib/common.sh"
# one bpffs dir per run, holding the pins of both agents (removed by cleanup)
BPFFS_DIR="/sys/fs/bpf/fibril-bench-ep-$$"

N=${ENDPOINTS:-1000}
PODNS=${PODNS:-10}
RESTARTS=${RESTARTS:-5}
TC_SAMPLE=${TC_SAMPLE:-20}
# shellcheck source=bench_lib.sh
BENCH_NAME=bench_endpoints . "$top_srcdir/tests/bench/bench_lib.sh"
die() { bench_die "$@"; }
MODS=(ipam-cluster-pool ipam-api endpoint datapath)
bench_require ip tc ping python3
bench_require_modules "${MODS[@]}"
if [ "$N" -lt "$PODNS" ] || [ "$PODNS" -lt 2 ]; then die "need ENDPOINTS >= PODNS >= 2"; fi
bench_find_agent

# ---- namespaces and cleanup -------------------------------------------------------------
NODE=fbe-$$-node
REF=fbe-$$-ref
PODS=()
for k in $(seq 0 $((PODNS - 1))); do PODS+=("fbe-$$-p$k"); done
ALL_NS=("${PODS[@]}" "$NODE" "$REF")
bench_cleanup() {
	local rc=$?
	set +e
	# the agents, anything else started inside our namespaces (ping, ...),
	# then the namespaces (with the veths, routes and host devices)
	bench_kill_netns "${ALL_NS[@]}"
	(exit "$rc")
	cleanup # common.sh: kills what still runs from $WORK, removes $WORK and $BPFFS_DIR
}
trap bench_cleanup EXIT INT TERM

for ns in "${ALL_NS[@]}"; do
	ip netns add "$ns"
	ip -n "$ns" link set lo up
done
mkdir -p "$BPFFS_DIR"
mods=$WORK/mods
mkdir -p "$WORK/main" "$WORK/ref"
bench_install_modules "$mods" "${MODS[@]}"

# ---- the driver: starts and times the agents, makes the API calls, checks ---------------
cat >"$WORK/epbench.py" <<'EOF'
# epbench.py - driver of tests/bench/bench_endpoints.sh: `plan` writes the
# ip -batch files for the veths; `run` starts the agents (each in its netns,
# setns then exec), attaches the endpoints as fibril-cni does, restarts the
# agents with kill -9 and times exec -> GET /v1/healthz 200, reads their
# memory and checks the restored state. Prints key=value lines.
import ctypes, hashlib, json, os, re, signal, socket, subprocess, sys, time

CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)

def enter_netns(name):
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {name}")
    finally:
        os.close(fd)

def die(msg):
    print(f"bench_endpoints: {msg}", file=sys.stderr)
    sys.exit(1)

# ---- a small HTTP/1.1 client on the agent's unix socket (keep-alive) ----
class Api:
    def __init__(self, path):
        self.path, self.sock, self.buf = path, None, b""
    def close(self):
        if self.sock:
            self.sock.close()
        self.sock, self.buf = None, b""
    def _connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(20)  # a hung agent fails the run instead of hanging it
        s.connect(self.path)
        self.sock, self.buf = s, b""
    def _read_until(self, pred):
        while not pred():
            chunk = self.sock.recv(262144)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk
    def call(self, method, path, body=None, retry=True):
        data = b"" if body is None else json.dumps(body).encode()
        req = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n"
               + ("Content-Type: application/json\r\n" if body is not None else "") + "\r\n").encode() + data
        try:
            if not self.sock:
                self._connect()
            self.sock.sendall(req)
            self._read_until(lambda: b"\r\n\r\n" in self.buf)
            head, _, rest = self.buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            hdrs = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
            length = int(hdrs.get("content-length", "0"))
            self.buf = rest
            self._read_until(lambda: len(self.buf) >= length)
            payload, self.buf = self.buf[:length], self.buf[length:]
            if hdrs.get("connection", "").lower() == "close":
                self.close()
            return status, payload
        except (ConnectionError, BrokenPipeError, FileNotFoundError, ConnectionRefusedError, OSError):
            self.close()
            if retry:
                return self.call(method, path, body, retry=False)
            raise

def proc_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1

# ---- the plan: names, MACs and netns of every pod ----
def pods(n, podns, prefix):
    per = (n + podns - 1) // podns
    out = []
    for i in range(n):
        k, j = i // per, i % per
        cid = hashlib.sha256(f"{prefix}-{i}".encode()).hexdigest()
        ifname = f"eth{j}"
        host = "lxc" + hashlib.sha256(f"{cid}/{ifname}".encode()).hexdigest()[:12]
        out.append({"i": i, "cid": cid, "ifname": ifname, "host": host, "ns": f"{prefix}-p{k}",
                    "mac": "02:fe:%02x:%02x:%02x:%02x" % (k, j >> 8, j & 255, 1),
                    "host-mac": "02:fb:%02x:%02x:%02x:%02x" % (k, j >> 8, j & 255, 1),
                    "pod-namespace": f"ns{i % 10}", "pod-name": f"web-{i}"})
    return out

def cmd_plan(work, n, podns, prefix, node):
    ps = pods(n, podns, prefix)
    with open(f"{work}/node.batch", "w") as f:
        for p in ps:
            f.write(f"link add {p['host']} address {p['host-mac']} type veth peer name {p['ifname']} "
                    f"address {p['mac']} netns {p['ns']}\n")
            f.write(f"link set {p['host']} up\n")
    for k in range(podns):
        with open(f"{work}/p{k}.batch", "w") as f:
            for p in ps:
                if p["ns"] == f"{prefix}-p{k}":
                    f.write(f"link set {p['ifname']} up\n")

# ---- agents ----
class Agent:
    def __init__(self, name, netns, argv, sock, work, libdir=None):
        self.name, self.netns, self.argv, self.sock, self.work = name, netns, argv, sock, work
        self.libdir = libdir
        self.proc, self.runs = None, 0
        self.api = Api(sock)
        # a NOTIFY_SOCKET as systemd's (Type=notify): ready_ms is exec -> READY=1
        self.notify_path = f"{work}/{name}.notify"
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.notify.setblocking(False)
        self.ready_ms = None
    def ready_seen(self):
        try:
            while True:
                if "READY=1" in self.notify.recv(4096).decode().split("\n"):
                    return True
        except BlockingIOError:
            return False
    def start(self):
        """exec the agent in its netns; returns ms from just before the
        fork to GET /v1/healthz 200 (and sets ready_ms: to READY=1 on its
        NOTIFY_SOCKET)."""
        self.api.close()
        try:
            os.unlink(self.sock)
        except FileNotFoundError:
            pass
        self.runs += 1
        self.log = f"{self.work}/{self.name}-{self.runs}.log"
        logf = open(self.log, "w")
        enter_netns(self.netns)  # inherited by the child; vfork+exec, no preexec hook
        self.ready_seen()  # drop what a killed run left
        self.ready_ms = None
        env = dict(os.environ, NOTIFY_SOCKET=self.notify_path)
        if self.libdir:
            env["LD_LIBRARY_PATH"] = self.libdir
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                     env=env)
        with open(f"{self.work}/{self.name}.pid", "w") as f:
            f.write(str(self.proc.pid))
        logf.close()
        last = None
        while True:
            if self.proc.poll() is not None:
                die(f"the {self.name} agent exited ({self.proc.returncode}) before ready; log: "
                    + open(self.log).read()[-2000:])
            if time.monotonic() - t0 > 180:
                die(f"the {self.name} agent is not ready after 180 s (last healthz: {last}); log: "
                    + open(self.log).read()[-2000:])
            if self.ready_ms is None and self.ready_seen():
                self.ready_ms = (time.monotonic() - t0) * 1e3
            try:
                st, body = self.api.call("GET", "/v1/healthz", retry=False)
                if st == 200:
                    healthz_ms = (time.monotonic() - t0) * 1e3
                    self.ready_cpu_ms = self.cpu_ms()
                    # READY=1 follows the API's listen: it may come just
                    # after this 200, however long the start took (a first
                    # start's verifier: 45 s at load 24)
                    t200 = time.monotonic()
                    while self.ready_ms is None and time.monotonic() - t200 < 30:
                        if self.ready_seen():
                            self.ready_ms = (time.monotonic() - t0) * 1e3
                        time.sleep(0.0005)  # sleep: the poll interval of a wait with a deadline (0.5 ms: it measures)
                    if self.ready_ms is None:
                        die(f"the {self.name} agent answers but sent no READY=1 on NOTIFY_SOCKET")
                    return healthz_ms
                last = f"{st} {body.decode()[:300]}"
            except OSError:
                pass
            time.sleep(0.0005)  # sleep: the poll interval of a wait with a deadline (0.5 ms: it measures)
    def kill9(self):
        self.api.close()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
    def mem(self):
        return proc_kb(self.proc.pid, "VmRSS"), proc_kb(self.proc.pid, "VmHWM")
    def cpu_ms(self):
        """CPU time the agent's threads ran (schedstat), a figure less bent
        by a loaded machine than the wall clock"""
        ns = 0
        for t in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                with open(f"/proc/{self.proc.pid}/task/{t}/schedstat") as f:
                    ns += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
        return ns / 1e6
    def stall(self):
        """the loop's longest stall since the start: (ms, where)"""
        st, body = self.api.call("GET", "/v1/status")
        lp = json.loads(body).get("loop") if st == 200 else None
        return (lp["longest_stall_ms"], lp.get("longest_stall_in") or "-") if lp else (-1.0, "-")
    def restored_line(self):
        m = re.search(r"restored (\d+) endpoints in ([0-9.]+) ms \((\d+) removed[^)]*\)", open(self.log).read())
        return (int(m.group(1)), float(m.group(2)), int(m.group(3))) if m else (None, None, None)

def ip(*args):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        die(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout

def cmd_run(work, n, podns, prefix, node, refns, restarts, tc_sample, main_argv, ref_argv, base_argv):
    ps = pods(n, podns, prefix)
    out = lambda k, v: print(f"{k}={v}", flush=True)
    main = Agent("main", node, main_argv, f"{work}/main/fibril.sock", work)
    base = None
    if base_argv:
        base = Agent("base", node, base_argv[1:], f"{work}/main/fibril.sock", work, libdir=base_argv[0])
    ref = Agent("ref", refns, ref_argv, f"{work}/ref/fibril.sock", work)
    # a discarded start of each first: page cache and dynamic linker warm
    for a in (ref, main):
        a.start()
        a.kill9()
    out("ref_first_ms", "%.1f" % ref.start())
    out("ref_first_rss", "%d %d" % ref.mem())
    out("main_first_ms", "%.1f" % main.start())

    # ---- attach N pods as fibril-cni does ----
    enter_netns(node)
    ifindex = {p["host"]: socket.if_nametoindex(p["host"]) for p in ps}
    gw4 = None
    t0 = time.monotonic()
    t_ipam = 0.0
    for p in ps:
        owner = f"{p['cid']}/{p['ifname']}"
        t1 = time.monotonic()
        st, body = main.api.call("POST", f"/v1/ipam?family=both&owner={owner}")
        t_ipam += time.monotonic() - t1
        if st not in (200, 201):
            die(f"POST /v1/ipam owner {owner}: HTTP {st}: {body.decode()}")
        for a in json.loads(body)["addresses"]:
            p[a["family"]] = a["address"]
            if a["family"] == "ipv4":
                gw4 = a["gateway"]
        b = {"container-id": p["cid"], "ifname": p["ifname"], "netns": f"/run/netns/{p['ns']}",
             "host-ifname": p["host"], "host-ifindex": ifindex[p["host"]], "mac": p["mac"],
             "host-mac": p["host-mac"], "pod-namespace": p["pod-namespace"], "pod-name": p["pod-name"]}
        for fam in ("ipv4", "ipv6"):
            if fam in p:
                b[fam] = p[fam]
        st, body = main.api.call("PUT", f"/v1/endpoint/container-id:{p['cid']}:{p['ifname']}", b)
        if st != 201:
            die(f"PUT endpoint {p['i']} ({p['host']}): HTTP {st}: {body.decode()}")
    dt = time.monotonic() - t0
    out("puts_ms", "%.0f %.0f" % (dt * 1e3, t_ipam * 1e3))
    out("main_put_rss", "%d %d" % main.mem())
    out("ref_rss_now", "%d %d" % ref.mem())

    # ---- two pods in different netns get their address and routes (as fibril-cni) ----
    a, b = ps[0], ps[-1]
    for p in (a, b):
        ip("-n", p["ns"], "addr", "add", p["ipv4"] + "/32", "dev", p["ifname"])
        ip("-n", p["ns"], "route", "add", gw4, "dev", p["ifname"], "scope", "link")
        ip("-n", p["ns"], "route", "add", "default", "via", gw4, "dev", p["ifname"])
    before = json.loads(main.api.call("GET", "/v1/endpoint")[1])["endpoints"]
    if len(before) != n:
        die(f"GET /v1/endpoint lists {len(before)} endpoints after {n} PUTs")
    want = {(e["container-id"], e["ifname"]): e for e in before}
    for p in ps:
        e = want.get((p["cid"], p["ifname"]))
        if not e or e.get("ipv4") != p.get("ipv4") or e.get("ipv6") != p.get("ipv6") or \
           e["host-ifindex"] != ifindex[p["host"]] or e["state"] != "ready":
            die(f"endpoint of pod {p['i']} is not as PUT: {e}")
    idents = len({e["identity"] for e in before})

    def check(agent, when):
        st, body = agent.api.call("GET", "/v1/endpoint")
        after = json.loads(body)["endpoints"] if st == 200 else None
        if after != before:
            if not after or len(after) != len(before):
                die(f"{when}: GET /v1/endpoint: HTTP {st}, {len(after or [])} endpoints, expected {n}")
            for x, y in zip(before, after):
                if x != y:
                    die(f"{when}: endpoint changed:\n  before {json.dumps(x)}\n  after  {json.dumps(y)}")
        st, body = agent.api.call("GET", "/v1/datapath")
        dp = json.loads(body)
        prog = dp.get("program-id")
        eps = dp.get("endpoints", [])
        bad = [e for e in eps if e.get("attached-program") != prog or e.get("error")]
        if len(eps) != n or bad:
            die(f"{when}: /v1/datapath: {len(eps)} endpoints, {len(bad)} without program {prog}: {bad[:2]}")
        step = max(1, n // tc_sample)
        for p in ps[::step]:
            r = subprocess.run(["tc", "-n", node, "filter", "show", "dev", p["host"], "ingress"],
                               capture_output=True, text=True)
            if f" id {prog} " not in r.stdout + " " or "handle 0xf1b1" not in r.stdout:
                die(f"{when}: tc filter on {p['host']} is not program {prog}: {r.stdout.strip()} {r.stderr.strip()}")
        for src, dst in ((a, b), (b, a)):
            r = subprocess.run(["ip", "netns", "exec", src["ns"], "ping", "-c", "1", "-W", "2", "-I",
                                src["ipv4"], dst["ipv4"]], capture_output=True, text=True)
            if r.returncode != 0:
                die(f"{when}: ping {src['ipv4']} ({src['ns']}) -> {dst['ipv4']} ({dst['ns']}) fails: "
                    f"{r.stdout.strip()[-300:]}")
        return prog
    prog0 = check(main, "after the PUTs")
    out("identities", idents)

    # ---- restarts, the two agents interleaved ----
    progs = [prog0]
    hogs = []
    for _ in range(int(os.environ.get("HOG", "0") or 0)):
        hogs.append(subprocess.Popen(["sh", "-c", "while :; do :; done"]))
        with open(f"{work}/hog{len(hogs)}.pid", "w") as f:
            f.write(str(hogs[-1].pid))
    for r in range(restarts):
        ref.kill9()
        out("ref_restart", "%.1f %d %d" % ((ref.start(),) + ref.mem()))
        out("ref_ready", "%.1f" % ref.ready_ms)
        out("ref_cpu", "%.1f" % ref.ready_cpu_ms)
        if base:
            main.kill9()
            ms = base.start()
            bstall, _ = base.stall()
            rss, hwm = base.mem()
            cnt, rms, removed = base.restored_line()
            if cnt != n or removed != 0:
                die(f"base restart {r + 1}: the log says restored {cnt} endpoints ({removed} removed), expected {n}")
            check(base, f"base restart {r + 1}")
            out("base_restart", "%.1f %d %d %.1f" % (ms, rss, hwm, rms))
            out("base_ready", "%.1f" % base.ready_ms)
            out("base_cpu", "%.1f" % base.ready_cpu_ms)
            out("base_stall", "%.1f" % bstall)
            base.kill9()
        main.kill9()
        ms = main.start()
        stall, stall_in = main.stall()
        rss, hwm = main.mem()
        cnt, rms, removed = main.restored_line()
        if cnt != n or removed != 0:
            die(f"restart {r + 1}: the log says restored {cnt} endpoints ({removed} removed), expected {n}")
        progs.append(check(main, f"restart {r + 1}"))
        out("main_restart", "%.1f %d %d %.1f %.1f" % (ms, rss, hwm, rms, stall))
        out("main_ready", "%.1f" % main.ready_ms)
        out("main_cpu", "%.1f" % main.ready_cpu_ms)
        out("main_stall_in", "%.1f %s" % (stall, stall_in.replace(" ", "_")))
    for h in hogs:
        h.kill()
        h.wait()
    out("programs", " ".join(str(p) for p in progs))
    out("main_end_rss", "%d %d" % main.mem())
    ref.kill9()
    main.kill9()

if __name__ == "__main__":
    if sys.argv[1] == "plan":
        cmd_plan(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6])
    else:
        sep = sys.argv.index("--")
        sep2 = sys.argv.index("--", sep + 1)
        sep3 = sys.argv.index("--", sep2 + 1) if "--" in sys.argv[sep2 + 1:] else len(sys.argv)
        a = sys.argv[2:sep]
        cmd_run(a[0], int(a[1]), int(a[2]), a[3], a[4], a[5], int(a[6]), int(a[7]),
                sys.argv[sep + 1:sep2], sys.argv[sep2 + 1:sep3], sys.argv[sep3 + 1:])
EOF

# ---- veths: host side in the node, N/PODNS peers in each pod netns --------------------------
# The node's uplink first, with the node's address, as on a real node (it is
# also what the kernel's source-address choice for the endpoint routes finds:
# without it, each IPv4 route add walks every device; NODE_UPLINK=0 shows it).
if [ "${NODE_UPLINK:-1}" != 0 ]; then
	ip -n "$NODE" link add eth0 type veth peer name eth0-peer
	ip -n "$NODE" addr add 192.168.77.2/24 dev eth0
	ip -n "$NODE" link set eth0 up
	ip -n "$NODE" link set eth0-peer up
fi
python3 "$WORK/epbench.py" plan "$WORK" "$N" "$PODNS" "fbe-$$" "$NODE"
t0=$(date +%s%N)
ip -n "$NODE" -batch "$WORK/node.batch" || die "cannot create the veths"
for k in $(seq 0 $((PODNS - 1))); do ip -n "${PODS[$k]}" -batch "$WORK/p$k.batch" || die "cannot set up pod netns $k"; done
VETH_MS=$((($(date +%s%N) - t0) / 1000000))

# agent ARGS: NAME NODE-CIDR [BINARY MODULE-DIR]
agent_argv() {
	printf '%s\n' "${3:-$AGENT_BIN}" --set "agent.module-dir=${4:-$mods}" --set "agent.socket=$WORK/$1/fibril.sock" \
		--set "agent.state-dir=$WORK/$1/state" --set "agent.run-dir=$WORK/$1/run" \
		--set "agent.bpffs-dir=$BPFFS_DIR/$1" --set "ipam-cluster-pool.node-cidr=$2"
}
mapfile -t MAIN_ARGV < <(agent_argv main "10.96.0.0/16,fd00:96::/112")
mapfile -t REF_ARGV < <(agent_argv ref "10.97.0.0/16,fd00:97::/112")
BASE_ARGS=()
if [ -n "${BASE:-}" ]; then
	base_bin=""
	for f in "$BASE/.libs/lt-fibril-agent" "$BASE/.libs/fibril-agent" "$BASE/fibril-agent"; do
		if [ -f "$f" ] && [ "$(head -c 4 "$f" | tr -d '\177')" = ELF ]; then base_bin=$f; break; fi
	done
	[ -n "$base_bin" ] || die "no fibril-agent binary under BASE=$BASE"
	mkdir -p "$WORK/mods-base"
	chmod 0755 "$WORK/mods-base"
	for m in "${MODS[@]}"; do install -m 0644 "$BASE/.libs/$m.so" "$WORK/mods-base/"; done
	mapfile -t BASE_ARGV < <(agent_argv main "10.96.0.0/16,fd00:96::/112" "$base_bin" "$WORK/mods-base")
	BASE_ARGS=(-- "$BASE/.libs" "${BASE_ARGV[@]}")
fi

python3 "$WORK/epbench.py" run "$WORK" "$N" "$PODNS" "fbe-$$" "$NODE" "$REF" "$RESTARTS" "$TC_SAMPLE" \
	-- "${MAIN_ARGV[@]}" -- "${REF_ARGV[@]}" "${BASE_ARGS[@]}" >"$WORK/run.out" ||
	{ cat "$WORK/run.out"; die "the run failed (agent logs: $WORK/main-*.log)"; }

# ---- the table ---------------------------------------------------------------------------
val() { sed -n "s/^$1=//p" "$WORK/run.out"; }
# stats: "median max" of the numbers on stdin
stats() { sort -g | awk '{ v[NR] = $1 } END { printf "%s %s", v[int((NR + 1) / 2)], v[NR] }'; }
mb() { awk -v k="$1" 'BEGIN { printf "%.2f", k / 1024 }'; }
goal() { awk -v v="$1" -v l="$2" 'BEGIN { print ((v + 0 < l + 0) ? "met" : "NOT met") }'; }
read -r main_med main_max < <(val main_restart | awk '{ print $1 }' | stats; echo)
read -r ref_med ref_max < <(val ref_restart | awk '{ print $1 }' | stats; echo)
read -r rest_med rest_max < <(val main_restart | awk '{ print $4 }' | stats; echo)
read -r mready_med mready_max < <(val main_ready | stats; echo)
read -r rready_med rready_max < <(val ref_ready | stats; echo)
read -r mrss_med mrss_max < <(val main_restart | awk '{ print $2 }' | stats; echo)
read -r stall_med stall_max < <(val main_restart | awk '{ print $5 }' | stats; echo)
read -r mhwm_med _ < <(val main_restart | awk '{ print $3 }' | stats; echo)
read -r rrss_med _ < <(val ref_restart | awk '{ print $2 }' | stats; echo)
read -r rhwm_med _ < <(val ref_restart | awk '{ print $3 }' | stats; echo)
read -r put_ms ipam_ms <<<"$(val puts_ms)"
read -r put_rss put_hwm <<<"$(val main_put_rss)"
read -r rnow_rss rnow_hwm <<<"$(val ref_rss_now)"

echo "== agent with $N endpoints (ipam-cluster-pool, ipam-api, endpoint, datapath; $(nproc) cores, $(uname -r)," \
	"load $(cut -d' ' -f1 /proc/loadavg)) =="
echo "   setup: $N veth pairs (ip -batch, $PODNS pod netns) in $VETH_MS ms; $N x (POST /v1/ipam + PUT /v1/endpoint)" \
	"in $put_ms ms ($(awk -v t="$put_ms" -v n="$N" 'BEGIN { printf "%.2f", t / n }') ms/pod, of which IPAM $ipam_ms ms);" \
	"$(val identities) identities"
echo "   first start, empty state: $(val main_first_ms) ms (reference agent: $(val ref_first_ms) ms)"
printf '%-52s %14s %14s\n' "" "$N endpoints" "0 (reference)"
echo "1. restart-to-ready (kill -9, exec -> GET /v1/healthz 200), interleaved"
printf '%-52s %11s ms %11s ms\n' "   median of $RESTARTS" "$main_med" "$ref_med"
printf '%-52s %11s ms %11s ms\n' "   max of $RESTARTS" "$main_max" "$ref_max"
printf '%-52s %11s ms %11s ms\n' "   exec -> READY=1 on a fake NOTIFY_SOCKET (median)" "$mready_med" "$rready_med"
printf '%-52s %11s ms %11s ms\n' "   ... (max)" "$mready_max" "$rready_max"
read -r mcpu_med _ < <(val main_cpu | stats; echo)
read -r rcpu_med _ < <(val ref_cpu | stats; echo)
printf '%-52s %11s ms %11s ms\n' "   CPU time of the agent until ready (median)" "$mcpu_med" "$rcpu_med"
printf '%-52s %11s ms %14s\n' "   agent log 'restored N endpoints in X ms' (median)" "$rest_med" "-"
printf '%-52s %11s ms %14s\n' "   ... (max)" "$rest_max" "-"
printf '%-52s %11s MB %11s MB\n' "2. VmRSS after the PUTs (ref: same moment)" "$(mb "$put_rss")" "$(mb "$rnow_rss")"
printf '%-52s %11s MB %11s MB\n' "   VmHWM after the PUTs (ref: same moment)" "$(mb "$put_hwm")" "$(mb "$rnow_hwm")"
printf '%-52s %11s MB %11s MB\n' "   VmRSS right after a restart (median)" "$(mb "$mrss_med")" "$(mb "$rrss_med")"
printf '%-52s %11s MB %11s MB\n' "   VmHWM right after a restart (median)" "$(mb "$mhwm_med")" "$(mb "$rhwm_med")"
read -r end_rss end_hwm <<<"$(val main_end_rss)"
printf '%-52s %11s MB %14s\n' "   VmRSS / VmHWM after the checks (GETs)" "$(mb "$end_rss")/$(mb "$end_hwm")" ""
printf '%-52s %11s ms %14s\n' "3. longest loop stall in a restart (median)" "$stall_med" "-"
printf '%-52s %11s ms %14s\n' "   ... (max)" "$stall_max" "-"
echo "   ... where the longest was (ms in): $(val main_stall_in | sort -gr | head -n 1)"
if [ -n "${BASE:-}" ]; then
	read -r b_med b_max < <(val base_restart | awk '{ print $1 }' | stats; echo)
	read -r bst_med bst_max < <(val base_restart | awk '{ print $4 }' | stats; echo)
	read -r brss_med _ < <(val base_restart | awk '{ print $2 }' | stats; echo)
	read -r bready_med _ < <(val base_ready | stats; echo)
	echo "before: BASE=$BASE, same node, state and endpoints, interleaved (this build / base)"
	printf '%-52s %11s ms %11s ms\n' "   restart-to-ready, median" "$main_med" "$b_med"
	printf '%-52s %11s ms %11s ms\n' "   restart-to-ready, max" "$main_max" "$b_max"
	printf '%-52s %11s ms %11s ms\n' "   exec -> READY=1 (median)" "$mready_med" "$bready_med"
	read -r bcpu_med _ < <(val base_cpu | stats; echo)
	printf '%-52s %11s ms %11s ms\n' "   CPU time until ready (median)" "$mcpu_med" "$bcpu_med"
	printf '%-52s %11s ms %11s ms\n' "   longest stall (base: its restore, one run), median" "$stall_med" "$bst_med"
	printf '%-52s %11s ms %11s ms\n' "   ... max" "$stall_max" "$bst_max"
	printf '%-52s %11s MB %11s MB\n' "   VmRSS right after a restart (median)" "$(mb "$mrss_med")" "$(mb "$brss_med")"
	# a base with the stall measurement (/v1/status loop.longest_stall_ms)
	read -r bms_med bms_max < <(val base_stall | stats; echo)
	if [ -n "$bms_med" ] && [ "$bms_med" != -1.0 ]; then
		printf '%-52s %11s ms %11s ms\n' "   longest stall (both measured), median" "$stall_med" "$bms_med"
		printf '%-52s %11s ms %11s ms\n' "   ... max" "$stall_max" "$bms_max"
	fi
fi
echo "load: HOG=${HOG:-0} busy loop(s) during the restarts"
goal_ms=100; [ "$N" -gt 1000 ] && goal_ms=1000
echo "goal restart-to-ready < $goal_ms ms with $N endpoints: median $main_med ms, max $main_max ms: $(goal "$main_max" "$goal_ms")"
echo "goal longest loop stall < 50 ms: max $stall_max ms: $(goal "$stall_max" 50)"
echo "goal VmRSS < 16 MB with $N endpoints: max $(mb "$(printf '%s\n' "$put_rss" "$mrss_max" "$end_rss" | sort -g | tail -n 1)") MB:" \
	"$(goal "$(printf '%s\n' "$put_rss" "$mrss_max" "$end_rss" | sort -g | tail -n 1)" 16384)"
echo "checked after the PUTs and each restart: GET /v1/endpoint unchanged ($N endpoints), every endpoint's" \
	"veth on the new program (/v1/datapath; tc filter on $TC_SAMPLE veths; program ids $(val programs)), ping pod<->pod across netns"
