#!/usr/bin/env bash
# tests/integration/crash_state.sh - the durability promise of group-committed
# state (<fibril/journal.h>) under crashes: ROUNDS times, an agent serving
# ipam-cluster-pool behind ipam-api, and the endpoint module, takes a burst
# of allocations and releases, and of endpoint PUTs and DELETEs (each
# endpoint on a veth of its own, in a node netns the agent runs in), on
# several keep-alive connections at once and is killed with SIGKILL at a
# random point - from outside after a random delay, or by itself through the
# test-only fault point FIBRIL_TEST_CRASH_POINT=journal-write:N (after the
# N-th batch of either journal is written, before its fdatasync). After
# each restart:
#   - every answered allocation is there, with its owner;
#   - every answered release is gone;
#   - no address is held by two owners, and none answered to two owners that
#     both still hold it (nothing handed out twice across the crashes);
#   - every answered endpoint PUT is there (same ID, container, address,
#     its address held in IPAM by it), every answered DELETE is gone, and no
#     two endpoints share an ID or an address. Each PUT follows an
#     allocation of its address asked as fibril-cni's ADD asks it
#     (durable=later: answered before its flush), so the PUT's answer is
#     what promises the address too.
# A write that was never answered may have happened or not; what it left
# behind is cleaned up as a runtime's CNI DEL would (DELETE the endpoint and
# the IPAM owner).
# CRASH_ROUNDS (default 200) changes the number of crashes.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "the agent only loads root-owned modules; run as root"
for so in ipam-cluster-pool ipam-api endpoint; do
	[ -f "$top_builddir/.libs/$so.so" ] || skip_or_fail "$so is not built"
done
command -v python3 >/dev/null || skip_or_fail "python3 is missing"
command -v ip >/dev/null && command -v nsenter >/dev/null || skip_or_fail "ip (iproute2) or nsenter (util-linux) is missing"

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for so in ipam-cluster-pool ipam-api endpoint; do install -m 0644 "$top_builddir/.libs/$so.so" "$mods/"; done

# the node the agent runs in, and one pod netns holding the peers of
# SLOTS veths (an endpoint each); removed on exit
NODE=fcrash-$$-node
POD=fcrash-$$-pod
SLOTS=12
crash_cleanup() {
	local rc=$?
	set +e
	ip netns del "$POD" 2>/dev/null
	ip netns del "$NODE" 2>/dev/null
	(exit "$rc")
	cleanup
}
trap crash_cleanup EXIT INT TERM
ip netns add "$NODE"
ip netns add "$POD"
ip -n "$NODE" link set lo up
for i in $(seq 0 $((SLOTS - 1))); do
	ip -n "$NODE" link add "lxcc$i" type veth peer name "eth$i" netns "$POD"
	ip -n "$NODE" link set "lxcc$i" up
done
# the real agent binary, not libtool's wrapper script (a shell per start)
export LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=""
for f in "$top_builddir/.libs/lt-fibril-agent" "$top_builddir/.libs/fibril-agent" "$top_builddir/fibril-agent"; do
	if [ -f "$f" ] && [ "$(head -c 4 "$f" | tr -d '\177')" = ELF ]; then bin=$f; break; fi
done
[ -n "$bin" ] || bin=$AGENT

rc=0
python3 - "$bin" "$mods" "$WORK" "${CRASH_ROUNDS:-200}" "$BPFFS_DIR" "$NODE" "$POD" "$SLOTS" >"$WORK/driver.out" 2>&1 <<'EOF' || rc=$?
import http.client, json, os, random, signal, socket, subprocess, sys, threading, time

agent, mods, work, rounds, bpffs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
node, pod, nslots = sys.argv[6], sys.argv[7], int(sys.argv[8])
sock = os.path.join(work, "fibril.sock")
state = os.path.join(work, "state")
rnd = random.Random(int(os.environ.get("CRASH_SEED", str(int(time.time())))))
print("seed", rnd.random())

class Conn(http.client.HTTPConnection):
    def __init__(self):
        super().__init__("x", timeout=5)
    def connect(self):
        for attempt in range(200):  # the socket file exists just before listen()
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            try:
                s.connect(sock)
                self.sock = s
                return
            except ConnectionRefusedError:
                s.close()
                if attempt == 199 or not os.path.exists(sock):
                    raise
                time.sleep(0.01)  # sleep: the poll interval of a wait with a deadline

def request(conn, method, path, body=None):
    if body is None:
        conn.request(method, path)
    else:
        conn.request(method, path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"{}")

def start(env_extra, may_crash=False):
    if os.path.exists(sock):
        os.unlink(sock)
    env = dict(os.environ, **env_extra)
    log = open(os.path.join(work, "agent.log"), "ab")
    p = subprocess.Popen(["nsenter", "--net=/run/netns/" + node, agent, "--set", "agent.module-dir=" + mods, "--set", "agent.socket=" + sock,
                          "--set", "agent.state-dir=" + state, "--set", "agent.run-dir=" + work + "/run",
                          "--set", "agent.bpffs-dir=" + bpffs, "--set", "agent.node-name=crash",
                          "--set", "agent.log-level=warn",
                          "--set", "ipam-cluster-pool.node-cidr=10.66.0.0/16"],
                         stdout=log, stderr=log, env=env)
    for _ in range(2000):  # 20 s: a loaded machine (CI) starts it slowly
        if os.path.exists(sock):
            return p
        if p.poll() is not None:
            break
        time.sleep(0.01)  # sleep: the poll interval of a wait with a deadline
    if may_crash and p.poll() == -signal.SIGKILL:
        return None  # the crash point hit a write of the start itself (restore, migration)
    log.close()
    tail = open(os.path.join(work, "agent.log"), "rb").read()[-1500:].decode(errors="replace")
    raise SystemExit("the agent did not start (exit %s); the end of agent.log:\n%s" % (p.poll(), tail))

held = {}      # address -> owner: answered allocations not answered released
problems = []
answered_allocs = answered_releases = crash_point_rounds = crashed_at_start = 0

def verify(rnum):
    c = Conn()
    st, body = request(c, "GET", "/v1/ipam")
    c.close()
    if st != 200:
        problems.append("round %d: GET /v1/ipam answered %d" % (rnum, st))
        return
    now = {}
    # a release sent but never answered may have happened or not
    for addr, owner in unanswered_release.items():
        if held.get(addr) == owner and now_has(body, addr, owner) is False:
            del held[addr]
    unanswered_release.clear()
    full = {}
    for a in body["allocations"]:
        if a["address"] in full:
            problems.append("round %d: %s listed twice" % (rnum, a["address"]))
        full[a["address"]] = a["owner"]
        if not a["address"].startswith("10.66.250."):  # the endpoints' (verify_endpoints)
            now[a["address"]] = a["owner"]
    for addr, owner in held.items():
        if now.get(addr) != owner:
            problems.append("round %d: answered allocation %s=%s lost after the crash (now %r)"
                            % (rnum, addr, owner, now.get(addr)))
    for addr, owner in released.items():
        if now.get(addr) == owner:
            problems.append("round %d: answered release of %s (%s) undone by the crash" % (rnum, addr, owner))
    # what was written but never answered may be there: adopt it as held
    # (its owner was never told, but the address must not go to another)
    for addr, owner in now.items():
        if addr not in held:
            held[addr] = owner
    verify_endpoints(rnum, full)

released = {}
unanswered_release = {}
lock = threading.Lock()

# ---- endpoints: slot k is veth lxcc<k> (peer eth<k> in the pod netns),
# address 10.66.250.<k+1>; a slot is ("present", cid, id), ("absent",) or
# ("unknown", cid) while a write is unanswered (or was cut by a crash)
def ifindex(name):
    out = subprocess.check_output(["ip", "-n", node, "-o", "link", "show", name], text=True)
    return int(out.split(":", 1)[0])
slot_ifindex = [ifindex("lxcc%d" % k) for k in range(nslots)]
slots = [("absent",)] * nslots
answered_puts = answered_deletes = 0

def slot_addr(k):
    return "10.66.250.%d" % (k + 1)

def ep_body(k, cid):
    return {"container-id": cid, "ifname": "eth0", "netns": "/run/netns/" + pod,
            "host-ifname": "lxcc%d" % k, "host-ifindex": slot_ifindex[k], "ipv4": slot_addr(k),
            "mac": "02:fe:00:00:00:%02x" % (k + 1), "host-mac": "02:fb:00:00:00:%02x" % (k + 1),
            "pod-namespace": "crash", "pod-name": "p%d" % k}

def verify_endpoints(rnum, ipam_now):
    c = Conn()
    st, body = request(c, "GET", "/v1/endpoint")
    if st != 200:
        problems.append("round %d: GET /v1/endpoint answered %d" % (rnum, st))
        c.close()
        return
    by_host = {}
    ids, addrs = set(), set()
    for e in body["endpoints"]:
        if e["id"] in ids:
            problems.append("round %d: endpoint ID %d listed twice" % (rnum, e["id"]))
        if e.get("ipv4") in addrs:
            problems.append("round %d: two endpoints hold %s" % (rnum, e.get("ipv4")))
        ids.add(e["id"])
        addrs.add(e.get("ipv4"))
        by_host[e["host-ifname"]] = e
        owner = e["container-id"] + "/" + e["ifname"]
        if ipam_now.get(e.get("ipv4")) != owner:
            problems.append("round %d: endpoint %d's address %s is held in IPAM by %r, not %s"
                            % (rnum, e["id"], e.get("ipv4"), ipam_now.get(e.get("ipv4")), owner))
    for k in range(nslots):
        e, s = by_host.get("lxcc%d" % k), slots[k]
        if s[0] == "present" and (not e or e["container-id"] != s[1] or e["id"] != s[2]
                                  or e.get("ipv4") != slot_addr(k)):
            problems.append("round %d: answered PUT of endpoint %d (%s) lost after the crash (now %r)"
                            % (rnum, s[2], s[1], e))
        if s[0] == "absent" and e:
            problems.append("round %d: answered DELETE of slot %d undone by the crash: %r" % (rnum, k, e))
        if s[0] == "unknown":
            if e:  # adopt what the crash left
                slots[k] = ("present", e["container-id"], e["id"])
            else:  # a runtime's CNI DEL of the cut ADD
                request(c, "DELETE", "/v1/endpoint/container-id:%s:eth0" % s[1])
                request(c, "DELETE", "/v1/ipam?owner=%s/eth0" % s[1])
                slots[k] = ("absent",)
    c.close()

def endpoint_burst(rnum, worker, nworkers, stop):
    global answered_puts, answered_deletes
    mine = [k for k in range(nslots) if k % nworkers == worker]
    try:
        c = Conn()
        i = 0
        while not stop.is_set():
            k = rnd.choice(mine)
            s = slots[k]
            if s[0] == "present":
                slots[k] = ("unknown", s[1])
                st, body = request(c, "DELETE", "/v1/endpoint/container-id:%s:eth0" % s[1])
                if st == 200:
                    slots[k] = ("absent",)
                    with lock:
                        answered_deletes += 1
                else:
                    problems.append("round %d: DELETE of endpoint %s answered %d %r" % (rnum, s[1], st, body))
                    return
            else:
                cid = "r%dw%dk%dn%d" % (rnum, worker, k, i)
                i += 1
                slots[k] = ("unknown", cid)
                # as fibril-cni's ADD: the address first, answered before
                # its flush (durable=later); the PUT's answer promises both
                st, body = request(c, "POST", "/v1/ipam/%s?owner=%s/eth0&durable=later" % (slot_addr(k), cid))
                if st != 201:
                    problems.append("round %d: POST durable=later of %s answered %d %r" % (rnum, cid, st, body))
                    return
                st, body = request(c, "PUT", "/v1/endpoint/container-id:%s:eth0" % cid, ep_body(k, cid))
                if st == 201:
                    slots[k] = ("present", cid, body["id"])
                    with lock:
                        answered_puts += 1
                else:
                    problems.append("round %d: PUT of endpoint %s answered %d %r" % (rnum, cid, st, body))
                    return
    except (OSError, http.client.HTTPException, ValueError):
        pass  # the agent died mid-request: that answer never came

def now_has(body, addr, owner):
    return any(a["address"] == addr and a["owner"] == owner for a in body["allocations"])

def burst(rnum, worker, stop):
    global answered_allocs, answered_releases
    try:
        c = Conn()
        i = 0
        mine = []
        while not stop.is_set():
            if mine and rnd.random() < 0.3:
                addr, owner = mine.pop(rnd.randrange(len(mine)))
                with lock:
                    unanswered_release[addr] = owner
                st, body = request(c, "DELETE", "/v1/ipam?owner=" + owner)
                if st == 200:
                    with lock:
                        del unanswered_release[addr]
                        if held.get(addr) == owner:
                            del held[addr]
                        released[addr] = owner
                        answered_releases += 1
                continue
            owner = "r%d-w%d-%d/eth0" % (rnum, worker, i)
            i += 1
            st, body = request(c, "POST", "/v1/ipam?family=ipv4&owner=" + owner)
            if st != 201:
                continue
            addr = body["addresses"][0]["address"]
            with lock:
                other = held.get(addr)
                if other is not None and other != owner:
                    problems.append("round %d: %s answered to %s while %s holds it" % (rnum, addr, owner, other))
                held[addr] = owner
                released.pop(addr, None)
                answered_allocs += 1
            mine.append((addr, owner))
    except (OSError, http.client.HTTPException, ValueError):
        pass  # the agent died mid-request: that answer never came

t0 = time.time()
for rnum in range(rounds):
    env = {}
    if rnum % 2:
        env["FIBRIL_TEST_CRASH_POINT"] = "journal-write:%d" % rnd.randint(1, 12)
        crash_point_rounds += 1
    p = start(env, may_crash=bool(env))
    if p is None:
        crashed_at_start += 1
        continue  # the next round's start verifies what this crash left
    try:
        verify(rnum)
    except (OSError, http.client.HTTPException):
        # the crash point hit a write the agent makes right after its start
        # (a restored endpoint's record): verify reads only, so the next
        # round's start verifies again
        if env and p.wait(timeout=10) == -signal.SIGKILL:
            crashed_at_start += 1
            continue
        raise
    # releases answered before this restart are final only if verified now
    released.clear()
    stop = threading.Event()
    threads = [threading.Thread(target=burst, args=(rnum, w, stop)) for w in range(3)]
    threads += [threading.Thread(target=endpoint_burst, args=(rnum, w, 2, stop)) for w in range(2)]
    for t in threads:
        t.start()
    try:
        p.wait(timeout=rnd.uniform(0.01, 0.25))
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
        p.wait()
    stop.set()
    for t in threads:
        t.join()
    if p.returncode != -signal.SIGKILL:
        problems.append("round %d: the agent exited %s, not killed" % (rnum, p.returncode))
p = start({})
verify(rounds)
p.send_signal(signal.SIGTERM)
p.wait()
print("rounds %d (%d by the journal-write crash point, %d of them during the start), "
      "answered allocations %d, releases %d, "
      "held at the end %d, endpoint PUTs %d, DELETEs %d, %.1f s"
      % (rounds, crash_point_rounds, crashed_at_start, answered_allocs, answered_releases, len(held),
         answered_puts, answered_deletes, time.time() - t0))
for pr in problems[:20]:
    print("PROBLEM:", pr)
sys.exit(1 if problems else 0)
EOF
cat "$WORK/driver.out"
check "${CRASH_ROUNDS:-200} crashes: every answered write survived, nothing was handed out twice" test "$rc" = 0
check "the crashes happened under load (answers were given)" \
	grep -qE 'answered allocations [1-9][0-9]*, releases [1-9]' "$WORK/driver.out"
check "... endpoint writes too (PUTs and DELETEs were answered)" \
	grep -qE 'endpoint PUTs [1-9][0-9]*, DELETEs [1-9]' "$WORK/driver.out"
finish
