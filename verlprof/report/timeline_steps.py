"""``summary/timeline_steps.png``: each phase across steps, at a width that reads.

On the wall-clock timeline a phase of 100 ms is a sliver once the run spans minutes between
profiled steps. This picture drops the time between steps: one lane per (group, role/phase),
one column per profiled step, side by side. A column's height is the phase's time in that
step on its own scale per lane (the lane's largest time is written at its right end): solid up
to the median across ranks, paler up to the p95, palest up to the slowest rank; a column
whose step had a straggler in that phase is outlined in red. Which phase got slower, and which
step was the outlier, reads at 2 steps as at 200, and at 1 rank as at 1,024.

Names are data: labels are drawn in their :func:`~verlprof.safe_text.visible` form, clipped
(:func:`~verlprof.report.timeline_png.label`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from verlprof.report.stragglers import Straggler
from verlprof.report.table import Spread, group_order, phase_order
from verlprof.report.timeline_png import (
    BAND_KEY,
    BAND_SHARES,
    FONT_PX,
    INK,
    PNG_COMPRESS_LEVEL,
    RULE,
    STRAGGLER,
    WIDTH_PX,
    draw_lane_label,
    label,
    lane_lines,
    legend_entry,
    load_fonts,
    text_width,
    tint,
)

LANE_PX = 54
"""Height of one phase's lane; its columns use up to 80% of it."""
COLUMN_FILL = 0.7
"""Share of a step's slot its column fills (at least 1 px)."""


@dataclass(frozen=True)
class StepsLayout:
    """The geometry of timeline_steps.png (tests read it to find columns)."""

    width: int
    height: int
    x0: int
    x1: int
    y0: int
    steps: Tuple[int, ...]
    lanes: Tuple[Tuple[str, str, str], ...]
    """(group, role, phase), top to bottom."""

    def slot(self, index: int) -> Tuple[float, float]:
        """Left and right x of the column of the ``index``-th step."""
        width = (self.x1 - self.x0) / max(1, len(self.steps))
        left = self.x0 + width * index
        pad = width * (1 - COLUMN_FILL) / 2
        return left + pad, max(left + pad + 1, left + width - pad)

    def baseline(self, lane: int) -> int:
        """y of the bottom of the ``lane``-th lane's columns."""
        return round(self.y0 + LANE_PX * (lane + 1) - LANE_PX * 0.1)

    def column_top(self, lane: int, share: float) -> int:
        """y of a column's top for ``share`` of the lane's largest time."""
        return round(self.baseline(lane) - LANE_PX * 0.8 * share)


def lane_name(group: str, role: str, phase: str) -> str:
    return f"{group} {phase}" if role == group else f"{group} {role}/{phase}"


def steps_layout(spreads: Sequence[Spread]) -> StepsLayout:
    fonts = load_fonts()
    keys = sorted({(s.group, s.role, s.phase) for s in spreads},
                  key=lambda k: (group_order(k[0]), phase_order(k[2]), k[1]))
    names = [line for k in keys for line in lane_lines(lane_name(*k))]
    left = max([text_width(fonts["label"], n) for n in names] or [0]) + 24
    right = max(text_width(fonts["small"], "max 99999.9 ms"), 60) + 16
    top = 62
    return StepsLayout(width=WIDTH_PX, height=top + LANE_PX * max(1, len(keys)) + 90,
                       x0=left, x1=WIDTH_PX - right, y0=top,
                       steps=tuple(sorted({s.step for s in spreads})), lanes=tuple(keys))


def write_steps_png(spreads: Sequence[Spread], stragglers: Sequence[Straggler],
                    colours: Dict[str, str], path: str,
                    title: str = "verlprof phases by step") -> str:
    from PIL import Image, ImageDraw

    fonts = load_fonts()
    geo = steps_layout(spreads)
    image = Image.new("RGB", (geo.width, geo.height), "white")
    draw = ImageDraw.Draw(image)
    cell = {(s.group, s.role, s.phase, s.step): s for s in spreads}
    flagged = {(s.group, s.role, s.phase, s.step) for s in stragglers}
    column = {step: i for i, step in enumerate(geo.steps)}
    y1 = geo.y0 + LANE_PX * max(1, len(geo.lanes))
    for lane, (group, role, phase) in enumerate(geo.lanes):
        if lane:
            draw.line([(geo.x0, geo.y0 + LANE_PX * lane), (geo.x1, geo.y0 + LANE_PX * lane)],
                      fill=RULE)
        mine = [s for s in spreads if (s.group, s.role, s.phase) == (group, role, phase)]
        scale = max(s.max_ns for s in mine) or 1
        colour = colours.get(phase, BAND_KEY[0])
        for s in mine:
            left, right = geo.slot(column[s.step])
            for value, fill in ((s.max_ns, tint(colour, BAND_SHARES[0])),
                                (s.p95_ns, tint(colour, BAND_SHARES[1])),
                                (s.median_ns, colour)):
                draw.rectangle((round(left), geo.column_top(lane, value / scale),
                                round(right) - 1, geo.baseline(lane)), fill=fill)
        for step in sorted({c[3] for c in flagged if c[:3] == (group, role, phase)}):
            left, right = geo.slot(column[step])
            top = geo.column_top(lane, cell[(group, role, phase, step)].max_ns / scale)
            draw.rectangle((round(left) - 2, top - 2, round(right) + 1, geo.baseline(lane) + 2),
                           outline=STRAGGLER, width=2)
        middle = geo.y0 + LANE_PX * (lane + 0.5)
        draw_lane_label(draw, lane_name(group, role, phase), geo.x0 - 8, middle, fonts["label"])
        draw.text((geo.x1 + 8, middle), f"max {scale / 1e6:.1f} ms", fill=INK,
                  font=fonts["small"], anchor="lm")
    draw.rectangle((geo.x0, geo.y0, geo.x1, y1), outline=INK)
    for step in _labelled(geo):
        left, right = geo.slot(column[step])
        x = round((left + right) / 2)
        draw.line([(x, y1), (x, y1 + 4)], fill=INK)
        draw.text((x, y1 + 7), str(step), fill=INK, font=fonts["label"], anchor="mt")
    draw.text(((geo.x0 + geo.x1) // 2, y1 + 28), "profiled step (side by side, the time "
              "between steps left out)", fill=INK, font=fonts["label"], anchor="mt")
    x = geo.x0
    for kind, swatch, text in (("box", tint(BAND_KEY[0], 1.0), "median across ranks"),
                               ("box", tint(BAND_KEY[0], BAND_SHARES[1]), "p95"),
                               ("box", tint(BAND_KEY[0], BAND_SHARES[0]), "slowest rank"),
                               ("outline", STRAGGLER, "a straggler")):
        legend_entry(draw, kind, swatch, text, x, y1 + 56, fonts["small"])
        x += 30 + text_width(fonts["small"], text) + 28
    draw.text((geo.x0, 10), label(title, "title"), fill=INK, font=fonts["title"], anchor="lt")
    draw.text((geo.x0, 34), "each lane on its own scale: height = the phase's time in that step",
              fill=INK, font=fonts["small"], anchor="lt")
    image.save(path, optimize=False, compress_level=PNG_COMPRESS_LEVEL)
    return path


def _labelled(geo: StepsLayout) -> List[int]:
    """Steps whose number is written under their column: every k-th, k so that they fit."""
    if not geo.steps:
        return []
    slot = (geo.x1 - geo.x0) / len(geo.steps)
    room = FONT_PX["label"] * 0.62 * len(str(geo.steps[-1])) + 12
    every = max(1, int(room // slot) + (room % slot > 0))
    return list(geo.steps[::every])
