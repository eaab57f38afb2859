"""``verlprof trace OUTPUT_DIR [--steps ...] [--groups ...] [--ranks ...] [--min-duration-us US]
[--no-kernels] [--out PATH]``: one Perfetto trace of the whole run.

Wire into the main parser with ``add_trace_subcommand(subparsers)`` and dispatch
``args.command == "trace"`` to ``run_trace_command(args)``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Optional, Tuple

from verlprof.paths import TRACE_NAME
from verlprof.safe_text import visible
from verlprof.trace.tracks import Filters

if TYPE_CHECKING:  # the readers load when a trace is written, not when the parser is built
    from verlprof.trace.build import TraceResult

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _ints(text: str) -> Tuple[int, ...]:
    """``3,4`` or ``2-5`` (or both, ``1,3-4``) → the integers."""
    out = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers (e.g. 3,4 or 2-5): "
                                         f"{text!r}") from None
    return tuple(out)


def _names(text: str) -> Tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _micros(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """The filters, shared by ``verlprof trace`` and ``verlprof report``'s trace."""
    parser.add_argument("--steps", type=_ints, default=None, metavar="LIST",
                        help="only the windows of these steps, e.g. 3 or 2-4 (default: all)")
    parser.add_argument("--groups", type=_names, default=None, metavar="LIST",
                        help="only these worker groups, e.g. actor_rollout_ref,critic (the "
                             "controller always stays)")
    parser.add_argument("--ranks", type=_ints, default=None, metavar="LIST",
                        help="only these ranks of each group, e.g. 0-7")
    parser.add_argument("--min-duration-us", type=_micros, default=0.0, metavar="US",
                        help="leave out ranges shorter than US microseconds (step spans and "
                             "gaps stay)")
    parser.add_argument("--no-kernels", dest="kernels", action="store_false",
                        help="leave out GPU kernels, memcpys and their launch calls")


def filters_of(args: argparse.Namespace) -> Filters:
    return Filters(steps=args.steps, groups=args.groups, ranks=args.ranks,
                   min_duration_ns=int(args.min_duration_us * 1000), kernels=args.kernels)


def add_trace_subcommand(subparsers) -> argparse.ArgumentParser:
    """Add ``trace`` to an ``add_subparsers()`` object; returns the new parser."""
    parser = subparsers.add_parser(
        "trace", help="one Perfetto trace of the whole run: every process, clocks aligned",
        description="Write OUTPUT_DIR/summary/" + TRACE_NAME + ": a track per profiled "
                    "process (group, rank, host, pid, roles), the step windows, every "
                    "report's NVTX / record_function ranges and GPU kernels on the "
                    "controller's clock, and each missing, incomplete or unreadable report "
                    "as a marked gap. nsys reports are read from the sqlite exports "
                    "'verlprof report' makes (exported here if not there yet).",
        epilog="open it at https://ui.perfetto.dev (Open trace file). "
               "See docs/user_guide.md#one-trace-of-the-whole-job.")
    parser.add_argument("output_dir", metavar="OUTPUT_DIR",
                        help="the run's output directory, the one that holds manifest.json")
    parser.add_argument("--out", metavar="PATH", default=None,
                        help=f"where to write it (default OUTPUT_DIR/summary/{TRACE_NAME})")
    add_filter_arguments(parser)
    return parser


def trace_or_error(output_dir: str, filters: Filters, out: Optional[str] = None,
                   manifest=None, links=()) -> Tuple[int, Optional[TraceResult]]:
    """Write the trace and print its line; one line on stderr instead of a traceback."""
    from verlprof.trace.build import write_trace

    try:
        result = write_trace(output_dir, manifest=manifest, out_path=out, filters=filters,
                             links=links)
    except ValueError as err:
        print(f"verlprof: trace: {visible(str(err))}", file=sys.stderr)
        return EXIT_USAGE, None
    except OSError as err:
        print(f"verlprof: trace: cannot write the trace: {visible(str(err))}",
              file=sys.stderr)
        return EXIT_FAILED, None
    print(result.line(), flush=True)
    return EXIT_OK, result


REPORT_TRACE_LIMIT_BYTES = 100 * 10**6
"""Reports larger than this together: ``verlprof report`` leaves the trace to ``verlprof
trace`` and its filters. A trace is about 4.5 bytes per byte of NVTX-dense nsys reports (the
benchmark's 4 x 20 MB reports: 354 MiB, 6.4 M ranges, written in 4.5 s), so this keeps the
report's trace under about 450 MB and its cost under a few seconds; docs/user_guide.md#sizes."""


def trace_for_report(output_dir: str, manifest=None, links=()) -> None:
    """The trace as ``verlprof report`` writes it: all of it, unless the run is too large
    for a trace nobody asked to filter (:data:`REPORT_TRACE_LIMIT_BYTES`) or the one there is
    newer than the manifest and every report (a second report of the same run rewrites
    nothing); each case says so in one line, with the clocks' error bound."""
    import os

    from verlprof import paths
    from verlprof.manifest import read_manifest
    from verlprof.trace.clock import clock_summary

    try:
        manifest = read_manifest(output_dir) if manifest is None else manifest
    except ValueError:
        manifest = None
    if manifest is None:  # the report has said why already; the trace says it too
        trace_or_error(output_dir, Filters())
        return
    target = os.path.join(output_dir, paths.SUMMARY_DIR, TRACE_NAME)
    inputs = [os.path.join(output_dir, paths.MANIFEST_NAME)]
    for entry in manifest.reports:
        try:
            inputs.append(paths.inside(output_dir, entry.path))
        except ValueError:
            continue
    stats = [os.stat(p) for p in inputs if os.path.isfile(p)]
    total = sum(s.st_size for s in stats[1:])
    shown = visible(output_dir)
    if total > REPORT_TRACE_LIMIT_BYTES:
        print(f"trace: not written by verlprof report for reports of {total / 1e6:,.0f} MB "
              f"(a trace of about {4.5 * total / 2**20:,.0f} MiB): `verlprof trace {shown}` "
              "writes it, --steps/--ranks/--min-duration-us keep it smaller")
    elif os.path.isfile(target) and \
            os.stat(target).st_mtime_ns >= max(s.st_mtime_ns for s in stats):
        print(f"trace: {visible(target)} (newer than the run's reports: kept; `verlprof "
              f"trace {shown}` writes it again)")
    else:
        trace_or_error(output_dir, Filters(), manifest=manifest, links=links)
        return
    print(f"  {clock_summary(manifest).line()}")


def run_trace_command(args: argparse.Namespace) -> int:
    """``verlprof trace``: 0 when written, 2 for a directory without a manifest, 1 when the
    trace cannot be written."""
    return trace_or_error(args.output_dir, filters_of(args), args.out)[0]
