/* modules/hubble-lite/web/flowmap.js - the flows page's service map
 * (served at /flowmap.js, used by flows.js): lays out nodes in columns
 * (one per namespace, "world" last) on one row grid shared by every
 * column, and routes each edge orthogonally through the free space: the
 * gutters between columns (vertical runs) and the corridors between rows
 * (horizontal runs), each edge on a track of its own, leaving and entering
 * boxes at ports of their own. So no box overlaps another, no edge crosses
 * a box it does not connect, and an edge and its reverse never share a
 * line. The width follows the map's container; below the smallest
 * readable column the map scrolls sideways instead of squeezing. */
"use strict";
window.FibrilMap = (function () {
  const svgNS = "http://www.w3.org/2000/svg";
  const GUTTER = 60;      /* between columns: vertical runs */
  const CORRIDOR = 26;    /* between rows: horizontal runs */
  const PAD = 10;         /* a namespace's box around its nodes */
  const HEAD = 26;        /* a namespace's title */
  const MIN_COL = 130, MAX_COL = 340, CHAR_W = 6.6;

  function el(name, attrs, parent) {
    const e = document.createElementNS(svgNS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(s) { return document.createTextNode(s == null ? "" : String(s)); }
  function fit(s, px) {
    const n = Math.max(4, Math.floor(px / CHAR_W));
    return s.length > n ? s.slice(0, n - 1) + "\u2026" : s;
  }

  /* nodes: Map id -> {id, label, ns, kind}; edges: [{src, dst, fwd, drop}] */
  function layout(nodes, edges, width) {
    const cols = new Map();
    for (const n of nodes.values()) {
      const c = n.kind === "world" ? "\uffff" : n.ns || "(none)";
      if (!cols.has(c)) cols.set(c, []);
      cols.get(c).push(n);
    }
    const names = [...cols.keys()].sort();
    const ncol = Math.max(1, names.length);
    let colW = Math.floor((width - GUTTER * (ncol + 1)) / ncol);
    colW = Math.max(MIN_COL, Math.min(MAX_COL, colW));
    const used = GUTTER * (ncol + 1) + colW * ncol;
    const left = Math.max(0, Math.floor((width - used) / 2));
    /* ports: each edge's end on a side of its box, ordered by the other end */
    const place = new Map();
    names.forEach((c, i) => cols.get(c).sort((a, b) => a.label.localeCompare(b.label))
      .forEach((n, j) => place.set(n.id, { col: i, row: j })));
    const sides = new Map();   /* "id|L" -> [{edge, end}] */
    const side = (id, s) => { const k = id + "|" + s; if (!sides.has(k)) sides.set(k, []); return sides.get(k); };
    const routes = [];
    for (const e of edges) {
      const a = place.get(e.src), b = place.get(e.dst);
      if (!a || !b) continue;
      const r = { e, a, b };
      if (e.src === e.dst || a.col === b.col) { r.out = "R"; r.in = "R"; }
      else if (b.col > a.col) { r.out = "R"; r.in = "L"; }
      else { r.out = "L"; r.in = "R"; }
      side(e.src, r.out).push({ r, end: "out", other: b });
      side(e.dst, r.in).push({ r, end: "in", other: a });
      routes.push(r);
    }
    let maxPorts = 1;
    for (const l of sides.values()) maxPorts = Math.max(maxPorts, l.length);
    /* ports 8 px apart, the right side's 4 px off the left side's: a run
       out of one column's right side and one into the next column's left
       side never lie on one line */
    const portsH = 8 * maxPorts + 12, boxH = Math.max(28, portsH), lift = Math.floor((boxH - portsH) / 2);
    const pitch = boxH + CORRIDOR;
    const colX = (i) => left + GUTTER + i * (colW + GUTTER);
    const rowY = (j) => 8 + HEAD + CORRIDOR + j * pitch;
    const boxes = new Map();
    for (const [id, p] of place)
      boxes.set(id, { x: colX(p.col) + PAD, y: rowY(p.row), w: colW - 2 * PAD, h: boxH });
    for (const [k, l] of sides) {
      const id = k.slice(0, k.lastIndexOf("|")), bx = boxes.get(id);
      l.sort((u, v) => (u.other.row - v.other.row) || (u.end < v.end ? -1 : u.end > v.end ? 1 : 0));
      const first = lift + (k.endsWith("|R") ? 4 : 8) + 8 * Math.floor((maxPorts - l.length) / 2);
      l.forEach((p, i) => { p.r[p.end + "Y"] = bx.y + first + 8 * i; });
    }
    /* tracks: each vertical run gets its own x in its gutter, each
       horizontal run its own y in its corridor */
    const gutters = new Map(), corridors = new Map();
    const take = (m, k, r) => { if (!m.has(k)) m.set(k, []); m.get(k).push(r); };
    for (const r of routes) {
      const { a, b } = r;
      r.g1 = r.out === "R" ? a.col + 1 : a.col;            /* gutter beside the source */
      r.g2 = r.in === "R" ? b.col + 1 : b.col;             /* gutter beside the target */
      take(gutters, r.g1, { r, k: "t1" });
      if (r.g1 !== r.g2) { take(gutters, r.g2, { r, k: "t2" }); take(corridors, b.row, { r, k: "c" }); }
    }
    const gx = (g) => colX(g) - GUTTER;
    for (const [g, l] of gutters) {
      l.sort((u, v) => (u.r.a.row + u.r.b.row) - (v.r.a.row + v.r.b.row));
      const step = Math.min(8, (GUTTER - 2 * PAD) / (l.length + 1));
      const x0 = gx(g) + GUTTER / 2 - step * (l.length - 1) / 2;
      l.forEach((t, i) => { t.r[t.k] = x0 + i * step; });
    }
    for (const [row, l] of corridors) {
      const step = Math.min(6, (CORRIDOR - 4) / (l.length + 1));
      const top = rowY(row) - CORRIDOR;
      const y0 = top + CORRIDOR / 2 - step * (l.length - 1) / 2;
      l.forEach((t, i) => { t.r.c = y0 + i * step; });
    }
    const paths = [];
    for (const r of routes) {
      const sa = boxes.get(r.e.src), sb = boxes.get(r.e.dst);
      const x1 = r.out === "R" ? sa.x + sa.w : sa.x, x2 = r.in === "R" ? sb.x + sb.w : sb.x;
      const pts = [[x1, r.outY], [r.t1, r.outY]];
      if (r.g1 === r.g2) pts.push([r.t1, r.inY]);
      else pts.push([r.t1, r.c], [r.t2, r.c], [r.t2, r.inY]);
      pts.push([x2, r.inY]);
      paths.push({ e: r.e, pts });
    }
    let nrows = 0;
    for (const c of names) nrows = Math.max(nrows, cols.get(c).length);
    const cols_out = names.map((c, i) => ({ name: c === "\uffff" ? "world" : c, world: c === "\uffff",
      x: colX(i), y: 8, w: colW, h: HEAD + CORRIDOR + cols.get(c).length * pitch }));
    return { boxes, paths, cols: cols_out, width: Math.max(width, used), height: rowY(nrows) + 12 };
  }

  /* an edge's count on its own path, where it covers no box and no other
     count: the middle of a run first, then further along it */
  function placeLabel(pts, w, boxes, placed) {
    const h = 12, hit = (a, b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
    let first = null;
    for (const t of [0.5, 0.3, 0.7, 0.15, 0.85])
      for (let i = 1; i < pts.length; i++) {
        const x = pts[i - 1][0] + t * (pts[i][0] - pts[i - 1][0]), y = pts[i - 1][1] + t * (pts[i][1] - pts[i - 1][1]);
        const r = { x: x - w / 2, y: y - h / 2, w, h };
        if (!first) first = [x, y];
        let free = true;
        for (const b of boxes.values()) if (hit(r, b)) { free = false; break; }
        if (free) for (const q of placed) if (hit(r, q)) { free = false; break; }
        if (free) { placed.push(r); return [x, y]; }
      }
    return first;
  }

  function draw(svg, nodes, edges, width) {
    const placed = [];
    const g = layout(nodes, edges, width);
    const lns = svg.querySelector("#layer-ns"), led = svg.querySelector("#layer-edges"),
          lno = svg.querySelector("#layer-nodes");
    lns.textContent = ""; led.textContent = ""; lno.textContent = "";
    svg.setAttribute("width", g.width);
    svg.style.width = g.width + "px";
    svg.setAttribute("height", Math.max(120, g.height));
    for (const c of g.cols) {
      const cg = el("g", { class: "ns", "data-ns": c.name }, lns);
      el("rect", { x: c.x, y: c.y, width: c.w, height: c.h, rx: 8 }, cg);
      const title = c.world ? "world (outside any pod)" : "namespace " + c.name;
      el("text", { x: c.x + 10, y: c.y + 17 }, cg).appendChild(text(fit(title, c.w - 20)));
    }
    for (const [id, b] of g.boxes) {
      const n = nodes.get(id);
      const ng = el("g", { class: "node " + n.kind + (n.group ? " group" : ""), "data-id": id }, lno);
      el("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 5 }, ng);
      const label = (n.kind === "service" ? "svc " : "") + n.label;
      el("text", { x: b.x + 8, y: b.y + b.h / 2 + 4 }, ng).appendChild(text(fit(label, b.w - 16)));
      el("title", {}, ng).appendChild(text(n.title || n.id));
    }
    for (const p of g.paths) {
      const e = p.e, n = e.fwd + e.drop;
      const verdict = e.fwd && e.drop ? "MIXED" : e.drop ? "DROPPED" : "FORWARDED";
      const d = "M " + p.pts.map((q) => q[0].toFixed(1) + " " + q[1].toFixed(1)).join(" L ");
      const path = el("path", { d, class: "edge " + verdict, "marker-end": "url(#arrow)",
        "data-src": e.src, "data-dst": e.dst, "data-count": n, "data-verdict": verdict }, led);
      const sl = nodes.get(e.src).label, dl = nodes.get(e.dst).label;
      el("title", {}, path).appendChild(text(`${sl} \u2192 ${dl}: ${e.fwd} forwarded, ${e.drop} dropped`));
      const s = String(n), at = placeLabel(p.pts, s.length * 6 + 4, g.boxes, placed);
      el("text", { x: at[0], y: at[1] + 3.5, class: "elabel", "text-anchor": "middle",
                   "data-src": e.src, "data-dst": e.dst }, led).appendChild(text(s));
    }
    return g;
  }

  return { layout, draw };
})();
