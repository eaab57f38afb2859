"""What the pictures must never do: clip a step label ("step 11" read "step 1", "step" in the
page), change a phase's colour between runs, cut a lane name, or hide the capture windows;
and over many steps, the time between steps is cut out of timeline.png so phases stay wide."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import List, Sequence, Tuple

import pytest
from PIL import Image

from tests.helpers import require_chromium
from tests.png_content import rgb
from verlprof.report.model import PhaseRecord, StepSpan, Window
from verlprof.report.timeline import build_timeline, phase_colour
from verlprof.report.timeline_html import write_html
from verlprof.report.timeline_png import (
    BAND,
    GAP_PX,
    INK,
    lane_lines,
    layout,
    load_fonts,
    text_width,
    write_png,
)

S = 1_000_000_000


def run_of(steps: Sequence[Tuple[int, float, float]], phases: Sequence[str],
           group: str = "actor_rollout_ref"):
    """Records of ``phases`` one after the other in each (step, start s, end s), ranks 0-1."""
    records: List[PhaseRecord] = []
    for step, start, end in steps:
        share = (end - start) / len(phases)
        for rank in (0, 1):
            for i, phase in enumerate(phases):
                records.append(PhaseRecord(
                    step=step, group=group, rank=rank, role="actor", phase=phase,
                    start_ns=int((start + i * share) * S), end_ns=int((start + (i + 1) * share)
                                                                       * S) - 1000))
    spans = [StepSpan(step=n, start_ns=int(s * S), end_ns=int(e * S), source="controller")
             for n, s, e in steps]
    windows = [Window(group=group, rank=r, start_ns=int(s * S) - S // 100,
                      end_ns=int(e * S) + S // 100) for _, s, e in steps for r in (0, 1)]
    return build_timeline(records, spans, windows, [], 0)


def dark_columns(image, x_from: int, y_from: int, y_to: int) -> List[int]:
    px = image.load()
    return [x for x in range(x_from, image.width) for y in range(y_from, y_to)
            if sum(px[x, y]) < 200]


def test_the_last_step_label_is_drawn_whole_at_the_right_edge(tmp_path):
    # ten steps of 1 s, then step 11 of 10 ms at the very end: its label starts near the edge
    steps = [(n, (n - 1) * 1.1, (n - 1) * 1.1 + 1.0) for n in range(1, 11)] + [(11, 11.0, 11.01)]
    data = run_of(steps, ["update_actor"])
    path = str(tmp_path / "t.png")
    write_png(data, path)
    geo = layout(data)
    with Image.open(path) as opened:
        image = opened.convert("RGB")
    x_step = round(geo.x_of(11.0))
    label_w = text_width(load_fonts()["label"], "step 11")
    assert x_step + 4 + label_w > geo.width  # where it would start, it would not fit
    dark = dark_columns(image, x_step - label_w - 20, geo.y0 - 20, geo.y0 - 3)
    assert dark and max(dark) < geo.width - 2, "the label runs off the picture"
    assert max(dark) - min(dark) + 1 >= label_w - 2  # every character of "step 11" is there


def test_a_phase_has_the_same_colour_in_every_run(tmp_path):
    """update_actor was pink in one run and brown in another: the colour came from the phases
    present. Now it comes from the name alone, also for names verlprof does not know."""
    one = run_of([(1, 0.0, 1.0)], ["update_actor"])
    other = run_of([(1, 0.0, 1.0)], ["generate_sequences", "compute_values", "my_phase",
                                      "update_actor"])
    colours = []
    for n, data in enumerate((one, other)):
        path = str(tmp_path / f"{n}.png")
        write_png(data, path)
        bar = next(b for b in data.bars if b.phase == "update_actor" and b.lane == 0)
        geo = layout(data)
        a, b, c, d = geo.box(bar.lane, 0.72, bar.start_s, bar.end_s)
        with Image.open(path) as opened:
            colours.append(opened.convert("RGB").getpixel(((a + c) // 2, (b + d) // 2)))
    assert colours[0] == colours[1] == rgb(phase_colour("update_actor"))
    assert other.colours["my_phase"] == phase_colour("my_phase")
    code = "from verlprof.report.timeline import phase_colour; print(phase_colour('my_phase'))"
    again = subprocess.run([sys.executable, "-c", code],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert again == phase_colour("my_phase")  # not Python's per-process string hash
    known = ["generate_sequences", "compute_log_prob", "compute_ref_log_prob", "compute_values",
             "compute_rm_score", "update_critic", "update_actor"]
    assert len({phase_colour(p) for p in known}) == len(known)


def test_many_steps_cut_the_time_between_them_and_the_windows_show(tmp_path):
    # 40 steps of 0.7 s, 5 s apart: on a linear axis each phase would be ~4 px wide
    steps = [(2 * n, n * 5.0, n * 5.0 + 0.7) for n in range(1, 41)]
    data = run_of(steps, ["generate_sequences", "update_actor"])
    geo = layout(data)
    assert geo.knots and len(geo.gaps) >= 40
    bar = data.bars[0]
    a, _, c, _ = geo.box(bar.lane, 0.72, bar.start_s, bar.end_s)
    linear = (geo.x1 - geo.x0) * (bar.end_s - bar.start_s) / geo.x_max
    assert linear < 4 and c - a >= 3 * linear and c - a >= 8  # a bar, not a sliver
    path = str(tmp_path / "t.png")
    write_png(data, path)
    with Image.open(path) as opened:
        image = opened.convert("RGB")
    gap_left, gap_right = geo.gaps[1]
    assert gap_right - gap_left == pytest.approx(GAP_PX)
    # a capture window shows around its bars: its fill right before the step's first bar
    lane, start, _ = data.windows[0]
    x = round(geo.x_of(start)) + 1
    y = round(geo.lane_middle(lane)) + 15  # below the bar, inside the window
    assert image.getpixel((x + 2, y)) == rgb(BAND)
    assert rgb(INK) != rgb(BAND)


def test_a_long_lane_name_is_shown_whole_on_two_lines():
    name = "actor_rollout_ref_with_a_rather_long_group_name_for_its_pool r12"
    lines = lane_lines(name)
    assert len(lines) == 2 and "".join(lines).replace(" ", "") == name.replace(" ", "")
    assert all(len(line) <= 40 for line in lines) and "…" not in "".join(lines)
    assert lane_lines("critic r0") == ["critic r0"]


def test_the_page_draws_the_last_step_label_whole(tmp_path):
    """In the browser the last label was cut to "step": it ran past the SVG's right edge."""
    chromium = require_chromium()
    steps = [(n, (n - 1) * 1.1, (n - 1) * 1.1 + 1.0) for n in range(1, 11)] + [(11, 12.0, 12.01)]
    page = write_html(run_of(steps, ["update_actor"]), str(tmp_path / "t.html"))
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=3000",
            "--window-size=1000,600", "--dump-dom", "file://" + page]
    dom = subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout
    width = float(re.search(r'<svg id="tl" width="([\d.]+)"', dom).group(1))
    label = re.search(r'<text ([^>]*)>step 11</text>', dom)
    assert label, dom[-2000:]
    x = float(re.search(r'\bx="([\d.]+)"', label.group(1)).group(1))
    assert 'text-anchor="end"' in label.group(1) and x <= width - 1  # ends inside the SVG
