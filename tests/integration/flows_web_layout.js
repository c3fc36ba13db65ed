/* tests/integration/flows_web_layout.js - run in the page by flows_web.py
 * (selenium's execute_script): measures the flows page as drawn and
 * returns what is wrong with it, a list of one-line problems (empty when
 * the layout keeps its promises): map boxes that overlap, boxes or node
 * texts outside their box / the map / the window, edges that run through
 * a box they do not connect, two edges on one line (an edge and its
 * reverse drawn over each other), edge counts on a box or on each other,
 * a map wider than its container, and table cells cut (the summary
 * column's text overflowing, the table or a header past its container). */
const problems = [];
const vw = document.documentElement.clientWidth;
const r = (e) => { const b = e.getBoundingClientRect(); return { x: b.left, y: b.top, w: b.width, h: b.height }; };
const hit = (a, b, m) => a.x + m < b.x + b.w && b.x + m < a.x + a.w && a.y + m < b.y + b.h && b.y + m < a.y + a.h;
const inside = (a, b, m) => a.x >= b.x - m && a.y >= b.y - m && a.x + a.w <= b.x + b.w + m && a.y + a.h <= b.y + b.h + m;
const fmt = (b) => `[${Math.round(b.x)},${Math.round(b.y)} ${Math.round(b.w)}x${Math.round(b.h)}]`;
const svg = document.getElementById("map"), wrap = document.getElementById("mapwrap") || svg.parentElement;
const sb = r(svg);
const nodes = [...svg.querySelectorAll("g.node")].map((g) => ({ id: g.dataset.id, box: r(g.querySelector("rect")),
  text: r(g.querySelector("text")) }));
const nsBoxes = [...svg.querySelectorAll("g.ns")].map((g) => ({ ns: g.dataset.ns, box: r(g.querySelector("rect")),
  text: r(g.querySelector("text")) }));
if (wrap.scrollWidth > wrap.clientWidth + 1)
  problems.push(`the map is wider than its container (${wrap.scrollWidth} > ${wrap.clientWidth}): scrolled off`);
for (const n of nsBoxes) {
  if (n.box.x < 0 || n.box.x + n.box.w > vw + 0.5)
    problems.push(`namespace column ${n.ns} ${fmt(n.box)} is outside the window (width ${vw})`);
  if (!inside(n.box, sb, 0.5)) problems.push(`namespace column ${n.ns} ${fmt(n.box)} is clipped by the map ${fmt(sb)}`);
  if (!inside(n.text, n.box, 0.5)) problems.push(`namespace title ${n.ns} overflows its column`);
}
for (let i = 0; i < nsBoxes.length; i++)
  for (let j = i + 1; j < nsBoxes.length; j++)
    if (hit(nsBoxes[i].box, nsBoxes[j].box, 0.5))
      problems.push(`namespace columns ${nsBoxes[i].ns} and ${nsBoxes[j].ns} overlap`);
for (const n of nodes) {
  if (!inside(n.box, sb, 0.5) || n.box.x + n.box.w > vw + 0.5)
    problems.push(`box ${n.id} ${fmt(n.box)} is clipped (map ${fmt(sb)}, window width ${vw})`);
  if (!inside(n.text, n.box, 0.5)) problems.push(`the text of box ${n.id} overflows it ${fmt(n.text)} > ${fmt(n.box)}`);
}
for (let i = 0; i < nodes.length; i++)
  for (let j = i + 1; j < nodes.length; j++)
    if (hit(nodes[i].box, nodes[j].box, 0.5))
      problems.push(`boxes ${nodes[i].id} ${fmt(nodes[i].box)} and ${nodes[j].id} ${fmt(nodes[j].box)} overlap`);

/* edges: their segments in the window's coordinates (a curve: sampled) */
const byId = new Map(nodes.map((n) => [n.id, n.box]));
const edges = [...svg.querySelectorAll("path.edge")].map((p) => {
  const len = p.getTotalLength(), m = p.getScreenCTM(), pts = [];
  const steps = Math.max(2, Math.ceil(len / 4));
  for (let k = 0; k <= steps; k++) {
    const q = p.getPointAtLength(len * k / steps);
    pts.push([m.a * q.x + m.c * q.y + m.e, m.b * q.x + m.d * q.y + m.f]);
  }
  return { src: p.dataset.src, dst: p.dataset.dst, pts };
});
for (const e of edges) {
  for (const n of nodes) {
    const own = n.id === e.src || n.id === e.dst;
    /* a box it connects: only its first and last 3 px may touch it */
    const inner = { x: n.box.x + 1, y: n.box.y + 1, w: n.box.w - 2, h: n.box.h - 2 };
    const bad = e.pts.some((q, k) => (!own || (k > 1 && k < e.pts.length - 2)) &&
      q[0] > inner.x && q[0] < inner.x + inner.w && q[1] > inner.y && q[1] < inner.y + inner.h);
    if (bad) problems.push(`edge ${e.src} -> ${e.dst} runs through box ${n.id}${own ? " (its own end)" : ""}`);
  }
  const last = e.pts[e.pts.length - 1];
  if (last[0] < 0 || last[0] > vw) problems.push(`edge ${e.src} -> ${e.dst} ends outside the window`);
}
/* two edges on one line: many sample points of one within 1.5 px of the other */
const near = (q, pts) => pts.some((p) => Math.abs(p[0] - q[0]) < 1.5 && Math.abs(p[1] - q[1]) < 1.5);
for (let i = 0; i < edges.length; i++)
  for (let j = i + 1; j < edges.length; j++) {
    const a = edges[i], b = edges[j];
    const shared = a.pts.filter((q) => near(q, b.pts)).length;
    if (shared > 4)
      problems.push(`edges ${a.src} -> ${a.dst} and ${b.src} -> ${b.dst} share a line (${shared * 4} px)`);
  }
const labels = [...svg.querySelectorAll("text.elabel")].map((t) => ({ e: t.dataset.src + " -> " + t.dataset.dst, box: r(t) }));
for (const l of labels) {
  for (const n of nodes) if (hit(l.box, n.box, 0.5)) problems.push(`the count of ${l.e} covers box ${n.id}`);
  if (!inside(l.box, sb, 0.5)) problems.push(`the count of ${l.e} is clipped by the map`);
}
for (let i = 0; i < labels.length; i++)
  for (let j = i + 1; j < labels.length; j++)
    if (hit(labels[i].box, labels[j].box, 0.5)) problems.push(`the counts of ${labels[i].e} and ${labels[j].e} overlap`);

/* the table */
const tw = document.getElementById("tablewrap") || document.querySelector(".tablewrap"), twb = r(tw);
if (twb.x + twb.w > vw + 0.5) problems.push(`the flows table's box ends past the window (${twb.x + twb.w} > ${vw})`);
const table = document.getElementById("flows");
if (r(table).x + r(table).w > twb.x + twb.w + 0.5) problems.push("the flows table is wider than its box");
for (const th of table.querySelectorAll("th"))
  if (th.scrollWidth > th.clientWidth + 1) problems.push(`the header "${th.textContent}" is cut`);
let cut = 0, example = "";
for (const td of table.querySelectorAll("td.summary, td.type, td.verdict, td.direction, td.time"))
  if (td.scrollWidth > td.clientWidth + 1 || r(td).x + r(td).w > twb.x + twb.w + 0.5) {
    cut++;
    if (!example) example = `${td.className} "${td.textContent}" (${td.scrollWidth} > ${td.clientWidth})`;
  }
if (cut) problems.push(`${cut} table cells cut, e.g. ${example}`);
return { problems, nodes: nodes.length, edges: edges.length, width: vw, height: document.documentElement.clientHeight };
