"""The anatomy (:mod:`verlprof.report.anatomy`) as text lines (console, summary.md) and as
JSON (``verlprof report --json``'s ``anatomy`` object). Rendering only, no analysis.

Lines fit 80 columns: a phase name longer than :data:`NAME_WIDTH` is cut with an ellipsis
(summary.md and the JSON keep it whole), and the detail column is cut to what is left. Names
from reports are data (:func:`~verlprof.safe_text.visible`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from verlprof.report.anatomy import Anatomy, Row, StepAnatomy
from verlprof.safe_text import clip, visible

ANATOMY_SCHEMA_VERSION = 1
"""Version of the ``anatomy`` object in ``verlprof report --json``; grows by one on any
change a reader could trip over."""
WIDTH = 80
NAME_WIDTH = 20
PART_NAMES = {"dispatch": "dispatch", "compute": "compute", "collect": "collect",
              "controller": "ctl only", "weight_sync": "", "driver": "", "wall": "wall"}


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.1f}"


def _pct(ns: int, whole: int) -> str:
    return f"{100.0 * ns / whole:.1f}" if whole > 0 else "-"


def error_text(error_ns: Optional[int]) -> str:
    return "clocks not measured" if error_ns is None else \
        f"clocks ±{error_ns / 1e6:.2f} ms"


def step_title(s: StepAnatomy) -> str:
    return f"where step {s.step} went: {_ms(s.wall_ns)} ms ({error_text(s.error_ns)})"


def step_cells(s: StepAnatomy) -> List[List[str]]:
    """[phase, part, ms, %, detail] per row, then the total; a phase is named on its first
    row only."""
    out: List[List[str]] = []
    last = None
    for row in s.rows():
        name = visible(row.label) if row.label != last else ""
        last = row.label
        out.append([name, PART_NAMES[row.part], _ms(row.ns), _pct(row.ns, s.wall_ns),
                    visible(row.detail)])
    total = sum(r.ns for r in s.rows())
    out.append(["total", "", _ms(total), _pct(total, s.wall_ns), ""])
    return out


def replica_lines(s: StepAnatomy) -> List[str]:
    """Each served replica's generation, beside the table (not in its sum)."""
    return [f"{visible(r.group)} replica {r.replica}: busy {_ms(r.busy_ns)} ms "
            f"({_pct(r.busy_ns, s.wall_ns)}%), {_ms(r.alongside_ns)} ms beside training"
            for r in s.replicas]


def _fixed(cells: List[str]) -> str:
    name, part, ms, pct, detail = cells
    head = f"  {clip(name, NAME_WIDTH):<{NAME_WIDTH}} {part:<8} {ms:>7} {pct:>5}"
    rest = WIDTH - len(head) - 1
    return head + (f" {clip(detail, rest)}" if detail else "")


def console_lines(anatomy: Anatomy, per_step: bool = True) -> List[str]:
    """The per-step tables (``per_step``) and the table across steps, in ≤ 80 columns."""
    lines: List[str] = []
    header = _fixed(["phase", "part", "ms", "%", "detail"])
    if per_step:
        for s in anatomy.steps:
            lines += [step_title(s), header] + [_fixed(c) for c in step_cells(s)]
            lines += ["  " + clip(x, WIDTH - 2) for x in replica_lines(s)]
    if len(anatomy.steps) > 1:
        lines += [f"where the steps went: median and worst of {len(anatomy.steps)} steps (ms)",
                  f"  {'phase':<{NAME_WIDTH}} {'part':<8} {'median':>7} {'worst':>7}  step"]
        for a in anatomy.across():
            lines.append(f"  {clip(visible(a.label), NAME_WIDTH):<{NAME_WIDTH}} "
                         f"{PART_NAMES[a.part]:<8} "
                         f"{_ms(a.median_ns):>7} {_ms(a.worst_ns):>7}  {a.worst_step}")
    return lines


def md_tables(anatomy: Anatomy) -> List[List[Any]]:
    """[title, header, rows, replica lines] per step, then the across-steps table."""
    out: List[List[Any]] = []
    for s in anatomy.steps:
        out.append([step_title(s), ["phase", "part", "ms", "%", "detail"], step_cells(s),
                    replica_lines(s)])
    if len(anatomy.steps) > 1:
        rows = [[a.label, PART_NAMES[a.part],
                 _ms(a.median_ns), _ms(a.worst_ns), str(a.worst_step)] for a in anatomy.across()]
        out.append([f"median and worst of {len(anatomy.steps)} steps",
                    ["phase", "part", "median ms", "worst ms", "worst step"], rows, []])
    return out


def _row_json(row: Row, wall: int) -> Dict[str, Any]:
    return {"label": row.label, "part": row.part, "ms": round(row.ns / 1e6, 3),
            "pct": round(100.0 * row.ns / wall, 2) if wall > 0 else None,
            "detail": row.detail}


def anatomy_json(anatomy: Anatomy) -> Dict[str, Any]:
    """The ``anatomy`` object of ``verlprof report --json`` (its own schema version)."""
    steps = []
    for s in anatomy.steps:
        phases = [{"phase": p.phase, "group": p.group, "rank": p.rank,
                   "controller_ms": round(p.duration_ns / 1e6, 3),
                   "dispatch_ms": round(p.dispatch_ns / 1e6, 3),
                   "compute_ms": round(p.compute_ns / 1e6, 3),
                   "collect_ms": round(p.collect_ns / 1e6, 3),
                   "dispatch_gap_ms": round(p.dispatch_gap_ns / 1e6, 3),
                   "collect_gap_ms": round(p.collect_gap_ns / 1e6, 3),
                   "clock_error_ms": None if p.error_ns is None else round(p.error_ns / 1e6, 3),
                   "ranks": p.ranks,
                   "skew_ms": None if p.skew_ns is None else round(p.skew_ns / 1e6, 3)}
                  for p in s.phases]
        steps.append({"step": s.step, "wall_ms": round(s.wall_ns / 1e6, 3),
                      "span_from": s.source,
                      "clock_error_ms": None if s.error_ns is None else round(s.error_ns / 1e6,
                                                                              3),
                      "rows": [_row_json(r, s.wall_ns) for r in s.rows()], "phases": phases,
                      "weight_sync_ms": round(s.weight_sync_ns / 1e6, 3),
                      "driver_ms": round(s.driver_ns / 1e6, 3),
                      "replicas": [{"group": r.group, "replica": r.replica,
                                    "busy_ms": round(r.busy_ns / 1e6, 3),
                                    "alongside_training_ms": round(r.alongside_ns / 1e6, 3)}
                                   for r in s.replicas]})
    across = [{"label": a.label, "part": a.part, "median_ms": round(a.median_ns / 1e6, 3),
               "worst_ms": round(a.worst_ns / 1e6, 3), "worst_step": a.worst_step}
              for a in anatomy.across()]
    return {"schema_version": ANATOMY_SCHEMA_VERSION, "steps": steps, "across": across}
