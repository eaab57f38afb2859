r"""``summary/timeline.html``: the same timeline, interactive and self-contained.

No dependency: the data is embedded as JSON and ~60 lines of plain JavaScript draw it as SVG
(hover a bar for phase, step, lane and duration; a slider zooms the time axis; the page
scrolls horizontally). A group of many ranks is one band lane plus its outliers' lanes, as in
the PNG (:mod:`verlprof.report.timeline`). Opens offline in any browser.

Names are data (:mod:`verlprof.safe_text`), and a page someone else's reports produced is
opened by whoever they share it with. So: every text is sent in its
:func:`~verlprof.safe_text.visible` form, inside JSON whose ``<``, ``>`` and ``&`` are
``\u`` escapes (nothing in it can end the script or open a comment); the script puts text
into the page only through ``textContent`` and attributes, never ``innerHTML``; phases are a
list, not an object keyed by name (a phase named ``__proto__`` stays a phase); and the page's
Content-Security-Policy lets only its own script run (by its hash), so even a mistake here
could not run an injected script or event handler, or load anything.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json

from verlprof.report.timeline import TimelineData
from verlprof.safe_text import visible

CSP = "default-src 'none'; script-src 'sha256-%s'; style-src 'unsafe-inline'"
"""Only the script whose hash is given (the page's own, data included) runs: no other inline
script or event handler, no fetch, no image. Styles: the page's own ``<style>``."""

_HEAD = """<!doctype html>
<html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="%(csp)s">
<title>%(title)s</title>
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
"""
_SCRIPT = """
const D = %(data)s;
const NS = "http://www.w3.org/2000/svg", LH = 22, TOP = 26, AX = 26;
let LW = 180;  // widened in draw() to the longest lane name: names are shown whole
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
  const svg0 = document.getElementById("tl");
  while (svg0.firstChild) svg0.removeChild(svg0.firstChild);
  svg0.setAttribute("width", 4000); svg0.setAttribute("height", 40);
  LW = 180;
  for (const name of D.lanes) {
    const t = el("text", {x: 4, y: 20}, svg0, name);
    if (t.getComputedTextLength) LW = Math.max(LW, Math.ceil(t.getComputedTextLength()) + 16);
  }
  const W = Math.max(400, (document.getElementById("wrap").clientWidth - LW - 20) * zoom);
  const H = TOP + D.lanes.length * LH + AX, end = D.end_s > 0 ? D.end_s * 1.01 : 1;
  const x = s => LW + s / end * W, svg = document.getElementById("tl");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  svg.setAttribute("width", LW + W + 10); svg.setAttribute("height", H);
  D.lanes.forEach((name, i) => {
    if (i === 0 || D.groups[i] !== D.groups[i - 1])
      el("line", {x1: 0, x2: LW + W, y1: TOP + i * LH, y2: TOP + i * LH, stroke: "#aaa"}, svg);
    el("text", {x: 4, y: TOP + i * LH + 15}, svg, name);
  });
  for (const [lane, s, e] of D.windows)
    el("rect", {x: x(s), y: TOP + lane * LH + 1, width: Math.max(1, x(e) - x(s)),
                height: LH - 2, fill: "#dce6f2", stroke: "#8eaad0"}, svg);
  const step = niceStep(end, W / 110);
  for (let t = 0; t <= end; t += step) {
    el("line", {x1: x(t), x2: x(t), y1: TOP, y2: H - AX, stroke: "#e4e4e4"}, svg);
    el("text", {x: x(t), y: H - 8, "text-anchor": "middle"}, svg, +t.toFixed(6) + " s");
  }
  for (const b of D.bars) {
    const r = el("rect", {class: "bar", x: x(b[1]), y: TOP + b[0] * LH + 3,
      width: Math.max(1, x(b[2]) - x(b[1])), height: LH - 6, fill: D.phases[b[3]][1],
      stroke: b[5] ? "#d00000" : "none", "stroke-width": b[5] ? 2 : 0}, svg);
    el("title", {}, r, b[4]);
    r.addEventListener("mouseenter", () => document.getElementById("info").textContent = b[4]);
  }
  for (const b of D.bands) {  // a group of many ranks: first start..last end, p95, median
    const c = D.phases[b[6]][1], y = TOP + b[0] * LH + 3, h = LH - 6;
    for (const [s, e, o] of [[b[1], b[5], 0.3], [b[3], b[4], 0.6], [b[2], b[3], 1]]) {
      const r = el("rect", {class: "bar", x: x(s), y: y, width: Math.max(1, x(e) - x(s)),
        height: h, fill: c, "fill-opacity": o}, svg);
      el("title", {}, r, b[7]);
      r.addEventListener("mouseenter", () => document.getElementById("info").textContent = b[7]);
    }
  }
  let freeFrom = 0;  // a label that would overlap the previous one is left out, as in the PNG
  for (const [n, s, e] of D.steps) {
    el("line", {x1: x(s), x2: x(s), y1: TOP - 6, y2: H - AX, stroke: "#444"}, svg);
    el("line", {x1: x(e), x2: x(e), y1: TOP - 6, y2: H - AX, stroke: "#444",
                "stroke-dasharray": "4 3"}, svg);
    const t = el("text", {x: x(s) + 3, y: TOP - 10, "font-weight": "bold"}, svg, "step " + n);
    const len = t.getComputedTextLength ? t.getComputedTextLength() : 0;
    let left = x(s) + 3;
    if (left + len > LW + W + 8) {
      left = LW + W + 8 - len;
      t.setAttribute("x", LW + W + 8); t.setAttribute("text-anchor", "end");  // never cut
    }
    if (left < freeFrom) svg.removeChild(t); else freeFrom = left + len + 6;
  }
}
function swatch(label, css) {  // text and style through the DOM: a name is never markup
  const span = document.createElement("span"), box = document.createElement("i");
  for (const k in css) box.style[k] = css[k];
  span.appendChild(box); span.appendChild(document.createTextNode(label));
  document.getElementById("legend").appendChild(span);
}
for (const [name, colour] of D.phases) swatch(name, {background: colour});
swatch("capture window", {background: "#dce6f2", border: "1px solid #8eaad0"});
swatch("straggler", {border: "2px solid #d00000", width: "8px", height: "8px"});
if (D.bands.length) swatch("band (many ranks): median start to end, paler to p95 end, palest " +
                           "first start to last end", {background: "#555"});
document.getElementById("zoom").addEventListener("input", draw);
window.addEventListener("resize", draw);
draw();
"""


_JSON_IN_SCRIPT = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}
"""JSON string escapes for the characters that mean something to the HTML parser inside a
``<script>`` (``</script>``, ``<!--``): the same string to JavaScript, inert to HTML."""


def render_html(data: TimelineData, title: str = "verlprof timeline") -> str:
    index = {phase: i for i, phase in enumerate(data.colours)}
    payload = {
        "lanes": [visible(lane) for lane in data.lanes], "groups": list(data.lane_groups),
        "bars": [[b.lane, round(b.start_s, 9), round(b.end_s, 9), index[b.phase],
                  visible(b.label), int(b.straggler)] for b in data.bars],
        "windows": [[lane, round(s, 9), round(e, 9)] for lane, s, e in data.windows],
        "steps": [[n, round(s, 9), round(e, 9)] for n, s, e in data.steps],
        "bands": [[b.lane, round(b.first_start_s, 9), round(b.median_start_s, 9),
                   round(b.median_end_s, 9), round(b.p95_end_s, 9), round(b.last_end_s, 9),
                   index[b.phase], visible(b.label)] for b in data.bands],
        "phases": [[visible(phase), colour] for phase, colour in data.colours.items()],
        "end_s": data.end_s,
    }
    # ensure_ascii (the default) also escapes U+2028/9 and lone surrogates
    text = json.dumps(payload, separators=(",", ":")).translate(_JSON_IN_SCRIPT)
    script = _SCRIPT % {"data": text}
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    head = _HEAD % {"title": html.escape(visible(title)), "csp": CSP % digest}
    return f"{head}<script>{script}</script></body></html>\n"


def write_html(data: TimelineData, path: str, title: str = "verlprof timeline") -> str:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(render_html(data, title))
    return path
