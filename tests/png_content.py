"""What timeline.png and timeline_steps.png show, checked pixel by pixel (Pillow decodes them).

The expected picture is worked out from the same data the picture was drawn from and the
layout the drawing code uses (``layout`` / ``steps_layout``): a bar's pixels have its phase's
colour across its x range, in its lane and nowhere else; a straggler has a red outline around
its bar; a band shows its three shades where the distribution says. A picture that drew
nothing, shifted the lanes, swapped colours or lost the outline fails.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Set, Tuple

from verlprof.report.timeline import TimelineData
from verlprof.report.timeline_png import BAND_SHARES, LANE_PX, STRAGGLER, layout, tint


def rgb(colour: str) -> Tuple[int, int, int]:
    return (int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16))


def _image(path: str):
    from PIL import Image

    with Image.open(path) as image:
        return image.convert("RGB")


def check_timeline_png(path: str, data: TimelineData) -> Dict[str, int]:
    """Assert what timeline.png shows; returns how many pixels of each kind were checked."""
    image = _image(path)
    geo = layout(data)
    assert image.size == (geo.width, geo.height)
    px = image.load()
    # columns a step line or the plot's frame may cross: skipped in the painter's checks
    lines: Set[int] = {geo.x0, geo.x1}
    for _, start, end in data.steps:
        for x in (round(geo.x_of(start)), round(geo.x_of(end))):
            lines |= {x - 1, x, x + 1}
    outlined = [geo.box(b.lane, 0.72, b.start_s, b.end_s) for b in data.bars if b.straggler]

    def near_outline(x: int, y: int) -> bool:
        return any(a - 3 <= x <= c + 3 and b - 3 <= y <= d + 3 and
                   (x <= a + 1 or x >= c - 1 or y <= b + 1 or y >= d - 1)
                   for a, b, c, d in outlined)

    # the painter's model: the last shape drawn over a pixel decides its colour
    shapes: Dict[int, List[Tuple[Tuple[int, int, int, int], Tuple[int, int, int]]]] = {}
    for band in data.bands:
        colour = data.colours[band.phase]
        for start, end, fill in ((band.first_start_s, band.last_end_s,
                                  tint(colour, BAND_SHARES[0])),
                                 (band.median_end_s, band.p95_end_s,
                                  tint(colour, BAND_SHARES[1])),
                                 (band.median_start_s, band.median_end_s, colour)):
            shapes.setdefault(band.lane, []).append(
                (geo.box(band.lane, 0.72, start, end), rgb(fill)))
    for bar in data.bars:
        shapes.setdefault(bar.lane, []).append(
            (geo.box(bar.lane, 0.72, bar.start_s, bar.end_s), rgb(data.colours[bar.phase])))
    checked = {"bar": 0, "outline": 0, "lane": 0}
    for lane_shapes in shapes.values():
        for box, _ in lane_shapes:
            for x, y in _probes(box):
                if x in lines or near_outline(x, y):
                    continue
                want = [c for (a, b, c2, d), c in lane_shapes
                        if a <= x <= c2 and b <= y <= d][-1]
                assert px[x, y] == want, f"pixel {(x, y)} is {px[x, y]}, expected {want}"
                checked["bar"] += 1
    # every phase colour inside the plot lies in the lanes that hold that phase
    lanes_of: Dict[Tuple[int, int, int], Set[int]] = {}
    for bar in data.bars:
        lanes_of.setdefault(rgb(data.colours[bar.phase]), set()).add(bar.lane)
    for band in data.bands:
        lanes_of.setdefault(rgb(data.colours[band.phase]), set()).add(band.lane)
    for y in range(geo.y0 + 1, geo.y1, 3):
        for x in range(geo.x0 + 1, geo.x1, 3):
            lane = (y - geo.y0) // LANE_PX
            if px[x, y] in lanes_of:
                assert lane in lanes_of[px[x, y]], f"{px[x, y]} at {(x, y)}: lane {lane}"
    # a red outline around every straggler's bar, on all four sides
    for a, b, c, d in outlined:
        middle_y, middle_x = (b + d) // 2, (a + c) // 2
        for x, y in ((a - 2, middle_y), (c + 2, middle_y), (middle_x, b - 2),
                     (middle_x, d + 2)):
            if x in lines and (x, y) not in ((middle_x, b - 2), (middle_x, d + 2)):
                continue
            assert px[x, y] == rgb(STRAGGLER), f"no straggler outline at {(x, y)}"
            checked["outline"] += 1
    # each lane has its label: dark pixels left of the plot, at the lane's height
    for lane in range(len(data.lanes)):
        middle = round(geo.lane_middle(lane))
        dark = [x for x in range(0, geo.x0 - 4) for y in range(middle - 6, middle + 7)
                if sum(px[x, y]) < 200]
        assert dark, f"lane {lane} ({data.lanes[lane]}) has no label"
        checked["lane"] += 1
    return checked


def _probes(box: Tuple[int, int, int, int]) -> List[Tuple[int, int]]:
    """The middle row and middle column of a box, its edges left out."""
    a, b, c, d = box
    middle_y, middle_x = (b + d) // 2, (a + c) // 2
    return [(x, middle_y) for x in range(a + 1, c)] + \
        [(middle_x, y) for y in range(b + 1, d)]


def check_steps_png(path: str, spreads: Sequence, stragglers: Sequence,
                    colours: Dict[str, str]) -> int:
    """Assert what timeline_steps.png shows: per lane and step a column in the phase's colour
    as high as its median, paler above, red outlines exactly on the stragglers' steps."""
    from verlprof.report.timeline_steps import steps_layout

    image = _image(path)
    geo = steps_layout(spreads)
    assert image.size == (geo.width, geo.height)
    px = image.load()
    flagged = {(s.group, s.role, s.phase, s.step) for s in stragglers}
    scale: Dict[tuple, int] = {}
    for s in spreads:
        key = (s.group, s.role, s.phase)
        scale[key] = max(scale.get(key, 0), s.max_ns)
    checked = 0
    reds: List[tuple] = []
    for s in spreads:
        key = (s.group, s.role, s.phase)
        lane, column = geo.lanes.index(key), geo.steps.index(s.step)
        left, right = geo.slot(column)
        x = round((left + right) / 2)
        colour = colours[s.phase]
        base, median_top = geo.baseline(lane), geo.column_top(lane, s.median_ns / scale[key])
        if base - median_top >= 3:
            assert px[x, base - 1] == rgb(colour), (key, s.step, px[x, base - 1])
        max_top = geo.column_top(lane, s.max_ns / scale[key])
        p95_top = geo.column_top(lane, s.p95_ns / scale[key])
        if p95_top - max_top >= 3:
            assert px[x, max_top + 1] == rgb(tint(colour, BAND_SHARES[0])), (key, s.step)
        assert px[x, max_top - 4] != rgb(colour)  # nothing of it above its slowest rank
        red = px[round(left) - 2, (base + max_top) // 2] == rgb(STRAGGLER)
        assert red == (key + (s.step,) in flagged), (key, s.step, "outline")
        if red:
            reds.append(key + (s.step,))
        checked += 1
    assert len(reds) == len(flagged)
    return checked
