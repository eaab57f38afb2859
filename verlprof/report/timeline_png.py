"""``summary/timeline.png``: the run on one wall-clock axis, drawn with Pillow.

One lane per (group, rank), controller on top; phases as coloured bars (legend below, one
colour per phase); a group of many ranks as one band lane (median start to median end in the
phase's colour, then paler to the p95 end, palest from the first start to the last end) and
the own lanes of its outlier ranks; capture windows as a pale band behind each lane; step
boundaries as vertical lines labelled ``step N`` (solid at the start, dashed at the end);
stragglers outlined in red. The picture grows with the number of lanes so 8 ranks x several
groups stay legible.

Why Pillow and not matplotlib: the picture is rectangles, lines and labels, and importing
matplotlib alone took about 1.1 s of the 2-3 s a whole ``verlprof report`` took on 16 reports
(docs/performance.md, P4); Pillow imports in about 40 ms and draws this in a few more.

Names are data (:mod:`verlprof.safe_text`): every label is drawn as text in its
:func:`~verlprof.safe_text.visible` form (a newline would make Pillow draw several lines, and
refuse an anchor; a bidi control would reorder it) and clipped to a length the picture can
hold, so that one long name cannot push the plot off the image.
"""

from __future__ import annotations

import bisect
import functools
import math
import os
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from verlprof.report.timeline import TimelineData, merged
from verlprof.safe_text import clip, visible

WIDTH_PX = 1650
LANE_PX = 37
"""Height of one lane; a bar fills 72% of it, a capture window 92%."""
FONT_PX = {"title": 17, "label": 14, "small": 12}
"""Font sizes in pixels."""
FONT_FILES = ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
              "/usr/share/fonts/TTF/DejaVuSans.ttf")
"""Tried in order; Pillow's built-in scalable font otherwise."""
INK, GRID, RULE, BAND, STEP, STRAGGLER = ("#000000", "#dddddd", "#999999", "#dce6f2",
                                          "#444444", "#d00000")
WINDOW_EDGE = "#8eaad0"
"""Outline of a capture window: the band is pale (bars are drawn on it) but must show where a
window starts and ends, also behind a lane full of bars."""
BAND_KEY = ("#555555",)
"""The grey the legend explains a band's three shades with (each phase has its own colour)."""
LABEL_CHARS = {"title": 150, "lane": 80, "legend": 60}
"""Longest label drawn, in characters (the rest becomes an ellipsis). A lane label is drawn
whole up to 80 characters, on two lines of at most :data:`LANE_LINE_CHARS` beyond that: it
still leaves most of the 1650 px width to the plot."""
LANE_LINE_CHARS = 40


def label(text: str, kind: str) -> str:
    """``text`` as the picture draws it: visible, clipped to ``LABEL_CHARS[kind]``."""
    return clip(visible(text), LABEL_CHARS[kind])


def lane_lines(text: str) -> List[str]:
    """A lane label as drawn: one line, or two of at most :data:`LANE_LINE_CHARS` (broken
    after the last space, ``_``, ``.``, ``/`` or ``-`` that fits, else at the limit)."""
    shown = label(text, "lane")
    if len(shown) <= LANE_LINE_CHARS:
        return [shown]
    cut = max(shown.rfind(c, 0, LANE_LINE_CHARS) for c in " _./-")
    cut = cut + 1 if cut > LANE_LINE_CHARS // 2 else LANE_LINE_CHARS
    return [shown[:cut].rstrip(), clip(shown[cut:].lstrip(), LANE_LINE_CHARS)]


def draw_lane_label(draw, text: str, right: int, middle: float, font) -> None:
    """A lane's label (:func:`lane_lines`) ending at ``right``: two lines are 16 px apart."""
    lines = lane_lines(text)
    for line, dy in zip(lines, (0.0,) if len(lines) == 1 else (-8.0, 8.0)):
        draw.text((right, middle + dy), line, fill=INK, font=font, anchor="rm")


@dataclass(frozen=True)
class Layout:
    """Where write_png puts things: the plot's box and its time scale (tests read it too)."""

    width: int
    height: int
    x0: int
    x1: int
    y0: int
    y1: int
    x_max: float
    """Seconds at the right edge of the plot."""
    knots: Tuple[Tuple[float, float], ...] = ()
    """(seconds, x) breakpoints of a cut time axis (:func:`cut_axis`); empty: linear."""

    def x_of(self, seconds: float) -> float:
        t = max(0.0, min(seconds, self.x_max))
        if not self.knots:
            return self.x0 + (self.x1 - self.x0) * t / self.x_max
        i = bisect.bisect_right([k[0] for k in self.knots], t) - 1
        (t_a, x_a), (t_b, x_b) = self.knots[max(0, min(i, len(self.knots) - 2)):][:2]
        return x_a + (x_b - x_a) * ((t - t_a) / (t_b - t_a) if t_b > t_a else 0.0)

    @property
    def gaps(self) -> List[Tuple[float, float]]:
        """x ranges where the time between steps is cut out (empty on a linear axis)."""
        return [(self.knots[i][1], self.knots[i + 1][1]) for i in range(0, len(self.knots) - 1)
                if i % 2 == 0 and self.knots[i + 1][1] - self.knots[i][1] <= GAP_PX + 1e-6
                and self.knots[i + 1][0] > self.knots[i][0]]

    def lane_middle(self, lane: int) -> float:
        return self.y0 + LANE_PX * (lane + 0.5)

    def box(self, lane: int, fill: float, start: float, end: float) -> Tuple[int, int, int, int]:
        """The rectangle of a bar filling ``fill`` of its lane's height."""
        middle = self.lane_middle(lane)
        left_px, right_px = round(self.x_of(start)), round(self.x_of(end))
        return (left_px, round(middle - LANE_PX * fill / 2), max(right_px, left_px + 1) - 1,
                round(middle + LANE_PX * fill / 2) - 1)


GAP_PX = 14
"""Width a cut-out stretch of time between two steps takes on a cut axis."""
CUT_WHEN_STEPS_BELOW = 0.5
"""The axis is cut when the steps cover less than this share of the run's time: the phases
of 10 steps, 5 s apart and 0.7 s long, would otherwise be slivers of 1-3 px."""


def cut_axis(steps: Sequence[Tuple[int, float, float]], x_max: float, x0: int,
             x1: int) -> Tuple[Tuple[float, float], ...]:
    """Breakpoints of a time axis on which every step keeps a width in proportion to its
    duration and the time before, between and after the steps takes :data:`GAP_PX` each;
    empty (a linear axis) when the steps already fill most of the time."""
    busy_spans = merged([(max(0.0, s), min(e, x_max)) for _, s, e in steps if e > s])
    busy = sum(e - s for s, e in busy_spans)
    if len(busy_spans) < 2 or busy >= CUT_WHEN_STEPS_BELOW * x_max:
        return ()
    edges = [0.0] + [t for span in busy_spans for t in span] + [x_max]
    gaps = sum(1 for i in range(0, len(edges) - 1, 2) if edges[i + 1] > edges[i])
    scale = (x1 - x0 - GAP_PX * gaps) / busy
    knots, x = [(0.0, float(x0))], float(x0)
    for i in range(len(edges) - 1):
        length = edges[i + 1] - edges[i]
        x += (GAP_PX if length > 0 else 0.0) if i % 2 == 0 else length * scale
        knots.append((edges[i + 1], x))
    return tuple(knots)


def layout(data: TimelineData) -> Layout:
    """The picture's geometry for ``data``."""
    fonts = load_fonts()
    legend = _legend_entries(data)
    columns = _legend_columns(legend, fonts["small"])
    legend_rows = math.ceil(len(legend) / columns) if legend else 0
    label_w = max([text_width(fonts["label"], line) for lane in data.lanes
                   for line in lane_lines(lane)] or [0])
    left, right, top = label_w + 24, 24, 62
    plot_h = LANE_PX * max(1, len(data.lanes))
    x_max = data.end_s * 1.01 if data.end_s > 0 else 1.0
    return Layout(width=WIDTH_PX, height=top + plot_h + 58 + 20 * legend_rows + 12, x0=left,
                  x1=WIDTH_PX - right, y0=top, y1=top + plot_h, x_max=x_max,
                  knots=cut_axis(data.steps, x_max, left, WIDTH_PX - right))


def tint(colour: str, share: float) -> str:
    """``colour`` mixed with white: ``share`` 1 is the colour, 0 is white."""
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(255 - (255 - c) * share):02x}" for c in rgb)


PNG_COMPRESS_LEVEL = 1
"""zlib level of the pictures: level 1 encodes about twice as fast as Pillow's 6 (encoding was
about a third of the drawing time) for files ~25% larger (tens of KB); same pixels."""
BAND_SHARES = (0.3, 0.6)
"""Tints of a band's outer parts: first start to last end, and median end to p95 end."""


def write_png(data: TimelineData, path: str, title: str = "verlprof timeline") -> str:
    from PIL import Image, ImageDraw

    fonts = load_fonts()
    legend = _legend_entries(data)
    columns = _legend_columns(legend, fonts["small"])
    geo = layout(data)
    image = Image.new("RGB", (geo.width, geo.height), "white")
    draw = ImageDraw.Draw(image)
    x0, x1, y0, y1, x_of = geo.x0, geo.x1, geo.y0, geo.y1, geo.x_of
    ticks = _ticks(geo.x_max) if not geo.knots else _spaced(
        [start for _, start, _ in data.steps], geo, fonts["label"])
    for tick in ticks:
        draw.line([(round(x_of(tick)), y0), (round(x_of(tick)), y1)], fill=GRID)
    for left_px, right_px in geo.gaps:  # the cut-out time: hatched, so no one reads it as idle
        draw.rectangle((round(left_px) + 2, y0 + 1, round(right_px) - 2, y1 - 1), fill="#f4f4f4")
        for y in range(y0 + 4, y1 - 2, 8):
            draw.line([(round(left_px) + 3, y + 4), (round(right_px) - 3, y)], fill=RULE)
    for lane, start, end in data.windows:
        draw.rectangle(geo.box(lane, 0.92, start, end), fill=BAND, outline=WINDOW_EDGE)
    for i, group in enumerate(data.lane_groups):  # a rule between groups
        if i and group != data.lane_groups[i - 1]:
            draw.line([(x0, y0 + LANE_PX * i), (x1, y0 + LANE_PX * i)], fill=RULE)
    for band in data.bands:
        colour = data.colours[band.phase]
        draw.rectangle(geo.box(band.lane, 0.72, band.first_start_s, band.last_end_s),
                       fill=tint(colour, BAND_SHARES[0]))
        draw.rectangle(geo.box(band.lane, 0.72, band.median_end_s, band.p95_end_s),
                       fill=tint(colour, BAND_SHARES[1]))
        draw.rectangle(geo.box(band.lane, 0.72, band.median_start_s, band.median_end_s),
                       fill=colour)
    for bar in data.bars:
        draw.rectangle(geo.box(bar.lane, 0.72, bar.start_s, bar.end_s),
                       fill=data.colours[bar.phase])
    for bar in data.bars:  # outlines last, so that a neighbour never covers one
        if bar.straggler:
            a, b, c, d = geo.box(bar.lane, 0.72, bar.start_s, bar.end_s)
            draw.rectangle((a - 2, b - 2, c + 2, d + 2), outline=STRAGGLER, width=2)
    free_from = x0  # a step's label is left out where it would overwrite the previous one
    for step, start, end in data.steps:
        draw.line([(round(x_of(start)), y0), (round(x_of(start)), y1)], fill=STEP)
        _dashed_vline(draw, round(x_of(end)), y0, y1, STEP)
        text, left = f"step {step}", round(x_of(start)) + 4
        # never past the picture's right edge: the last step's label would lose its digits
        left = min(left, geo.width - 4 - text_width(fonts["label"], text) - 1)
        if left < free_from:
            continue
        free_from = left + text_width(fonts["label"], text) + 8
        for shift in (0, 1):  # drawn twice, 1 px apart: bold without a second font file
            draw.text((left + shift, y0 - 4), text, fill=INK, font=fonts["label"], anchor="ld")
    draw.rectangle((x0, y0, x1, y1), outline=INK)
    for i, name in enumerate(data.lanes):
        draw_lane_label(draw, name, x0 - 8, geo.lane_middle(i), fonts["label"])
    for tick in ticks:
        x = round(x_of(tick))
        draw.line([(x, y1), (x, y1 + 4)], fill=INK)
        draw.text((x, y1 + 7), _tick_text(tick, bool(geo.knots)), fill=INK,
                  font=fonts["label"], anchor="mt")
    caption = ("seconds from the first event; each step at its own scale, the time between "
               "steps cut out (hatched)" if geo.knots else "seconds from the first event")
    draw.text(((x0 + x1) // 2, y1 + 28), caption, fill=INK, font=fonts["label"], anchor="mt")
    draw.text((x0, 10), label(title, "title"), fill=INK, font=fonts["title"], anchor="lt")
    _draw_legend(draw, legend, columns, (x0 + x1) // 2, y1 + 56, fonts["small"])
    image.save(path, optimize=False, compress_level=PNG_COMPRESS_LEVEL)
    return path


def _legend_entries(data: TimelineData) -> List[Tuple[str, str, str]]:
    """(kind, colour, label): ``box`` swatches for phases, windows, stragglers; ``line``."""
    entries = [("box", colour, label(phase, "legend")) for phase, colour in data.colours.items()]
    if data.windows:
        entries.append(("box", BAND, "capture window"))
    if any(bar.straggler for bar in data.bars):
        entries.append(("outline", STRAGGLER, "straggler"))
    if data.bands:
        entries += [("box", BAND_KEY[0], "band: median start to median end"),
                    ("box", tint(BAND_KEY[0], BAND_SHARES[1]), "band: to p95 end"),
                    ("box", tint(BAND_KEY[0], BAND_SHARES[0]), "band: first start to last end")]
    if data.steps:
        entries.append(("line", STEP, "step start / end (dashed)"))
    return entries


LEGEND_SWATCH_PX = (22, 8)
"""A legend entry's swatch width and the gap before its label."""


def _column_widths(entries: Sequence[Tuple[str, str, str]], columns: int, font) -> List[int]:
    swatch, gap = LEGEND_SWATCH_PX
    widths = [swatch + gap + text_width(font, text) + 28 for _, _, text in entries]
    return [max(widths[i::columns]) for i in range(columns)]


def _legend_columns(entries: Sequence[Tuple[str, str, str]], font) -> int:
    """Up to 5 columns, fewer when long labels would not fit across the picture."""
    columns = min(5, max(1, len(entries)))
    while columns > 1 and sum(_column_widths(entries, columns, font)) > WIDTH_PX - 48:
        columns -= 1
    return columns


def _draw_legend(draw, entries: Sequence[Tuple[str, str, str]], columns: int, centre: int,
                 top: int, font) -> None:
    if not entries:
        return
    column_w = _column_widths(entries, columns, font)
    x_start = centre - sum(column_w) // 2
    for i, (kind, colour, text) in enumerate(entries):
        row, column = divmod(i, columns)
        legend_entry(draw, kind, colour, text, x_start + sum(column_w[:column]), top + 20 * row,
                     font)


def legend_entry(draw, kind: str, colour: str, text: str, x: int, y: int, font) -> None:
    """A swatch (``box``, ``outline`` or ``line``) at (x, y) and its label after it."""
    swatch, gap = LEGEND_SWATCH_PX
    if kind == "line":
        draw.line([(x, y + 7), (x + swatch, y + 7)], fill=colour, width=2)
    elif kind == "outline":
        draw.rectangle((x, y, x + swatch, y + 13), fill="white", outline=colour, width=2)
    else:
        draw.rectangle((x, y, x + swatch, y + 13), fill=colour)
    draw.text((x + swatch + gap, y + 7), text, fill=INK, font=font, anchor="lm")


def _dashed_vline(draw, x: int, y0: int, y1: int, colour: str, on: int = 6,
                  off: int = 4) -> None:
    y = y0
    while y < y1:
        draw.line([(x, y), (x, min(y + on, y1))], fill=colour)
        y += on + off


def _tick_text(tick: float, cut: bool) -> str:
    return f"{tick:.3g}" if cut and tick < 100 else (f"{tick:.0f}" if cut else f"{tick:g}")


def _spaced(times: Sequence[float], geo: Layout, font) -> List[float]:
    """The step starts of a cut axis as ticks, left out where a label would touch the
    previous one."""
    out: List[float] = []
    free_from = -1e9
    for t in sorted(times):
        x = geo.x_of(t)
        half = text_width(font, _tick_text(t, True)) / 2
        if x - half >= free_from:
            out.append(t)
            free_from = x + half + 10
    return out


def _ticks(x_max: float, target: int = 10) -> List[float]:
    """Round tick positions (1, 2 or 5 times a power of ten) from 0 to ``x_max``."""
    raw = x_max / target
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    count = int(x_max / step + 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def load_fonts() -> dict:
    return {name: _font(size) for name, size in FONT_PX.items()}


@functools.cache
def _font(size: int):
    from PIL import ImageFont

    for path in FONT_FILES:
        if os.path.exists(path):
            return ImageFont.truetype(path, size)
    return ImageFont.load_default(size)


def text_width(font, text: str) -> int:
    left, _, right, _ = font.getbbox(text)
    return int(right - left)
