"""``verlprof report``: per step × component × rank tables, stragglers and a timeline.

::

    from verlprof.report import summarize
    summary = summarize("/path/to/output_dir", threshold=1.5)
    summary.stragglers, summary.missing, summary.paths["timeline.png"]

Stages, one module each: :mod:`~verlprof.report.load` (read nsys reports via their sqlite
export and torch traces, in parallel; assign steps), :mod:`~verlprof.report.table` (rows and
spread across ranks), :mod:`~verlprof.report.stragglers`, and the outputs
(:mod:`~verlprof.report.console`, :mod:`~verlprof.report.files`,
:mod:`~verlprof.report.timeline_png`, :mod:`~verlprof.report.timeline_html`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verlprof.report.model import PhaseRecord, Problem, StepSpan
    from verlprof.report.stragglers import DEFAULT_MIN_EXCESS_MS, DEFAULT_THRESHOLD, Straggler
    from verlprof.report.summary import Summary, summarize, write_outputs
    from verlprof.report.table import PhaseRow, Spread

_WHERE = {
    "PhaseRecord": "model", "Problem": "model", "StepSpan": "model",
    "DEFAULT_MIN_EXCESS_MS": "stragglers", "DEFAULT_THRESHOLD": "stragglers",
    "Straggler": "stragglers", "Summary": "summary", "summarize": "summary",
    "write_outputs": "summary", "PhaseRow": "table", "Spread": "table",
}
"""Module of each public name. They load on first use: importing any ``verlprof.report.*``
module runs this file, and ``verlprof report``'s argument parser (``verlprof.report.cli``)
must not pay for rich, the readers and the renderers before it has parsed anything, nor
``verlprof plan`` at all."""


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"verlprof.report.{module}"), name)


__all__ = [
    "DEFAULT_MIN_EXCESS_MS", "DEFAULT_THRESHOLD", "PhaseRecord", "PhaseRow", "Problem",
    "Spread", "StepSpan", "Straggler", "Summary", "summarize", "write_outputs",
]
