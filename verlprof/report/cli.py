"""``verlprof report OUTPUT_DIR [--threshold X] [--min-excess-ms MS] [--jobs N] [--no-picture]``.

Wire into the main parser with ``add_report_subcommand(subparsers)`` and dispatch
``args.command == "report"`` to ``run_report_command(args)``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict

from verlprof.report.stragglers import DEFAULT_MIN_EXCESS_MS, DEFAULT_THRESHOLD
from verlprof.safe_text import visible

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_NOT_OK = 3
"""``--strict``: a report is missing, incomplete or unreadable."""


def _bounded(kind, minimum, strict: bool, noun: str):
    """An argparse ``type`` parsing ``kind`` and refusing values below ``minimum``."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {noun}: {text!r}") from None
        if value < minimum or (strict and value == minimum):
            bound = f"> {minimum}" if strict else f">= {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    return parse


_positive_float = _bounded(float, 0, True, "a number")
_non_negative_float = _bounded(float, 0, False, "a number")
_positive_int = _bounded(int, 1, False, "an integer")


def add_report_subcommand(subparsers) -> argparse.ArgumentParser:
    """Add ``report`` to an ``add_subparsers()`` object; returns the new parser."""
    parser = subparsers.add_parser(
        "report", help="summarise a profiled run: per-step tables, stragglers, timeline",
        description="Read every report listed in OUTPUT_DIR/manifest.json (nsys reports "
                    "through 'nsys export', cached as .sqlite next to each), print one table "
                    "per step (phase x rank, in ms) and the stragglers, and write "
                    "summary/summary.csv, summary.md, timeline.png, timeline_steps.png, "
                    "timeline.html and trace.pftrace (the Perfetto trace). Missing "
                    "or unreadable reports are listed with the reason; the rest are still "
                    "summarised.",
        epilog="then open single reports: nsys-ui <report>.nsys-rep (or nsys stats in a "
               "terminal); torch traces (.pt.trace.json.gz) at https://ui.perfetto.dev. "
               "See docs/user_guide.md#analysis.")
    parser.add_argument("output_dir", metavar="OUTPUT_DIR",
                        help="the run's output directory, the one that holds manifest.json "
                             "(verlprof plan prints it)")
    parser.add_argument("--threshold", type=_positive_float, default=DEFAULT_THRESHOLD,
                        metavar="X", help="flag a rank slower than X × the median of the other "
                        f"ranks (default {DEFAULT_THRESHOLD:g})")
    parser.add_argument("--min-excess-ms", type=_non_negative_float,
                        default=DEFAULT_MIN_EXCESS_MS, metavar="MS",
                        help="...and at least MS milliseconds slower "
                        f"(default {DEFAULT_MIN_EXCESS_MS:g})")
    parser.add_argument("--jobs", type=_positive_int, default=None, metavar="N",
                        help="reports read in parallel (default: one per core when there is "
                             "enough to read, else 1)")
    parser.add_argument("--per-step", action="store_true", default=None,
                        help="print one table per step and rank as well (default: only for "
                             "up to 3 profiled steps, else one table across steps; summary.md "
                             "always has them)")
    parser.add_argument("--no-picture", dest="picture", action="store_false",
                        help="skip the pictures (timeline.png, timeline.html, "
                             "timeline_steps.png)")
    parser.add_argument("--no-trace", dest="trace", action="store_false",
                        help="skip summary/trace.pftrace, the Perfetto trace of the whole run "
                             "(written when the reports hold up to 100 MB together, kept when "
                             "newer than them; verlprof trace writes it with filters)")
    parser.add_argument("--memory-budget", metavar="SIZE", default=None,
                        help="memory the report readers may use together, e.g. 4G or 512M "
                             "(default 4G, for a 16 GB laptop; VERLPROF_MEMORY_BUDGET); it "
                             "caps how many reports are read at once")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as JSON instead of tables (per-step, "
                             "per-phase figures, stragglers, every report's status; schema: "
                             "verlprof/report/summary.schema.json); the files are still "
                             "written")
    parser.add_argument("--strict", action="store_true",
                        help=f"exit {EXIT_NOT_OK} when any report is not ok (missing, "
                             "incomplete, unreadable); the summary is still written")
    parser.add_argument("--run", metavar="ID", default=None,
                        help="when OUTPUT_DIR holds several runs (each with its manifest, "
                             "e.g. <run id>/ subdirectories), summarise only this one "
                             "(default: OUTPUT_DIR's own run: the newest with "
                             "existing_run=move_aside, the first with new_subdir; without "
                             "one, each on its own)")
    return parser


def run_report_command(args: argparse.Namespace) -> int:
    """Summarise ``args.output_dir``; 0 on success, 2 with one line on stderr for a bad dir."""
    from verlprof.report.runs import report_runs

    several = report_runs(args, run_report_command)  # one summary per run, never mixed
    if several is not None:
        return several
    try:
        if getattr(args, "memory_budget", None) is not None:  # read by report.load's readers
            from verlprof.report.budget import BUDGET_ENV, parse_size

            os.environ[BUDGET_ENV] = str(parse_size(args.memory_budget))
        # the first exports start now and run while the rest loads (verlprof.report.export_ahead)
        from verlprof.report.export_ahead import export_ahead

        manifest = export_ahead(args.output_dir, args.jobs)
        from verlprof.report.summary import summarize

        as_json = getattr(args, "json", False)
        quiet: Dict[str, Any] = {}
        if as_json:
            from rich.console import Console

            quiet = {"console": Console(quiet=True), "progress": False}
        state_of = getattr(args, "running_state", None)  # verlprof.cli: the run owner's state
        note = state_of(args.output_dir, manifest) if state_of is not None and \
            manifest is not None and manifest.running else None
        summary = summarize(args.output_dir, manifest=manifest, threshold=args.threshold,
                            min_excess_ms=getattr(args, "min_excess_ms", DEFAULT_MIN_EXCESS_MS),
                            jobs=args.jobs, picture=args.picture,
                            per_step=getattr(args, "per_step", None), running_note=note,
                            **quiet)
        from verlprof.report import json_out

        if as_json:
            import json

            print(json.dumps(json_out.summary_json(summary), indent=2, ensure_ascii=False))
        else:
            trace_of_report(args.output_dir, manifest, summary,
                            write=getattr(args, "trace", True))
        not_ok = [r for r in json_out.report_statuses(summary) if r["status"] != "ok"]
        if getattr(args, "strict", False) and not_ok:
            print(f"verlprof: report: --strict: {len(not_ok)} report(s) not ok (first: "
                  f"{visible(not_ok[0]['path'])}, {not_ok[0]['status']})", file=sys.stderr)
            return EXIT_NOT_OK
    except ValueError as err:
        hint = ""
        if "no manifest here" in str(err):
            hint = (" (the manifest is written when the run ends: pass the output_dir that "
                    "verlprof plan or the demo printed)")
        print(f"verlprof: report: {visible(str(err))}{hint}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:  # the summary directory cannot be written
        print(f"verlprof: report: cannot write the summary: {visible(str(err))}",
              file=sys.stderr)
        return 1
    return EXIT_OK


def trace_of_report(output_dir: str, manifest=None, summary=None, write: bool = True) -> None:
    """The run's trace as ``verlprof report`` (and the demo) write it (its line states the
    clocks' largest error bound; see :func:`~verlprof.trace.cli.trace_for_report` for when it
    is left as it is), with an arrow from each controller phase to its slowest rank's call, or
    that bound alone when not ``write`` (``--no-trace``); a trace that cannot be written never
    fails the report."""
    from verlprof.report.anatomy import trace_links
    from verlprof.trace.cli import trace_for_report
    from verlprof.trace.clock import clock_summary

    if write:
        anatomy = getattr(summary, "anatomy", None)
        trace_for_report(output_dir, manifest,
                         links=trace_links(anatomy) if anatomy is not None else ())
    elif manifest is not None:
        print(clock_summary(manifest).line())
