# tests/bench/bench_policy.py - driver of tests/bench/bench_policy.sh (run
# inside the node netns, where the agent runs): attaches N endpoints through
# the endpoint API (veth host sides made by the shell), labels each
# app=web-I (N identities), loads N CiliumNetworkPolicies (policy I:
# endpointSelector app=web-I, ingress from app=web-(I+1) on one TCP port)
# and measures, each beside its reference from the same run:
#   change_ms   PUT of one changed policy -> reply (the reply comes once
#               the state file is written and fsynced and the map written),
#               p50/p99 over CHANGES changes, and the module's own part (the
#               update that writes the map: stats.last_update_us, every 4th
#               change); reference: the same change on the same agent before
#               anything is loaded
#   import_ms   the N policies in one import over the N endpoints (every
#               endpoint resolved, every entry written); reference: the same
#               import with no endpoint
#   restart     kill -9 and start again: the agent's own full computation
#               (stats.last_update_us at start); reference: no policy
#   rss         VmRSS/VmHWM with all of it; reference: right after start
#   rr          TCP request/response rate between endpoints 0 and 1 (pods
#               in their own netns) with every policy in force vs none, in
#               rounds (with, without, back to back), and the programs'
#               ns/packet from bpf_stats; rr_round lines per round, rr_ratio
#               the median of the rounds' ratios and its spread
# and checks on the way that one change re-resolves exactly one endpoint
# and writes the map (stats). Prints key=value lines.
import json, os, signal, socket, subprocess, sys, time

def die(msg):
    print(f"bench_policy: {msg}", file=sys.stderr)
    sys.exit(1)

class Api:
    """HTTP/1.1 on the agent's unix socket, one connection kept open."""
    def __init__(self, path):
        self.path, self.sock, self.buf = path, None, b""
    def close(self):
        if self.sock:
            self.sock.close()
        self.sock, self.buf = None, b""
    def call(self, method, path, body=None):
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data
        if not self.sock:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(60)
            self.sock.connect(self.path)
        self.sock.sendall(req)
        while b"\r\n\r\n" not in self.buf:
            c = self.sock.recv(262144)
            if not c:
                raise ConnectionError("closed")
            self.buf += c
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        hdrs = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
        n = int(hdrs.get("content-length", "0"))
        while len(rest) < n:
            c = self.sock.recv(262144)
            if not c:
                raise ConnectionError("closed")
            rest += c
        self.buf = rest[n:]
        if hdrs.get("connection", "").lower() == "close":
            self.close()
        return int(lines[0].split()[1]), rest[:n]

class Agent:
    def __init__(self, argv, sock, log):
        self.argv, self.sock, self.log, self.proc = argv, sock, log, None
        self.api = Api(sock)
    def start(self):
        self.api.close()
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=open(self.log, "a"),
                                     stderr=subprocess.STDOUT)
        with open(os.path.dirname(self.log) + "/policy-agent.pid", "w") as f:
            f.write(str(self.proc.pid))
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:
            if self.proc.poll() is not None:
                die("the agent exited before ready: " + open(self.log).read()[-2000:])
            try:
                if self.api.call("GET", "/v1/healthz")[0] == 200:
                    return
            except OSError:
                self.api.close()
            time.sleep(0.01)  # sleep: the poll interval of a wait with a deadline
        die("the agent is not ready after 60 s")
    def kill9(self):
        self.api.close()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
    def mem(self):
        out = {}
        for line in open(f"/proc/{self.proc.pid}/status"):
            k, _, v = line.partition(":")
            out[k] = v.split()[0] if v.split() else ""
        return int(out["VmRSS"]), int(out["VmHWM"])
    def stats(self):
        st, body = self.api.call("GET", "/v1/policy")
        if st != 200:
            die(f"GET /v1/policy: HTTP {st}")
        return json.loads(body)["stats"]

def cnp(i, n, port):
    return {"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
            "metadata": {"name": f"p{i}", "namespace": "bench"},
            "spec": {"endpointSelector": {"matchLabels": {"app": f"web-{i}"}},
                     "ingress": [{"fromEndpoints": [{"matchLabels": {"app": f"web-{(i + 1) % n}"}}],
                                  "toPorts": [{"ports": [{"port": str(port), "protocol": "TCP"}]}]}]}}

GATEWAY = [None]  # the pods' gateway, as IPAM gives it

def prog_stats(prog_ids):
    """(run_cnt, run_time_ns) summed over the programs (bpf_stats)."""
    cnt = ns = 0
    for pid in prog_ids:
        j = json.loads(subprocess.run(["bpftool", "-j", "prog", "show", "id", str(pid)],
                                      capture_output=True, text=True, check=True).stdout)
        cnt += j.get("run_cnt", 0)
        ns += j.get("run_time_ns", 0)
    return cnt, ns

def rr_bench(agent, allpol):
    """TCP request/response rate pod a -> pod b with every policy in force
    (b selected: allowed from a on the server's port) and with none, in
    RR_REPEAT rounds (each: with, then without, back to back); each round's
    rates, ratio and the programs' ns/packet from bpf_stats."""
    rr, (pa, pb) = os.environ["RR"], os.environ["PODS"].split()
    secs, repeat = os.environ.get("RR_SECS", "3"), int(os.environ.get("RR_REPEAT", "3"))
    addr = {}
    for i, ns in ((0, pa), (1, pb)):
        e = json.loads(agent.api.call("GET", f"/v1/endpoint/container-id:bench{i}:eth0")[1])
        addr[ns] = e["ipv4"]
    for ns in (pa, pb):
        subprocess.run(["ip", "-n", ns, "addr", "add", addr[ns] + "/32", "dev", "eth0"], check=True)
    gw = GATEWAY[0]
    for ns in (pa, pb):
        subprocess.run(["ip", "-n", ns, "route", "add", gw, "dev", "eth0", "scope", "link"], check=True)
        subprocess.run(["ip", "-n", ns, "route", "add", "default", "via", gw, "dev", "eth0"], check=True)
    portfile = f"{agent.sock}.rrport"
    srv = subprocess.Popen(["ip", "netns", "exec", pb, rr, "server", portfile])
    try:
        for _ in range(100):
            if os.path.exists(portfile) and open(portfile).read().strip():
                break
            time.sleep(0.05)  # sleep: the poll interval of a wait with a deadline
        port = int(open(portfile).read())
        allow = {"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
                 "metadata": {"name": "rr", "namespace": "bench"},
                 "spec": {"endpointSelector": {"matchLabels": {"app": "web-1"}},
                          "ingress": [{"fromEndpoints": [{"matchLabels": {"app": "web-0"}}],
                                       "toPorts": [{"ports": [{"port": str(port), "protocol": "TCP"}]}]}]}}
        dp = json.loads(agent.api.call("GET", "/v1/datapath")[1])
        progs = [p for p in (dp.get("program-id"), dp.get("program-id-egress")) if p]
        with open("/proc/sys/kernel/bpf_stats_enabled", "w") as f:
            f.write("1")
        res = {True: [], False: []}
        nsp = {True: [0, 0], False: [0, 0]}
        ratios = []
        for r in range(repeat):
            # one round: with the policies, then without, back to back
            rate, per_round = {}, {}
            for with_pol in (True, False):
                agent.api.call("DELETE", "/v1/policy")
                if with_pol:
                    put_ok(agent, allpol)
                    put_ok(agent, allow)
                c0, t0 = prog_stats(progs)
                out = subprocess.run(["ip", "netns", "exec", pa, rr, "client", addr[pb], str(port), secs],
                                     capture_output=True, text=True)
                c1, t1 = prog_stats(progs)
                m = dict(kv.split("=") for kv in out.stdout.split())
                if float(m.get("transactions", 0)) <= 0:
                    die(f"request/response pod a -> b ({'with' if with_pol else 'without'} policies): {out.stdout} {out.stderr}")
                rate[with_pol] = float(m["rate"])
                res[with_pol].append(rate[with_pol])
                nsp[with_pol][0] += c1 - c0
                nsp[with_pol][1] += t1 - t0
                per_round[with_pol] = (t1 - t0) / (c1 - c0) if c1 > c0 else 0
            ratios.append(rate[True] / rate[False])
            print("rr_round=%d %.0f %.0f %.3f %.1f %.1f %.2f" % (r + 1, rate[True], rate[False], ratios[-1],
                                                               per_round[True], per_round[False],
                                                               os.getloadavg()[0]), flush=True)
        med = lambda v: sorted(v)[len(v) // 2]
        per = lambda k: nsp[k][1] / nsp[k][0] if nsp[k][0] else 0
        print("rr=%.0f %.0f %.1f %.1f" % (med(res[True]), med(res[False]), per(True), per(False)), flush=True)
        print("rr_ratio=%.3f %.3f %.3f" % (med(ratios), min(ratios), max(ratios)), flush=True)
        agent.api.call("DELETE", "/v1/policy")
        put_ok(agent, allpol)
    finally:
        srv.kill()
        srv.wait()

def put_ok(agent, body):
    st, b = agent.api.call("PUT", "/v1/policy", body)
    if st != 200:
        die(f"PUT /v1/policy: HTTP {st}: {b[:300]}")

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]

def main():
    work, n, changes, netns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    argv = sys.argv[5:]
    out = lambda k, v: print(f"{k}={v}", flush=True)
    agent = Agent(argv, f"{work}/run/fibril.sock", f"{work}/policy-agent.log")
    agent.start()
    out("rss_ref", "%d %d" % agent.mem())

    def put(body, want=200):
        t0 = time.monotonic()
        st, b = agent.api.call("PUT", "/v1/policy", body)
        dt = (time.monotonic() - t0) * 1e3
        if st != want:
            die(f"PUT /v1/policy: HTTP {st}: {b[:300]}")
        return dt

    def changes_of(k, target):
        """k changes of policy `target` (its port alternates): ms each; and
        checks that the k changes resolved k endpoints and wrote the map."""
        times = []
        before = agent.stats()
        for c in range(k):
            times.append(put(cnp(target, n, 8000 + c % 2)))
            if c % 4 == 3:  # the module's own time from the change to the map written
                module_us.append(agent.stats()["last_update_us"] / 1e3)
        after = agent.stats()
        if eps and (after["endpoint_resolutions"] - before["endpoint_resolutions"] != k or
                    after["map_writes"] - before["map_writes"] < k or
                    after["recomputes"] != before["recomputes"]):
            die(f"{k} changes: resolutions {before['endpoint_resolutions']} -> "
                f"{after['endpoint_resolutions']}, map writes {before['map_writes']} -> {after['map_writes']}, "
                f"full recomputes {before['recomputes']} -> {after['recomputes']}")
        return times

    eps = []
    module_us = []
    ref = changes_of(changes, 0)
    out("change_ref_ms", "%.2f %.2f %.3f %.3f" % (pct(ref, 50), pct(ref, 99), pct(module_us, 50), pct(module_us, 99)))
    module_us.clear()
    agent.api.call("DELETE", "/v1/policy")
    # the import with no endpoint (reference)
    allpol = json.dumps({"items": [cnp(i, n, 80 + i % 100) for i in range(n)]}).encode()
    out("import_ref_ms", "%.1f %d" % (put(allpol), agent.stats()["last_update_us"]))
    agent.api.call("DELETE", "/v1/policy")

    # ---- N endpoints ----
    t0 = time.monotonic()
    for i in range(n):
        host = f"fbp{i}"
        owner = f"bench{i}/eth0"
        st, body = agent.api.call("POST", f"/v1/ipam?family=ipv4&owner={owner}")
        if st not in (200, 201):
            die(f"POST /v1/ipam {owner}: HTTP {st}: {body[:200]}")
        addr = json.loads(body)["addresses"][0]["address"]
        GATEWAY[:] = [json.loads(body)["addresses"][0]["gateway"]]
        pod_ns = os.environ["PODS"].split()[i] if i < 2 else netns
        b = {"container-id": f"bench{i}", "ifname": "eth0", "netns": f"/run/netns/{pod_ns}",
             "host-ifname": host, "host-ifindex": socket.if_nametoindex(host),
             "mac": "02:fe:00:00:%02x:%02x" % (i >> 8, i & 255),
             "host-mac": "02:fb:00:00:%02x:%02x" % (i >> 8, i & 255), "ipv4": addr,
             "pod-namespace": "bench", "pod-name": f"web-{i}", "labels": [f"k8s:app=web-{i}"]}
        st, body = agent.api.call("PUT", f"/v1/endpoint/container-id:bench{i}:eth0", b)
        if st != 201:
            die(f"PUT endpoint {i}: HTTP {st}: {body[:300]}")
        eps.append(i)
    out("endpoints_s", "%.1f" % (time.monotonic() - t0))

    # ---- N policies at once over N endpoints ----
    ms = put(allpol)
    s = agent.stats()
    out("import_ms", "%.1f %d %d %d" % (ms, s["last_update_us"], s["last_update_endpoints"], s["map_writes"]))
    st, body = agent.api.call("GET", "/v1/policy")
    j = json.loads(body)
    enforced = sum(1 for e in j["endpoints"] if e["ingress"] == "enforced" and e["entries"] >= 1)
    if enforced != n:
        die(f"{enforced} of {n} endpoints enforce ingress with an entry after the import")
    out("rss", "%d %d" % agent.mem())

    # ---- one policy changed at a time ----
    times = changes_of(changes, n // 2)
    out("change_ms", "%.2f %.2f %.2f %.3f %.3f" % (pct(times, 50), pct(times, 99), max(times),
                                                   pct(module_us, 50), pct(module_us, 99)))
    out("rss_after", "%d %d" % agent.mem())

    # ---- per packet: request/response between pods a and b (endpoints 0, 1) ----
    rr_bench(agent, allpol)

    # ---- restart: the full computation at start ----
    agent.kill9()
    agent.start()
    s = agent.stats()
    out("restart", "%d %d" % (s["last_update_us"], s["last_update_endpoints"]))
    out("rss_restart", "%d %d" % agent.mem())
    agent.kill9()

main()
