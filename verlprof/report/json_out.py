"""``verlprof report --json``: what the summary found, for scripts, in a versioned schema.

The schema is ``summary.schema.json`` next to this module (JSON Schema draft 2020-12);
:data:`SCHEMA_VERSION` grows by one on any change a reader could trip over (a field removed,
renamed or retyped); new fields may appear within a version. Times are milliseconds. Names are
as the reports wrote them (JSON escapes what needs escaping)::

    {"schema": "verlprof.report", "schema_version": 1, "output_dir": ..., "run_id": ...,
     "ok": true, "reports": [{"path", "group", "rank", "steps", "status", "reason"}, ...],
     "phases": [{"step", "group", "role", "phase", "ranks": {"0": ms, ...}, "calls",
                 "min_ms", "median_ms", "p95_ms", "max_ms", "slowest_rank"}, ...],
     "stragglers": [{"step", "group", "role", "phase", "rank", "ms", "others_median_ms",
                     "ratio"}, ...],
     "threshold": 1.5, "min_excess_ms": 20.0, "files": {"summary.csv": path, ...},
     "anatomy": {"schema_version": 1, "steps": [{"step", "wall_ms", "rows": [{"label",
                 "part", "ms", "pct", "detail"}, ...], "phases", "replicas", ...}],
                 "across": [{"label", "part", "median_ms", "worst_ms", "worst_step"}, ...]}}
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Optional

from verlprof.report.anatomy_view import anatomy_json
from verlprof.report.findings import Summary

SCHEMA_NAME = "verlprof.report"
SCHEMA_VERSION = 1
SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "summary.schema.json")


def _ms(ns: Optional[int]) -> Optional[float]:
    return None if ns is None else round(ns / 1e6, 3)


def report_statuses(summary: Summary) -> List[Dict[str, Any]]:
    """Every report the manifest lists, with the status the summary ends with."""
    problems = {os.path.normpath(p.path): p for p in summary.missing}
    out = []
    for entry in summary.manifest.reports:
        problem = problems.get(os.path.normpath(entry.path))
        status = problem.kind if problem is not None else entry.status
        out.append({"path": entry.path, "group": entry.group, "rank": entry.rank,
                    "steps": list(entry.steps), "status": status,
                    "reason": (problem.reason if problem is not None else entry.reason)})
    return out


def summary_json(summary: Summary) -> Dict[str, Any]:
    """The summary as the schema says."""
    calls: Dict[tuple, int] = {}
    per_rank: Dict[tuple, Dict[str, float]] = {}
    for row in summary.rows:
        key = (row.step, row.group, row.role, row.phase)
        calls[key] = calls.get(key, 0) + row.calls
        per_rank.setdefault(key, {})[str(row.rank)] = _ms(row.duration_ns) or 0.0
    phases = [{"step": s.step, "group": s.group, "role": s.role, "phase": s.phase,
               "ranks": per_rank.get((s.step, s.group, s.role, s.phase), {}),
               "calls": calls.get((s.step, s.group, s.role, s.phase), 0),
               "min_ms": _ms(s.min_ns), "median_ms": _ms(s.median_ns), "p95_ms": _ms(s.p95_ns),
               "max_ms": _ms(s.max_ns), "slowest_rank": s.slowest_rank}
              for s in summary.spreads]
    stragglers = [{"step": x.step, "group": x.group, "role": x.role, "phase": x.phase,
                   "rank": x.rank, "ms": _ms(x.duration_ns),
                   "others_median_ms": _ms(x.others_median_ns),
                   "ratio": x.ratio if math.isfinite(x.ratio) else None}
                  for x in summary.stragglers]
    reports = report_statuses(summary)
    return {"schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION,
            "output_dir": summary.output_dir, "run_id": summary.manifest.run_id,
            "ok": all(r["status"] == "ok" for r in reports), "reports": reports,
            "phases": phases, "stragglers": stragglers, "threshold": summary.threshold,
            "min_excess_ms": summary.min_excess_ms, "files": dict(summary.paths),
            "anatomy": None if summary.anatomy is None else anatomy_json(summary.anatomy)}
