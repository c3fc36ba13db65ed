#!/usr/bin/python3
"""tests/integration/flows_web.py - drives hubble-lite's web page in
Debian's headless Chromium (python3-selenium + chromium-driver), for
flows_web.sh. The window is 1400x900, then 1280x800 and 1920x1080 (the device metrics,
so the page gets exactly that viewport).

With the agent's real stream: the page goes live, READY tells the shell to
send traffic, the rows and the service map's edges come (b -> a with both
verdicts, a -> b forwarded), the type column holds the event type (trace,
drop) apart from the direction, times carry their zone.

Then a cluster's worth of flows is fed into the page's own stream handler
(the WebSocket's onmessage, reached through a wrapper installed before the
page's script: the page cannot tell them from the agent's) - four
namespaces, services, the world, reverse pairs, a self edge, long names,
one flow in Hubble's {"flow": ...} form, and ARP / IPv6 link-local /
multicast noise - and the drawn page is measured (flows_web_layout.js): no
map boxes overlap, no edge runs through a box it does not connect, no two
edges share a line, nothing is outside the window or its container, no
table cell is cut; at each size and in each grouping (pod, workload,
namespace). Then: the noise is hidden by default and shown by the toggle;
a clicked row opens the detail panel with labels, identity, the policy
rule and the reason; pause holds new flows back and resume shows them; a
30 s old flow makes the status say "30 s behind"; lost_events messages are
shown with their count and source. Last, the verdict filter through the
form and a bad filter's error. Any JavaScript error fails it. Screenshots
go to SHOTS_DIR. Prints one "PASS:/FAIL:" line per check.

  flows_web.py URL READY_FILE SHOTS_DIR USER_DATA_DIR
"""
import json
import os
import re
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

url, ready, shots, profile = sys.argv[1:5]
LAYOUT_JS = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "flows_web_layout.js")).read()
failed = 0

# installed before the page's script: keeps the page's WebSocket so the
# test can hand its onmessage a message as if the agent had sent it
WRAP_WS = """
(() => {
  const Real = window.WebSocket;
  function Wrapped(url, protocols) {
    const s = protocols === undefined ? new Real(url) : new Real(url, protocols);
    window.__fibrilSocket = s;
    return s;
  }
  Wrapped.prototype = Real.prototype;
  for (const k of ["CONNECTING", "OPEN", "CLOSING", "CLOSED"]) Wrapped[k] = Real[k];
  window.WebSocket = Wrapped;
  /* lines: objects; a flow without "time" gets now minus age seconds */
  window.__fibrilFeed = (lines, age) => {
    const t = new Date(Date.now() - (age || 0) * 1000).toISOString();
    const text = lines.map((m) => {
      if (m.flow && !m.flow.time) { m.flow.time = t; m.time = t; }
      else if (!m.flow && !m.lost_events && !m.time) m.time = t;
      return JSON.stringify(m);
    }).join("\\n");
    window.__fibrilSocket.onmessage(new MessageEvent("message", { data: text }));
  };
})();
"""


def check(what, ok, detail=""):
    global failed
    print(("PASS: " if ok else "FAIL: ") + what + ("" if ok or not detail else " (%s)" % (detail,)), flush=True)
    failed += not ok


def wait_for(cond, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            v = cond()
            if v:
                return v
        except Exception:  # the page is being redrawn
            pass
        time.sleep(0.2)  # sleep: the poll interval of a wait with a deadline
    return None


SEQ = [900000]


def peer(ns, pod, app, ident, ep=0):
    labels = ["k8s:app=" + app, "k8s:io.kubernetes.pod.namespace=" + ns] if app else ["reserved:world"]
    p = {"ID": ep, "identity": ident, "labels": labels}
    if pod:
        p.update(namespace=ns, pod_name=pod)
    return p


PODS = {  # name: (namespace, app, identity, IP)
    "web-1": ("shop", "web", 1101, "10.244.1.11"), "web-2": ("shop", "web", 1101, "10.244.1.12"),
    "api-1": ("shop", "api", 1102, "10.244.1.21"), "db-0": ("shop", "db", 1103, "10.244.1.31"),
    "cache-0": ("shop", "cache", 1104, "10.244.1.41"),
    "gateway-7f9c6d5b8-x2x9q-very-long-name": ("pay", "gw", 1201, "10.244.2.11"),
    "ledger": ("pay", "ledger", 1202, "10.244.2.21"),
    "prometheus-0": ("monitoring", "prometheus", 1301, "10.244.3.11"),
}


def flow(src, dst, verdict="FORWARDED", proto="TCP", dport=80, typ=None, **extra):
    """a flow in the agent's flat JSON; src/dst: a pod of PODS, ("team", pod, ip) or an IP"""
    SEQ[0] += 1

    def end(x):
        if x in PODS:
            ns, app, ident, ip = PODS[x]
            return peer(ns, x, app, ident), ip
        if isinstance(x, tuple):
            return peer(x[0], x[1], x[1], 0), x[2]
        return peer("", "", "", 2), x
    (s, sip), (d, dip) = end(src), end(dst)
    f = {"seq": SEQ[0], "verdict": verdict, "type": typ or ("drop" if verdict == "DROPPED" else "trace"),
         "traffic_direction": "ingress", "node_name": "node1", "source": s, "destination": d, "length": 60}
    if verdict == "DROPPED":
        f["drop_reason_desc"] = "policy-denied"
    else:
        f["trace_reason"] = "forwarded"
    if sip is not None:
        f["IP"] = {"source": sip, "destination": dip, "ipVersion": "IPv6" if ":" in sip else "IPv4"}
    if proto:
        f["l4"] = {"protocol": proto}
        if proto in ("TCP", "UDP"):
            f["l4"].update(source_port=40000 + SEQ[0] % 1000, destination_port=dport)
        if proto == "TCP":
            f["l4"]["flags"] = "SYN"
    f.update(extra)
    return f


def cluster_flows(team_a, team_b):
    a, b = ("team", "a", team_a), ("team", "b", team_b)
    fs = [flow("web-1", "api-1"), flow("web-2", "api-1"), flow("api-1", "db-0", dport=5432),
          flow("db-0", "web-1", dport=8080), flow("web-1", "db-0", dport=5432),  # a reverse pair
          flow("api-1", "cache-0", dport=6379), flow("cache-0", "api-1", dport=6379),
          flow("gateway-7f9c6d5b8-x2x9q-very-long-name", "api-1"),
          flow("prometheus-0", "web-1", dport=9090), flow("prometheus-0", "api-1", dport=9090),
          flow("prometheus-0", "db-0", dport=9090), flow("prometheus-0", "gateway-7f9c6d5b8-x2x9q-very-long-name", dport=9090),
          flow("prometheus-0", a, dport=9090), flow("web-1", "8.8.8.8", dport=53, proto="UDP"),
          flow("api-1", "1.1.1.1", dport=443), flow("203.0.113.7", "gateway-7f9c6d5b8-x2x9q-very-long-name", "DROPPED"),
          flow(a, "1.1.1.1", dport=443), flow("web-1", "web-1", dport=8080), flow(b, "web-2", "DROPPED"),
          flow("web-2", "10.96.0.10", dport=80, destination_service={"name": "api", "namespace": "shop"}),
          flow("api-1", "db-0", typ="policy-verdict", dport=5432,
               policy={"match": "allow", "direction": "ingress", "rule_id": 3}),
          flow("ledger", "db-0", "DROPPED", dport=5432, policy={
              "match": "deny", "direction": "ingress", "rule_id": 7, "name": "db-only-from-api-and-a-long-policy-name",
              "namespace": "shop", "kind": "CiliumNetworkPolicy", "source": "k8s", "section": "ingressDeny",
              "spec": 0, "rule_index": 0})]
    detail_seq = SEQ[0]
    noise = [flow(None, None, proto=None), flow("fe80::1", "ff02::2", proto="ICMPv6"),
             flow("169.254.1.1", "10.244.1.11", proto="UDP", dport=67), flow("fe80::2", "fe80::3", proto="ICMPv6")]
    for n in noise[:1]:
        n.pop("IP", None)
    hubble = {"flow": {"verdict": "FORWARDED", "Type": "L3_L4", "event_type": {"type": 4},
                       "traffic_direction": "EGRESS", "uuid": "hubble-form-1", "node_name": "node1",
                       "IP": {"source": "10.244.2.21", "destination": "10.244.1.31", "ipVersion": "IPv4"},
                       "l4": {"TCP": {"source_port": 41000, "destination_port": 5432, "flags": {"SYN": True}}},
                       "source": peer("pay", "ledger", "ledger", 1202), "destination": peer("shop", "db-0", "db", 1103),
                       "Summary": "TCP Flags: SYN"}, "node_name": "node1"}
    return fs, noise, hubble, detail_seq


opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync",
          "--disable-dev-shm-usage", "--window-size=1400,900", "--hide-scrollbars", "--user-data-dir=" + profile):
    opts.add_argument(a)
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
# the driver's session start may time out on a busy machine: one more try
for attempt in (1, 2):
    try:
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        break
    except Exception as e:  # selenium's WebDriverException, a timeout
        print("chromium did not start (attempt %d): %s" % (attempt, str(e).splitlines()[0]),
              file=sys.stderr, flush=True)
        if attempt == 2:
            raise
        time.sleep(2)  # sleep: a pause before the one retry of a start that timed out


def viewport(w, h):
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": w, "height": h, "deviceScaleFactor": 1, "mobile": False})
    driver.execute_async_script("const done = arguments[arguments.length - 1];"
                                "requestAnimationFrame(() => requestAnimationFrame(done));")


def js(script, *args):
    return driver.execute_script(script, *args)


def settle():
    """two frames: the map is drawn in the next animation frame"""
    driver.execute_async_script("const done = arguments[arguments.length - 1];"
                                "requestAnimationFrame(() => requestAnimationFrame(done));")


def layout_ok(what):
    settle()
    res = js(LAYOUT_JS)
    kinds = {}
    for p in res["problems"]:
        kind = ("boxes overlap" if p.startswith("boxes ") or " overlap" in p and p.startswith("namespace columns")
                else "edges through boxes" if "runs through" in p else "edges on one line" if "share a line" in p
                else "counts overlapping" if p.startswith("the count") else "text overflowing" if "overflows" in p
                else "table cut" if "cut" in p or "table" in p else "clipped / outside")
        kinds[kind] = kinds.get(kind, 0) + 1
    check("%s at %dx%d: %d boxes, %d edges, nothing overlaps, crosses, shares a line or is clipped" %
          (what, res["width"], res["height"], res["nodes"], res["edges"]), not res["problems"],
          ", ".join("%d %s" % (n, k) for k, n in sorted(kinds.items())) + "; e.g. " +
          "; ".join(res["problems"][:6]) + (" ..." if len(res["problems"]) > 6 else ""))
    for p in res["problems"]:
        print("# layout: " + p, file=sys.stderr, flush=True)
    return res


def part(what, fn):
    """one feature's checks: an element it lacks fails them, not the rest"""
    try:
        fn()
    except Exception as e:
        check("the checks of %s ran" % what, False, str(e).splitlines()[0] if str(e) else repr(e))


def shot(name):
    path = os.path.join(shots, name)
    driver.save_screenshot(path)
    print("screenshot: " + path, file=sys.stderr, flush=True)


try:
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WRAP_WS})
    viewport(1400, 900)
    # a busy machine may time the first load out: one more try
    for attempt in (1, 2):
        try:
            driver.get(url)
            break
        except Exception as e:
            print("loading %s failed (attempt %d): %s" % (url, attempt, str(e).splitlines()[0]),
                  file=sys.stderr, flush=True)
            if attempt == 2:
                raise
            time.sleep(2)  # sleep: a pause before the one retry of a load that timed out
    check("the page loads with its title", driver.title == "fibril flows", driver.title)
    live = wait_for(lambda: driver.find_element(By.ID, "status").text == "live")
    check("the page's stream is live", bool(live), driver.find_element(By.ID, "status").text)

    # read in one script each (the page redraws the map as flows come:
    # element handles would go stale between two calls)
    def rows(sel="#flows tbody tr"):
        return js("return [...document.querySelectorAll(arguments[0])].map(r => r.dataset.verdict)", sel)

    def cells():
        return js("return [...document.querySelectorAll('#flows tbody tr')].map(r => ({seq: r.dataset.seq, "
                  "verdict: r.dataset.verdict, noise: r.dataset.noise, "
                  "cells: [...r.cells].map(c => c.textContent)}))")

    def edges():
        return {(s, d): (v, int(n)) for s, d, v, n in js(
            "return [...document.querySelectorAll('#map path.edge')]"
            ".map(e => [e.dataset.src, e.dataset.dst, e.dataset.verdict, e.dataset.count])")}

    def node_ids():
        return js("return [...document.querySelectorAll('#map g.node')].map(n => n.dataset.id)")

    def status():
        return js("const s = document.getElementById('status'); return [s.className, s.textContent]")

    A, B = "pod:team/a", "pod:team/b"
    base = url.rsplit("/flows", 1)[0]
    held = json.load(urllib.request.urlopen(base + "/v1/flows?last=200", timeout=10))["flows"]
    def seen():
        return int(js("return document.getElementById('flowcount').textContent").split()[0])

    def hidden():
        t = js("const h = document.getElementById('hidden'); return h ? h.textContent : ''")
        return int(t.split()[0]) if t else 0
    # (the node's own IPv6 link-local chatter is among them: hidden noise)
    check("the page takes the %d flows the ring held (rows, and the noise counted as hidden)" % len(held),
          bool(wait_for(lambda: seen() >= len(held) and len(rows()) + hidden() >= len(held))),
          (len(rows()), hidden(), len(held)))
    settle()
    base_rows, base_edges = rows(), edges()
    base_ba = base_edges.get((B, A), ("", 0))[1]
    base_ab = base_edges.get((A, B), ("", 0))[1]
    base_dropped = base_rows.count("DROPPED")
    open(ready, "w").close()
    ok = wait_for(lambda: rows().count("FORWARDED") >= base_rows.count("FORWARDED") + 7 and
                  rows().count("DROPPED") >= base_dropped + 3)
    check("the rows appear (7 forwarded, 3 dropped)", bool(ok), rows())
    ok = wait_for(lambda: edges().get((B, A), ("", 0))[0] == "MIXED" and edges().get((A, B), ("", 0))[0] == "FORWARDED")
    check("the map has the edges b -> a (both verdicts) and a -> b (forwarded)", bool(ok), edges())
    ok = wait_for(lambda: edges().get((B, A), ("", 0))[1] == base_ba + 9 and edges()[(A, B)][1] == base_ab + 1)
    check("the edge b -> a counts 9 more flows (5 UDP and the RST forwarded, 3 UDP dropped), a -> b 1 (the SYN)",
          bool(ok), (base_ba, base_ab, edges()))
    nodes = node_ids()
    ns = js("return [...document.querySelectorAll('#map g.ns')].map(n => n.dataset.ns)")
    check("the map has the pods as nodes in their namespace", A in nodes and B in nodes and "team" in ns, (nodes, ns))
    real = cells()
    types = {c["cells"][3] for c in real}
    dirs = {c["cells"][4] for c in real}
    check("the type column holds the event type (trace, drop), the direction its own column",
          types <= {"trace", "drop", "policy-verdict"} and "drop" in types and "trace" in types and
          dirs <= {"ingress", "egress"} and all(c["cells"][3] == "drop" for c in real if c["verdict"] == "DROPPED"),
          (types, dirs))
    head = js("return document.querySelector('#flows th').textContent")
    zoned = [c["cells"][0] for c in real if not re.fullmatch(r"(\d\d-\d\d )?\d\d:\d\d:\d\d\.\d{3} [+-]\d\d:\d\d",
                                                             c["cells"][0])]
    check("every time carries its zone (+hh:mm; the header names the zone)", not zoned and "UTC" in head,
          (head, zoned[:3]))
    shot("1-all-flows.png")

    team_a = json.load(urllib.request.urlopen(base + "/v1/flows?last=1&from-pod=team/a", timeout=10))["flows"]
    ip_a = team_a[0]["IP"]["source"] if team_a else "10.244.12.2"
    ip_b = ip_a.rsplit(".", 1)[0] + ".3"
    fs, noise, hubble, detail_seq = cluster_flows(ip_a, ip_b)
    hidden_before = hidden()
    js("window.__fibrilFeed(arguments[0], 0)", fs + noise + [hubble])
    nodes = wait_for(lambda: "pod:shop/web-1" in node_ids() and node_ids())
    check("the fed flows are drawn (shop, pay, monitoring, world, a service)",
          bool(nodes) and {"pod:pay/ledger", "pod:monitoring/prometheus-0", "ip:8.8.8.8", "svc:shop/api"} <= set(nodes),
          nodes)
    layout_ok("the map (by pod)")
    shot("1400x900-map.png")

    def part_0():
        # the noise
        noise_rows = [c for c in cells() if c["noise"] == "1"]
        noise_nodes = [n for n in node_ids() if n == "l2" or n.startswith("ip:fe80") or n.startswith("ip:ff02") or
                       n.startswith("ip:169.254")]
        # (the node's own IPv6 chatter may add to the count meanwhile)
        check("ARP / link-local / multicast noise is hidden by default (rows, map) and counted",
              not noise_rows and not noise_nodes and hidden() >= hidden_before + 4,
              (noise_rows, noise_nodes, hidden_before, hidden()))
        driver.find_element(By.ID, "hidenoise").click()
        settle()
        noise_rows = [c for c in cells() if c["noise"] == "1"]
        noise_nodes = [n for n in node_ids() if n == "l2" or n.startswith("ip:fe80") or n.startswith("ip:ff02")]
        fed = {str(f["seq"]) for f in noise}
        check("the toggle shows the noise (the 4 fed among its rows, the ARP and link-local nodes)",
              fed <= {c["seq"] for c in noise_rows} and "l2" in noise_nodes and "ip:fe80::1" in noise_nodes,
              (len(noise_rows), noise_nodes))
        layout_ok("the map with the noise shown")
        driver.find_element(By.ID, "hidenoise").click()
        settle()
        check("hidden again", not [c for c in cells() if c["noise"] == "1"] and "l2" not in node_ids())

        hub = [c for c in cells() if c["seq"] == "hubble-form-1"]
        check("a flow in Hubble's form ({\"flow\":...}, nested l4, enums) is read: type trace, direction egress",
              len(hub) == 1 and hub[0]["cells"][3:6] == ["trace", "egress", "FORWARDED"] and
              hub[0]["cells"][2] == "shop/db-0:5432", hub)
        pv = [c for c in cells() if c["cells"][3] == "policy-verdict"]
        check("a policy verdict's type column says policy-verdict", len(pv) == 1, pv)

    part("the noise", part_0)

    def part_1():
        # grouping
        Select(driver.find_element(By.ID, "group")).select_by_value("workload")
        ok = wait_for(lambda: "app:shop/web" in node_ids())
        label = js("const n = document.querySelector('#map g.node[data-id=\"app:shop/web\"] text');"
                   "return n && n.textContent")
        check("grouped by workload: web-1 and web-2 are one node app=web (2)",
              bool(ok) and label == "app=web (2)" and "pod:shop/web-1" not in node_ids(), (node_ids(), label))
        layout_ok("the map by workload")
        Select(driver.find_element(By.ID, "group")).select_by_value("namespace")
        ok = wait_for(lambda: {"ns:shop", "ns:pay", "ns:team", "world"} <= set(node_ids()))
        check("grouped by namespace: one node per namespace and the world", bool(ok), node_ids())
        layout_ok("the map by namespace")
        Select(driver.find_element(By.ID, "group")).select_by_value("pod")
        settle()

    part("grouping", part_1)

    def part_2():
        # the detail panel
        driver.execute_script("document.querySelector('#flows tr[data-seq=\"%d\"]').scrollIntoView()" % detail_seq)
        driver.find_element(By.CSS_SELECTOR, '#flows tr[data-seq="%d"] td.summary' % detail_seq).click()
        panel = wait_for(lambda: js("const d = document.getElementById('detail');"
                                    "return !d.hidden && d.innerText"))
        want = ["policy-denied", "deny (ingress) by CiliumNetworkPolicy shop/db-only-from-api-and-a-long-policy-name "
                "ingressDeny[0] (rule 7)", "k8s:app=ledger", "k8s:app=db", "1202", "1103", "pay/ledger", "shop/db-0"]
        check("a clicked row opens the detail panel: reason, policy rule, labels and identities of both ends",
              bool(panel) and all(w in panel for w in want), [w for w in want if not panel or w not in panel])
        box = js("const b = document.getElementById('detail').getBoundingClientRect();"
                 "return [b.left, b.right, document.documentElement.clientWidth]")
        check("the detail panel is inside the window", box[0] >= 0 and box[1] <= box[2] + 0.5, box)
        layout_ok("the page with the detail panel open")
        shot("1400x900-detail.png")
        driver.find_element(By.ID, "closedetail").click()
        driver.execute_script("window.scrollTo(0, 0)")

    part("the detail panel", part_2)

    def part_3():
        # pause (the node's own chatter may come meanwhile: counted, not compared)
        held = [flow("web-1", "api-1"), flow("web-2", "api-1"), flow("api-1", "db-0")]
        seqs = {str(f["seq"]) for f in held}
        driver.find_element(By.ID, "pause").click()
        js("window.__fibrilFeed(arguments[0], 0)", held)
        settle()
        st = status()
        m = re.search(r"paused, (\d+) new flows waiting", st[1])
        shown = {c["seq"] for c in cells()}
        check("paused: new flows are held back and counted in the status",
              not seqs & shown and st[0] == "status paused" and m and int(m.group(1)) >= 3, st)
        driver.find_element(By.ID, "pause").click()
        settle()
        shown = {c["seq"] for c in cells()}
        check("resumed: the held flows are shown", seqs <= shown and status()[0] == "status live", status())

    part("pause", part_3)

    def part_4():
        # lag, and lost events
        time.sleep(1.6)  # sleep: the page counts lag only once its backlog (the first 1.5 s) is in
        st = js("window.__fibrilFeed(arguments[0], 30); const s = document.getElementById('status');"
                "return [s.className, s.textContent]", [flow("web-1", "api-1")])
        m = re.search(r"(\d+) s behind", st[1])
        check("a flow 30 s old makes the status say so (N s behind, not live)",
              st[0] == "status behind" and m and 28 <= int(m.group(1)) <= 40, st)
        shot("1400x900-behind.png")
        st = js("window.__fibrilFeed(arguments[0], 0); const s = document.getElementById('status');"
                "return [s.className, s.textContent]", [flow("web-1", "api-1")])
        check("a fresh flow makes it live again", st == ["status live", "live"], st)
        js("window.__fibrilFeed(arguments[0], 0)", [
            {"lost_events": {"source": "DATAPATH_RATE_LIMIT", "num_events_lost": 98748}},
            {"lost_events": {"source": "HUBBLE_RING_BUFFER", "num_events_lost": "12"}},
            {"lost_events": {"source": "DATAPATH_RATE_LIMIT", "num_events_lost": 2}}])
        lost = js("return document.getElementById('lost').textContent")
        check("lost_events messages are shown, summed by source", "98750 datapath rate limit" in lost and
              "12 hubble ring buffer" in lost, lost)

    part("lag and lost events", part_4)

    def part_5():  # and 1280x800, the narrowest promised
        viewport(1280, 800)
        layout_ok("the map (by pod)")
        shot("1280x800-map.png")
        viewport(1920, 1080)
        layout_ok("the map (by pod)")
        shot("1920x1080-map.png")
        Select(driver.find_element(By.ID, "group")).select_by_value("workload")
        layout_ok("the map by workload")
        shot("1920x1080-workload.png")
        Select(driver.find_element(By.ID, "group")).select_by_value("pod")
        viewport(1400, 900)

    part("1920x1080", part_5)

    Select(driver.find_element(By.NAME, "verdict")).select_by_visible_text("DROPPED")
    driver.find_element(By.ID, "apply").click()
    ok = wait_for(lambda: rows() and set(rows()) == {"DROPPED"} and len(rows()) == base_dropped + 3 and
                  all(v == "DROPPED" for v, n in edges().values()) and
                  edges().get((B, A), ("", 0))[1] >= 3)
    check("filter verdict=DROPPED: only the dropped rows and edges", bool(ok), (rows(), edges()))
    check("the filter is kept in the page's address", "verdict=DROPPED" in driver.current_url, driver.current_url)
    shot("2-dropped.png")

    # (the browser's own favicon.ico request is not the page's doing)
    errors = [l for l in driver.get_log("browser") if l.get("level") == "SEVERE" and
              "favicon.ico" not in l.get("message", "")]
    check("no JavaScript error in the console", not errors, errors)

    driver.find_element(By.NAME, "more").send_keys("port=http")
    driver.find_element(By.ID, "apply").click()
    err = wait_for(lambda: driver.find_element(By.ID, "error").text)
    check("a bad filter is shown, naming it", bool(err) and "port" in err, err)
    shot("3-bad-filter.png")
except Exception as e:
    check("the browser session ran without an error", False, str(e).splitlines()[0] if str(e) else repr(e))
    driver.save_screenshot(os.path.join(shots, "error.png"))
finally:
    driver.quit()
sys.exit(1 if failed else 0)
