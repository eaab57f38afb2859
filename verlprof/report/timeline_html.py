"""``summary/timeline.html``: the same timeline, interactive and self-contained.

No dependency: the data is embedded as JSON and ~60 lines of plain JavaScript draw it as SVG
(hover a bar for phase, step, lane and duration; a slider zooms the time axis; the page
scrolls horizontally). Opens offline in any browser.
"""

from __future__ import annotations

import html
import json

from verlprof.report.timeline import TimelineData

_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>%(title)s</title>
<style>
body{font:13px system-ui,sans-serif;margin:12px;color:#222}
#wrap{overflow-x:auto;border:1px solid #ccc}
#legend span{display:inline-block;margin-right:14px}
#legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px}
#info{margin-left:16px;color:#555}
svg text{font-size:11px}
rect.bar:hover{stroke:#000;stroke-width:1}
</style></head><body>
<h3>%(title)s</h3>
<div>zoom <input type="range" id="zoom" min="1" max="60" value="1" step="0.5">
<span id="info">hover a bar</span></div>
<p id="legend"></p>
<div id="wrap"><svg id="tl"></svg></div>
<script>
const D = %(data)s;
const NS = "http://www.w3.org/2000/svg", LW = 180, LH = 22, TOP = 26, AX = 26;
function el(tag, attrs, parent, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  parent.appendChild(e); return e;
}
function niceStep(span, n) {
  const raw = span / Math.max(1, n), p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}
function draw() {
  const zoom = parseFloat(document.getElementById("zoom").value);
  const W = Math.max(400, (document.getElementById("wrap").clientWidth - LW - 20) * zoom);
  const H = TOP + D.lanes.length * LH + AX, end = D.end_s > 0 ? D.end_s * 1.01 : 1;
  const x = s => LW + s / end * W, svg = document.getElementById("tl");
  svg.innerHTML = ""; svg.setAttribute("width", LW + W + 10); svg.setAttribute("height", H);
  D.lanes.forEach((name, i) => {
    if (i === 0 || D.groups[i] !== D.groups[i - 1])
      el("line", {x1: 0, x2: LW + W, y1: TOP + i * LH, y2: TOP + i * LH, stroke: "#aaa"}, svg);
    el("text", {x: 4, y: TOP + i * LH + 15}, svg, name);
  });
  for (const [lane, s, e] of D.windows)
    el("rect", {x: x(s), y: TOP + lane * LH + 1, width: Math.max(1, x(e) - x(s)),
                height: LH - 2, fill: "#eee"}, svg);
  const step = niceStep(end, W / 110);
  for (let t = 0; t <= end; t += step) {
    el("line", {x1: x(t), x2: x(t), y1: TOP, y2: H - AX, stroke: "#e4e4e4"}, svg);
    el("text", {x: x(t), y: H - 8, "text-anchor": "middle"}, svg, +t.toFixed(6) + " s");
  }
  for (const b of D.bars) {
    const r = el("rect", {class: "bar", x: x(b[1]), y: TOP + b[0] * LH + 3,
      width: Math.max(1, x(b[2]) - x(b[1])), height: LH - 6, fill: D.colours[b[3]],
      stroke: b[5] ? "#d00000" : "none", "stroke-width": b[5] ? 2 : 0}, svg);
    el("title", {}, r, b[4]);
    r.addEventListener("mouseenter", () => document.getElementById("info").textContent = b[4]);
  }
  for (const [n, s, e] of D.steps) {
    el("line", {x1: x(s), x2: x(s), y1: TOP - 6, y2: H - AX, stroke: "#444"}, svg);
    el("line", {x1: x(e), x2: x(e), y1: TOP - 6, y2: H - AX, stroke: "#444",
                "stroke-dasharray": "4 3"}, svg);
    el("text", {x: x(s) + 3, y: TOP - 10, "font-weight": "bold"}, svg, "step " + n);
  }
}
document.getElementById("legend").innerHTML = Object.entries(D.colours).map(
  ([p, c]) => `<span><i style="background:${c}"></i>${p}</span>`).join("") +
  '<span><i style="background:#eee"></i>capture window</span>' +
  '<span><i style="border:2px solid #d00000;width:8px;height:8px"></i>straggler</span>';
document.getElementById("zoom").addEventListener("input", draw);
window.addEventListener("resize", draw);
draw();
</script></body></html>
"""


def render_html(data: TimelineData, title: str = "verlprof timeline") -> str:
    payload = {
        "lanes": list(data.lanes), "groups": list(data.lane_groups),
        "bars": [[b.lane, round(b.start_s, 9), round(b.end_s, 9), b.phase, b.label,
                  int(b.straggler)] for b in data.bars],
        "windows": [[lane, round(s, 9), round(e, 9)] for lane, s, e in data.windows],
        "steps": [[n, round(s, 9), round(e, 9)] for n, s, e in data.steps],
        "colours": data.colours, "end_s": data.end_s,
    }
    text = json.dumps(payload, separators=(",", ":")).replace("</", "<\\/")
    return _PAGE % {"title": html.escape(title), "data": text}


def write_html(data: TimelineData, path: str, title: str = "verlprof timeline") -> str:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(render_html(data, title))
    return path
