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

from verlprof.report.model import PhaseRecord, Problem, StepSpan
from verlprof.report.stragglers import DEFAULT_MIN_EXCESS_MS, DEFAULT_THRESHOLD, Straggler
from verlprof.report.summary import Summary, summarize, write_outputs
from verlprof.report.table import PhaseRow, Spread

__all__ = [
    "DEFAULT_MIN_EXCESS_MS", "DEFAULT_THRESHOLD", "PhaseRecord", "PhaseRow", "Problem",
    "Spread", "StepSpan", "Straggler", "Summary", "summarize", "write_outputs",
]
