#!/usr/bin/env bash
# tests/integration/crash_state.sh - the durability promise of group-committed
# state (<fibril/journal.h>) under crashes: ROUNDS times, an agent serving
# ipam-cluster-pool behind ipam-api takes a burst of allocations and releases
# on several keep-alive connections at once and is killed with SIGKILL at a
# random point - from outside after a random delay, or by itself through the
# test-only fault point FIBRIL_TEST_CRASH_POINT=journal-write:N (after the
# N-th batch is written, before its fdatasync). After each restart:
#   - every answered allocation is there, with its owner;
#   - every answered release is gone;
#   - no address is held by two owners, and none answered to two owners that
#     both still hold it (nothing handed out twice across the crashes).
# CRASH_ROUNDS (default 200) changes the number of crashes.
. "$top_srcdir/tests/lib/common.sh"

[ "$(id -u)" = 0 ] || skip_or_fail "the agent only loads root-owned modules; run as root"
for so in ipam-cluster-pool ipam-api; do
	[ -f "$top_builddir/.libs/$so.so" ] || skip_or_fail "$so is not built"
done
command -v python3 >/dev/null || skip_or_fail "python3 is missing"

mods=$WORK/mods
mkdir -p "$mods"
chmod 0755 "$mods"
for so in ipam-cluster-pool ipam-api; do install -m 0644 "$top_builddir/.libs/$so.so" "$mods/"; done
# the real agent binary, not libtool's wrapper script (a shell per start)
export LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=""
for f in "$top_builddir/.libs/lt-fibril-agent" "$top_builddir/.libs/fibril-agent" "$top_builddir/fibril-agent"; do
	if [ -f "$f" ] && [ "$(head -c 4 "$f" | tr -d '\177')" = ELF ]; then bin=$f; break; fi
done
[ -n "$bin" ] || bin=$AGENT

rc=0
python3 - "$bin" "$mods" "$WORK" "${CRASH_ROUNDS:-200}" "$BPFFS_DIR" >"$WORK/driver.out" 2>&1 <<'EOF' || rc=$?
import http.client, json, os, random, signal, socket, subprocess, sys, threading, time

agent, mods, work, rounds, bpffs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
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
                time.sleep(0.01)

def request(conn, method, path):
    conn.request(method, path)
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"{}")

def start(env_extra):
    if os.path.exists(sock):
        os.unlink(sock)
    env = dict(os.environ, **env_extra)
    log = open(os.path.join(work, "agent.log"), "ab")
    p = subprocess.Popen([agent, "--set", "agent.module-dir=" + mods, "--set", "agent.socket=" + sock,
                          "--set", "agent.state-dir=" + state, "--set", "agent.run-dir=" + work + "/run",
                          "--set", "agent.bpffs-dir=" + bpffs, "--set", "agent.node-name=crash",
                          "--set", "agent.log-level=warn",
                          "--set", "ipam-cluster-pool.node-cidr=10.66.0.0/16"],
                         stdout=log, stderr=log, env=env)
    for _ in range(400):
        if os.path.exists(sock):
            return p
        if p.poll() is not None:
            break
        time.sleep(0.01)
    raise SystemExit("the agent did not start (see agent.log)")

held = {}      # address -> owner: answered allocations not answered released
problems = []
answered_allocs = answered_releases = crash_point_rounds = 0

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
    for a in body["allocations"]:
        if a["address"] in now:
            problems.append("round %d: %s listed twice" % (rnum, a["address"]))
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

released = {}
unanswered_release = {}
lock = threading.Lock()

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
    p = start(env)
    verify(rnum)
    # releases answered before this restart are final only if verified now
    released.clear()
    stop = threading.Event()
    threads = [threading.Thread(target=burst, args=(rnum, w, stop)) for w in range(4)]
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
print("rounds %d (%d by the journal-write crash point), answered allocations %d, releases %d, "
      "held at the end %d, %.1f s" % (rounds, crash_point_rounds, answered_allocs, answered_releases,
                                     len(held), time.time() - t0))
for pr in problems[:20]:
    print("PROBLEM:", pr)
sys.exit(1 if problems else 0)
EOF
cat "$WORK/driver.out"
check "${CRASH_ROUNDS:-200} crashes: every answered write survived, nothing was handed out twice" test "$rc" = 0
check "the crashes happened under load (answers were given)" \
	grep -qE 'answered allocations [1-9][0-9]*, releases [1-9]' "$WORK/driver.out"
finish
