/* modules/hubble-lite/web/flows.js - the flows page's script (served at
 * /flows.js for flows.html): reads /v1/flows/stream (today's flat flow
 * JSON or Hubble's {"flow":{...}} lines), keeps the last flows, and draws
 * the table, the service map (flowmap.js) and the detail panel of a
 * clicked row; hides ARP / link-local / multicast noise unless asked,
 * groups the map by pod, workload or namespace, pauses, and says how far
 * behind the stream is and how many events were lost and why. */
"use strict";
(function () {
  const MAX_ROWS = 500, MAX_KEPT = 2000, BACKLOG = 200;
  const BEHIND_S = 3;          /* lag shown past this */
  const HISTORY_MS = 1500;     /* the backlog (last=200) is history, not lag */
  const $ = (id) => document.getElementById(id);
  const tbody = document.querySelector("#flows tbody");
  let ws = null, retry = null, generation = 0, openedAt = 0;
  let kept = [], pending = [], paused = false, seen = 0, hiddenCount = 0;
  let lost = new Map(), lagS = 0, lastMsgAt = 0, newest = 0, selected = null, drawPending = false;
  let peers = new Map(), pairs = new Map();

  /* ---- the flow, whichever JSON the agent speaks ---- */
  const EVENT_TYPES = { 1: "drop", 4: "trace", 5: "policy-verdict", 129: "l7", 9: "debug", 130: "agent" };
  function l4Of(l4) {
    if (!l4) return { proto: "" };
    if (l4.protocol != null)
      return { proto: String(l4.protocol).toUpperCase(), sport: l4.source_port, dport: l4.destination_port,
               flags: l4.flags || "" };
    for (const k of ["TCP", "UDP", "SCTP", "ICMPv4", "ICMPv6"]) {
      const v = l4[k];
      if (!v) continue;
      let flags = v.flags || "";
      if (typeof flags === "object") flags = Object.keys(flags).filter((f) => flags[f]).join(",");
      return { proto: k, sport: v.source_port, dport: v.destination_port, flags, icmp: v.type != null ?
               { type: v.type, code: v.code || 0 } : null };
    }
    return { proto: "" };
  }
  function policiesOf(f) {
    const out = [];
    if (f.policy) {
      const p = f.policy;
      let s = p.match + " (" + p.direction + ")";
      if (p.name) s += " by " + (p.kind || "policy") + " " + (p.namespace ? p.namespace + "/" : "") + p.name +
        (p.section ? " " + p.section + "[" + p.rule_index + "]" : "");
      if (p.rule_id) s += " (rule " + p.rule_id + ")";
      out.push(s);
    }
    for (const k of ["ingress_allowed_by", "egress_allowed_by", "ingress_denied_by", "egress_denied_by"])
      for (const p of f[k] || [])
        out.push(k.replace(/_/g, " ") + " " + (p.kind ? p.kind + " " : "") + (p.namespace ? p.namespace + "/" : "") +
                 (p.name || "?"));
    return out;
  }
  function normalize(m) {
    const f = m.flow || m;
    const time = String(f.time || m.time || "");
    const ms = Date.parse(time.replace(/(\.\d{3})\d+/, "$1"));
    let type = f.type || (f.event_type && EVENT_TYPES[f.event_type.type]) || f.Type || "";
    const ip = f.IP || {};
    return {
      raw: m, time, ms: isNaN(ms) ? 0 : ms, seq: f.seq != null ? f.seq : f.uuid || "",
      verdict: String(f.verdict || ""), type: String(type).toLowerCase(),
      direction: String(f.traffic_direction || "").toLowerCase().replace(/^traffic_direction_/, ""),
      reason: f.drop_reason_desc || f.trace_reason || "", observation: f.trace_observation_point || "",
      src: f.source || {}, dst: f.destination || {}, sip: ip.source || "", dip: ip.destination || "",
      ipv: ip.ipVersion || "", l4: l4Of(f.l4), ssvc: f.source_service, dsvc: f.destination_service,
      policies: policiesOf(f), node: m.node_name || f.node_name || "", summary: f.Summary || "",
      reply: f.is_reply,
    };
  }

  /* noise: no IP (ARP, L2), link-local, multicast, broadcast */
  function noiseIP(a) {
    if (!a) return true;
    const s = a.toLowerCase();
    if (s.includes(":")) return /^fe[89ab]/.test(s) || s.startsWith("ff");
    const o = s.split(".").map(Number);
    return (o[0] === 169 && o[1] === 254) || (o[0] >= 224 && o[0] <= 239) || s === "255.255.255.255";
  }
  const isNoise = (f) => noiseIP(f.sip) || noiseIP(f.dip);

  /* ---- text ---- */
  const pad = (n, w) => String(n).padStart(w || 2, "0");
  function zone() {
    const off = -new Date().getTimezoneOffset(), a = Math.abs(off);
    let name = "";
    try { name = Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (e) { /* no Intl */ }
    return { off: (off < 0 ? "-" : "+") + pad(Math.floor(a / 60)) + ":" + pad(a % 60), name };
  }
  function timeText(f) {
    if (!f.ms) return f.time;
    const d = new Date(f.ms), z = zone();
    const t = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + "." +
              pad(d.getMilliseconds(), 3) + " " + z.off;
    const today = new Date().toDateString() === d.toDateString();
    return today ? t : pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + t;
  }
  function fullTime(f) {
    if (!f.ms) return f.time;
    const d = new Date(f.ms), z = zone();
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + timeText(f).slice(-19) +
      (z.name ? " (" + z.name + ")" : "") + " \u00b7 " + f.time;
  }
  const svcName = (s) => s && s.name ? (s.namespace ? s.namespace + "/" : "") + s.name : "";
  function endText(p, ip, port) {
    const who = p.pod_name ? (p.namespace ? p.namespace + "/" : "") + p.pod_name : ip || "?";
    return who + (port != null ? ":" + port : "");
  }
  function summaryText(f) {
    if (f.summary) return f.summary;
    const l = f.l4;
    let s = l.proto || (f.sip ? "L3" : "ARP / L2");
    if (l.flags) s += " Flags: " + l.flags;
    if (l.icmp) s += " type " + l.icmp.type + " code " + l.icmp.code;
    if (f.reason && f.verdict === "DROPPED") s += ", reason: " + f.reason;
    if (f.dsvc) s += ", service: " + svcName(f.dsvc);
    else if (f.ssvc) s += ", from service: " + svcName(f.ssvc);
    if (f.policies.length) s += ", policy: " + f.policies[0];
    return s;
  }
  function text(s) { return document.createTextNode(s == null ? "" : String(s)); }

  /* ---- the table ---- */
  function rowOf(f, fresh) {
    const tr = document.createElement("tr");
    tr.className = "flow " + (fresh ? "fresh " : "") + f.verdict;
    tr.dataset.verdict = f.verdict;
    tr.dataset.type = f.type;
    tr.dataset.seq = f.seq;
    tr.dataset.noise = isNoise(f) ? "1" : "0";
    const cells = [timeText(f), endText(f.src, f.sip, f.l4.sport), endText(f.dst, f.dip, f.l4.dport),
                   f.type, f.direction, f.verdict, summaryText(f)];
    const cls = ["time", "source", "destination", "type", "direction", "verdict", "summary"];
    cells.forEach((c, i) => {
      const td = document.createElement("td");
      td.className = cls[i];
      td.appendChild(text(c));
      if (i < 3) td.title = i === 0 ? fullTime(f) : c;
      tr.appendChild(td);
    });
    tr.flow = f;
    if (selected === f) tr.classList.add("selected");
    return tr;
  }
  function shown(f) { return !($("hidenoise").checked && isNoise(f)); }
  function counts() {
    $("flowcount").textContent = seen + (seen > MAX_ROWS ? " (last " + MAX_ROWS + " kept)" : "");
    $("hidden").textContent = $("hidenoise").checked && hiddenCount ? hiddenCount + " noise flows hidden" : "";
  }
  function rebuildTable() {
    tbody.textContent = "";
    hiddenCount = 0;
    const frag = document.createDocumentFragment();
    let n = 0;
    for (let i = kept.length - 1; i >= 0 && n < MAX_ROWS; i--) {
      if (!shown(kept[i])) { hiddenCount++; continue; }
      frag.appendChild(rowOf(kept[i], false));
      n++;
    }
    tbody.appendChild(frag);
    counts();
  }

  /* ---- the map: peers and pairs at pod level, grouped when drawn ---- */
  function appLabel(p) {
    for (const l of p.labels || []) {
      const m = /^(?:[a-z0-9-]+:)?(?:app|app\.kubernetes\.io\/name|k8s-app)=(.*)$/.exec(l);
      if (m) return m[1];
    }
    return "";
  }
  function peerOf(p, ip, svc) {
    if (p.pod_name)
      return { id: "pod:" + (p.namespace || "") + "/" + p.pod_name, label: p.pod_name, ns: p.namespace || "",
               kind: "pod", app: appLabel(p) };
    if (svc && svc.name) return { id: "svc:" + svcName(svc), label: svc.name, ns: svc.namespace || "", kind: "service" };
    if (!ip) return { id: "l2", label: "no IP (ARP, L2)", ns: "", kind: "world", noise: true };
    return { id: "ip:" + ip, label: ip, ns: "", kind: "world", noise: noiseIP(ip) };
  }
  function addPair(f) {
    const s = peerOf(f.src, f.sip, f.ssvc), d = peerOf(f.dst, f.dip, f.dsvc);
    for (const n of [s, d]) if (!peers.has(n.id)) peers.set(n.id, n);
    const key = s.id + "\u2192" + d.id;
    let e = pairs.get(key);
    if (!e) { e = { src: s.id, dst: d.id, fwd: 0, drop: 0 }; pairs.set(key, e); }
    if (f.verdict === "DROPPED") e.drop++; else e.fwd++;
  }
  function groupOf(n, mode) {
    if (mode === "namespace") {
      if (n.kind === "world") return { id: "world", label: "world", ns: "", kind: "world", group: true };
      return { id: "ns:" + n.ns, label: n.ns || "(none)", ns: n.ns, kind: "pod", group: true };
    }
    if (mode === "workload" && n.kind === "pod" && n.app)
      return { id: "app:" + n.ns + "/" + n.app, label: "app=" + n.app, ns: n.ns, kind: "pod", group: true };
    return n;
  }
  function draw() {
    drawPending = false;
    const mode = $("group").value, hide = $("hidenoise").checked;
    const nodes = new Map(), edges = new Map(), members = new Map();
    for (const e of pairs.values()) {
      const a = peers.get(e.src), b = peers.get(e.dst);
      if (hide && (a.noise || b.noise)) continue;
      const ga = groupOf(a, mode), gb = groupOf(b, mode);
      for (const [g, n] of [[ga, a], [gb, b]]) {
        if (!nodes.has(g.id)) { nodes.set(g.id, Object.assign({}, g)); members.set(g.id, new Set()); }
        members.get(g.id).add(n.label);
      }
      const key = ga.id + "\u2192" + gb.id;
      const ge = edges.get(key) || { src: ga.id, dst: gb.id, fwd: 0, drop: 0 };
      ge.fwd += e.fwd; ge.drop += e.drop;
      edges.set(key, ge);
    }
    for (const [id, n] of nodes) {
      const m = members.get(id);
      if (n.group) {
        n.label += " (" + m.size + ")";
        n.title = id + ": " + [...m].sort().join(", ");
      }
    }
    const wrap = $("mapwrap");
    window.FibrilMap.draw($("map"), nodes, [...edges.values()], wrap.clientWidth || 800);
    $("edgecount").textContent = edges.size + (edges.size === 1 ? " edge" : " edges") + ", " + nodes.size +
      (nodes.size === 1 ? " node" : " nodes");
  }
  function redraw() { if (!drawPending) { drawPending = true; requestAnimationFrame(draw); } }

  /* ---- the detail panel ---- */
  function dl(parent, pairs_) {
    const d = document.createElement("dl");
    for (const [k, v] of pairs_) {
      if (v == null || v === "") continue;
      const dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.appendChild(text(k)); dd.appendChild(text(v));
      d.append(dt, dd);
    }
    parent.appendChild(d);
  }
  function h3(parent, s) { const h = document.createElement("h3"); h.appendChild(text(s)); parent.appendChild(h); }
  function endDetail(body, title, p, ip, port, svc) {
    h3(body, title);
    dl(body, [["pod", p.pod_name ? (p.namespace ? p.namespace + "/" : "") + p.pod_name : "(not a pod here)"],
              ["address", ip ? ip + (port != null ? " port " + port : "") : "none (ARP / L2)"],
              ["identity", p.identity], ["endpoint ID", p.ID], ["service", svcName(svc)]]);
    const ul = document.createElement("ul");
    ul.className = "labels";
    for (const l of p.labels || []) { const li = document.createElement("li"); li.appendChild(text(l)); ul.appendChild(li); }
    if (!ul.children.length) { const li = document.createElement("li"); li.appendChild(text("no labels")); ul.appendChild(li); }
    body.appendChild(ul);
  }
  function showDetail(f) {
    selected = f;
    for (const r of tbody.querySelectorAll("tr.selected")) r.classList.remove("selected");
    for (const r of tbody.rows) if (r.flow === f) r.classList.add("selected");
    const body = $("detailbody");
    body.textContent = "";
    $("detailseq").textContent = f.seq !== "" ? "#" + f.seq : "";
    dl(body, [["time", fullTime(f)], ["verdict", f.verdict], ["type", f.type], ["direction", f.direction],
              [f.verdict === "DROPPED" ? "drop reason" : "reason", f.reason],
              ["observed at", f.observation], ["summary", summaryText(f)], ["node", f.node]]);
    h3(body, "policy");
    const pol = document.createElement("ul");
    pol.className = "policy";
    for (const p of f.policies.length ? f.policies : ["no policy decided this flow"]) {
      const li = document.createElement("li"); li.appendChild(text(p)); pol.appendChild(li);
    }
    body.appendChild(pol);
    endDetail(body, "source", f.src, f.sip, f.l4.sport, f.ssvc);
    endDetail(body, "destination", f.dst, f.dip, f.l4.dport, f.dsvc);
    h3(body, "JSON");
    const pre = document.createElement("pre");
    pre.appendChild(text(JSON.stringify(f.raw, null, 1)));
    body.appendChild(pre);
    $("detail").hidden = false;
    $("lower").classList.add("withdetail");
  }
  function closeDetail() {
    selected = null;
    $("detail").hidden = true;
    $("lower").classList.remove("withdetail");
    for (const r of tbody.querySelectorAll("tr.selected")) r.classList.remove("selected");
  }

  /* ---- status: live, N s behind, paused, lost events ---- */
  function lostText() {
    const why = { SLOW_READER: "this page read too slowly", DATAPATH: "the datapath's queue was full" };
    const parts = [];
    for (const [src, n] of lost) parts.push(n + " " + (why[src] || src.toLowerCase().replace(/_/g, " ")));
    return parts.length ? "events lost: " + parts.join(", ") : "";
  }
  function status() {
    const s = $("status");
    let cls, msg;
    if (!ws || ws.readyState !== 1) { cls = "down"; msg = s.dataset.down || "connecting"; }
    else if (paused) { cls = "paused"; msg = "paused, " + pending.length + " new flows waiting"; }
    else if (lagS > BEHIND_S) { cls = "behind"; msg = "live, " + Math.round(lagS) + " s behind"; }
    else { cls = "live"; msg = "live"; }
    if (cls !== "down" && newest && Date.now() - lastMsgAt > 5000)
      msg += " (newest flow " + Math.round((Date.now() - newest) / 1000) + " s old, nothing since)";
    s.className = "status " + cls;
    s.textContent = msg;
    s.dataset.lag = Math.round(lagS);
  }

  function take(fs) {
    const hide = $("hidenoise").checked;
    const frag = document.createDocumentFragment();
    for (const f of fs) {
      kept.push(f);
      seen++;
      addPair(f);
      if (hide && isNoise(f)) { hiddenCount++; continue; }
      frag.insertBefore(rowOf(f, true), frag.firstChild);
    }
    if (kept.length > MAX_KEPT) kept = kept.slice(kept.length - MAX_KEPT);
    tbody.insertBefore(frag, tbody.firstChild);
    while (tbody.rows.length > MAX_ROWS) tbody.deleteRow(tbody.rows.length - 1);
    counts();
    redraw();
  }

  function onMessage(ev, gen) {
    if (gen !== generation) return;
    const now = Date.now(), batch = [];
    for (const line of String(ev.data).split("\n")) {
      if (!line) continue;
      let m;
      try { m = JSON.parse(line); } catch (e) { continue; }
      if (m.error) { $("error").textContent = "filter refused: " + m.error; continue; }
      if (m.lost_events) {
        const src = String(m.lost_events.source || "UNKNOWN");
        lost.set(src, (lost.get(src) || 0) + Number(m.lost_events.num_events_lost || 0));
        $("lost").textContent = lostText();
        continue;
      }
      if (!m.flow && !m.verdict && !m.time) continue;
      const f = normalize(m);
      if (f.node) $("node").textContent = "node " + f.node;
      batch.push(f);
    }
    if (!batch.length) return;
    lastMsgAt = now;
    let top = 0;
    for (const f of batch) top = Math.max(top, f.ms);
    newest = Math.max(newest, top);
    /* the lag: how old the newest flow of this message was when it came */
    if (now - openedAt > HISTORY_MS && top) lagS = Math.max(0, (now - top) / 1000);
    if (paused) pending.push(...batch);
    else take(batch);
    status();
  }

  function query() {
    const f = $("filters"), parts = [];
    for (const key of ["namespace", "pod", "verdict", "protocol", "port"]) {
      const v = f.elements[key].value.trim();
      if (v) parts.push(encodeURIComponent(key) + "=" + encodeURIComponent(v));
    }
    const more = f.elements.more.value.trim().replace(/^[?&]+/, "");
    for (const kv of more ? more.split("&") : []) {
      if (!kv) continue;
      const i = kv.indexOf("=");
      const k = i < 0 ? kv : kv.slice(0, i), v = i < 0 ? "" : kv.slice(i + 1);
      parts.push(encodeURIComponent(k) + "=" + encodeURIComponent(v));
    }
    return parts.join("&");
  }

  function connect() {
    clearTimeout(retry);
    const gen = ++generation;
    if (ws) { ws.onclose = null; ws.close(); }
    kept = []; pending = []; peers = new Map(); pairs = new Map(); seen = 0; hiddenCount = 0;
    lost = new Map(); lagS = 0; newest = 0; lastMsgAt = 0;
    closeDetail();
    rebuildTable();
    $("lost").textContent = ""; $("error").textContent = "";
    draw();
    const q = query();
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host +
                "/v1/flows/stream?last=" + BACKLOG + (q ? "&" + q : "");
    $("status").dataset.down = "connecting";
    ws = new WebSocket(url);
    ws.onopen = () => { if (gen === generation) { openedAt = Date.now(); status(); } };
    ws.onmessage = (ev) => onMessage(ev, gen);
    ws.onclose = () => {
      if (gen !== generation) return;
      $("status").dataset.down = $("error").textContent ? "refused" : "disconnected, retrying";
      status();
      if (!$("error").textContent) retry = setTimeout(connect, 2000);
    };
    status();
  }

  function setPaused(on) {
    paused = on;
    $("pause").textContent = on ? "Resume" : "Pause";
    $("pause").classList.toggle("on", on);
    if (!on && pending.length) { const p = pending; pending = []; take(p); }
    status();
  }

  const z = zone();
  $("timehead").textContent = "time (UTC" + z.off + ")";
  $("timehead").title = "times in this browser's zone: " + (z.name || "") + " UTC" + z.off;
  $("filters").addEventListener("submit", (e) => { e.preventDefault(); history.replaceState(null, "", "?" + query()); connect(); });
  $("clear").addEventListener("click", () => { $("filters").reset(); history.replaceState(null, "", location.pathname); connect(); });
  $("pause").addEventListener("click", () => setPaused(!paused));
  $("hidenoise").addEventListener("change", () => { rebuildTable(); redraw(); });
  $("group").addEventListener("change", redraw);
  $("closedetail").addEventListener("click", closeDetail);
  tbody.addEventListener("click", (e) => { const tr = e.target.closest("tr.flow"); if (tr && tr.flow) showDetail(tr.flow); });
  window.addEventListener("resize", redraw);
  setInterval(status, 1000);
  /* a filter in the page's own query (?namespace=team&...) fills the form */
  const known = ["namespace", "pod", "verdict", "protocol", "port"], more = [];
  for (const [k, v] of new URLSearchParams(location.search)) {
    if (known.includes(k)) $("filters").elements[k].value = v;
    else more.push(k + "=" + v);
  }
  $("filters").elements.more.value = more.join("&");
  connect();
})();
