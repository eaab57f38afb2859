"""``summary/timeline.png``: the run on one wall-clock axis (matplotlib, Agg backend).

One lane per (group, rank), controller on top; phases as coloured bars (legend below, one
colour per phase); capture windows as a pale band behind each lane; step boundaries as
vertical lines labelled ``step N``; stragglers outlined in red. The figure grows with the
number of lanes so 8 ranks × several groups stay legible.
"""

from __future__ import annotations

from verlprof.report.timeline import TimelineData

LANE_INCHES = 0.34
WIDTH_INCHES = 15.0
DPI = 110


def write_png(data: TimelineData, path: str, title: str = "verlprof timeline") -> str:
    # a bare Figure renders with Agg and never touches pyplot's global backend or state
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    lanes = max(1, len(data.lanes))
    legend_rows = (len(data.colours) + 3) // 4 + 1
    height = 1.5 + LANE_INCHES * lanes + 0.25 * legend_rows
    fig = Figure(figsize=(WIDTH_INCHES, height), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    bar_h = 0.72

    for i, group in enumerate(data.lane_groups):  # a rule between groups
        if i == 0 or group != data.lane_groups[i - 1]:
            ax.axhline(i - 0.5, color="#999999", linewidth=0.8)
    for lane, start, end in data.windows:
        ax.broken_barh([(start, max(end - start, 1e-6))], (lane - 0.46, 0.92),
                       facecolors="#eeeeee", edgecolors="none", zorder=0)
    for phase, colour in data.colours.items():
        by_lane = {}
        for b in data.bars:
            if b.phase == phase:
                by_lane.setdefault(b.lane, []).append(b)
        for lane, bars in by_lane.items():
            ax.broken_barh([(b.start_s, max(b.end_s - b.start_s, 1e-6)) for b in bars],
                           (lane - bar_h / 2, bar_h), facecolors=colour,
                           edgecolors=["#d00000" if b.straggler else "none" for b in bars],
                           linewidths=[2.0 if b.straggler else 0 for b in bars], zorder=2)
    for step, start, end in data.steps:
        ax.axvline(start, color="#444444", linewidth=1.0, zorder=3)
        ax.axvline(end, color="#444444", linewidth=0.8, linestyle=(0, (4, 3)), zorder=3)
        ax.annotate(f"step {step}", xy=(start, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(3, 3), textcoords="offset points", fontsize=9, fontweight="bold",
                    va="bottom", ha="left", annotation_clip=False)

    ax.set_ylim(lanes - 0.5, -0.5)
    ax.set_yticks(range(len(data.lanes)))
    ax.set_yticklabels(data.lanes, fontsize=8 if lanes > 16 else 9)
    ax.set_xlim(0, data.end_s * 1.01 if data.end_s > 0 else 1.0)
    ax.set_xlabel("seconds from the first event")
    ax.grid(axis="x", color="#dddddd", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)
    ax.set_title(title, loc="left", fontsize=11, pad=18)

    handles = [Patch(facecolor=c, label=p) for p, c in data.colours.items()]
    if data.windows:
        handles.append(Patch(facecolor="#eeeeee", label="capture window"))
    if any(b.straggler for b in data.bars):
        handles.append(Patch(facecolor="white", edgecolor="#d00000", linewidth=2,
                             label="straggler"))
    if data.steps:
        handles.append(Line2D([], [], color="#444444", label="step start / end (dashed)"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(5, len(handles)),
                   fontsize=8, frameon=False)
    fig.savefig(path)
    return path
