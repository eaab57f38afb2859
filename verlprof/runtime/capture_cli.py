"""``verlprof capture`` and ``verlprof status``: ask a running job for windows, see where it is.

Both read ``<output_dir>/.verlprof-on-demand.json`` (where the job takes requests) and
``.verlprof-token`` (owner-only), join the job's Ray cluster as a driver and talk to its
request desk (:mod:`verlprof.runtime.request_desk`). Every refusal is one line and exit 2.
"""

from __future__ import annotations

import argparse
import getpass
import glob
import json
import os
import socket
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

from verlprof import paths
from verlprof.errors import ProfilingRuntimeError
from verlprof.manifest import Manifest, ReportEntry, read_manifest
from verlprof.records import CaptureDecision, CaptureRequest, JobProgress
from verlprof.safe_text import one_line, visible

EXIT_REFUSED = 2


def add_capture_subcommands(sub: Any) -> None:
    capture = sub.add_parser(
        "capture", help="ask a running job to profile its next steps (no restart)",
        description="Ask a running job (trainer.profiler.on_demand.enabled) for capture "
                    "windows at its next step boundaries. Prints what was accepted (steps, "
                    "ranks, tool, the reports to expect) or one line why not (exit 2).")
    capture.add_argument("output_dir", metavar="OUTPUT_DIR",
                         help="the running job's trainer.profiler.output_dir")
    capture.add_argument("--steps", default="next:1", metavar="SPEC",
                         help="next:N (the N steps from the next boundary), S or S-T")
    capture.add_argument("--group", default="", help="worker group (default: the first)")
    capture.add_argument("--ranks", default="0", metavar="R,R",
                         help="ranks of that group, comma-separated (default 0)")
    capture.add_argument("--tool", default=None, choices=("torch", "nsys"),
                         help="backend: torch (any rank), nsys (ranks armed at launch, "
                              "trainer.profiler.on_demand.nsys_ranks); default: the run's tool")
    capture.add_argument("--discrete", action="store_true",
                         help="one window per annotated phase call instead of per step")
    capture.add_argument("--address", default=None,
                         help="the job's Ray address (default: the one the job wrote)")
    capture.add_argument("--wait", action="store_true",
                         help="return once the reports are in the manifest (the job's end)")
    capture.add_argument("--timeout", type=float, default=600.0, metavar="S",
                         help="seconds to wait for the decision, and with --wait the "
                              "reports (default 600)")
    status = sub.add_parser(
        "status", help="where a job stands: running, finished, or died before finalize",
        description="For a job taking capture requests: its step, open windows, requests and "
                    "reports. Otherwise, from OUTPUT_DIR/manifest.json: finished (finalized), "
                    "still running (the run lock's holder, host and pid), or ended without "
                    "finalize (its controller gone), with the verlprof collect command that "
                    "places what it left. Exit 0; 2 when OUTPUT_DIR has no manifest.")
    status.add_argument("output_dir", metavar="OUTPUT_DIR",
                        help="the run's trainer.profiler.output_dir")
    status.add_argument("--address", default=None,
                        help="the job's Ray address (default: the one the job wrote)")
    collect = sub.add_parser(
        "collect", help="place the reports a job left when it ended without finalize",
        description="For a run whose controller died (killed, its node lost) before "
                    "finalize: place every report its processes finished that this machine "
                    "can see (ok; incomplete for a window cut short), name why not for the "
                    "rest, and rewrite manifest.json (no longer running); then end the "
                    "nsys agents the run's profilers left running on this machine. A "
                    "finalized run is left as it is; a run still going is refused (exit 2). "
                    "Exit 0 when every report is ok, else 1.")
    collect.add_argument("output_dir", metavar="OUTPUT_DIR",
                         help="the dead run's trainer.profiler.output_dir (verlprof status "
                              "names it)")
    collect.add_argument("--timeout", type=float, default=30.0, metavar="S",
                         help="seconds to wait for a tool still writing a report, and for "
                              "the run's nsys processes here to exit (default 30)")
    collect.add_argument("--address", default=None, metavar="ADDR",
                         help="the job's Ray cluster (still up after its driver died): "
                              "also place what its processes left on other nodes, read "
                              "over Ray, and end their nsys agents there")


def run_capture_command(args: argparse.Namespace) -> int:
    try:
        unusable = (paths.not_a_directory(args.output_dir)
                    if args.command in ("status", "collect") else None)
        if unusable:
            raise ProfilingRuntimeError(f"{args.command}: {args.output_dir}: {unusable}")
        if args.command == "status":
            return _status(args)
        if args.command == "collect":
            from verlprof.runtime import leftovers  # the collection path, only when asked

            return leftovers.run_collect(args.output_dir, args.timeout, args.address)
        return _capture(args)
    except ProfilingRuntimeError as err:
        print(f"verlprof: {visible(str(err))}", file=sys.stderr)
        return EXIT_REFUSED


def find_job(output_dir: str) -> Tuple[str, Dict[str, Any]]:
    """The run directory holding the job's descriptor (``output_dir`` or, with
    ``existing_run=new_subdir``, its newest run subdirectory) and the descriptor."""
    descriptors = glob.glob(os.path.join(glob.escape(output_dir), "*", paths.ON_DEMAND_NAME))
    candidates = [output_dir] + [os.path.dirname(d) for d in sorted(descriptors, key=_mtime,
                                                                    reverse=True)]
    for directory in candidates:
        try:
            with open(os.path.join(directory, paths.ON_DEMAND_NAME), encoding="utf-8") as f:
                return directory, dict(json.load(f))
        except (OSError, ValueError):
            continue
    raise ProfilingRuntimeError(
        f"{output_dir}: no running job takes capture requests there (no "
        f"{paths.ON_DEMAND_NAME}: the job has ended, or it runs without "
        "trainer.profiler.on_demand.enabled=true)")


def _desk(args: argparse.Namespace) -> Tuple[str, Dict[str, Any], str, Any]:
    run_dir, where = find_job(args.output_dir)
    try:
        with open(os.path.join(run_dir, paths.TOKEN_NAME), encoding="utf-8") as handle:
            token = handle.read().strip()
    except OSError as err:
        raise ProfilingRuntimeError(f"cannot read {paths.TOKEN_NAME} in {run_dir}: "
                                    f"{err.strerror}; only the job's owner can ask") from None
    if where.get("ray_auth_mode") and "RAY_AUTH_MODE" not in os.environ:
        os.environ["RAY_AUTH_MODE"] = str(where["ray_auth_mode"])  # before Ray is imported
    import ray

    address = args.address or where.get("address")
    try:
        ray.init(address=address, namespace=where.get("namespace"), logging_level="ERROR",
                 log_to_driver=False, configure_logging=True)
        actor = ray.get_actor(str(where.get("actor")), namespace=where.get("namespace"))
    except Exception as err:
        raise ProfilingRuntimeError(
            f"cannot reach the job's request desk at {address}: {one_line(err, 200)}"
            " (the job has ended, or pass --address)") from None
    return run_dir, where, token, actor


def _capture(args: argparse.Namespace) -> int:
    try:
        ranks = tuple(int(r) for r in args.ranks.split(",") if r.strip())
    except ValueError:
        raise ProfilingRuntimeError(f"--ranks: comma-separated integers expected, not "
                                    f"{args.ranks!r}") from None
    run_dir, _, token, actor = _desk(args)
    import ray

    request = CaptureRequest(id=uuid.uuid4().hex, token=token, steps=args.steps,
                             group=args.group, ranks=ranks, tool=args.tool,
                             discrete=args.discrete,
                             requested_by=f"{getpass.getuser()}@{socket.gethostname()}")
    refused = ray.get(actor.submit.remote(request), timeout=60)
    if refused:
        raise ProfilingRuntimeError(f"capture refused: {refused}")
    print(f"verlprof: request {request.id[:8]} queued; the job takes it at its next step "
          "boundary", flush=True)
    decision = _decision(actor, token, request.id, args.timeout)
    if not decision.accepted:
        raise ProfilingRuntimeError(f"capture refused at step {decision.at_step}: "
                                    f"{decision.reason}")
    targets = ", ".join(f"{g} rank {r}" for g, r in decision.targets)
    print(f"verlprof: accepted at step {decision.at_step}: steps "
          f"{', '.join(map(str, decision.steps))} on {targets} with {decision.tool}")
    print("verlprof: reports to expect:")
    for report in decision.reports:
        print(f"  {visible(os.path.join(run_dir, report))}")
    if not args.wait:
        return 0
    print("verlprof: waiting (torch reports come after their last step, nsys at the end) ...",
          flush=True)
    entries = _wait_for_manifest(run_dir, decision, request.requested_by, args.timeout)
    for entry in entries:
        reason = f"  [{entry.status}: {visible(str(entry.reason))}]" \
            if entry.status != "ok" else ""
        print(f"  {visible(os.path.join(run_dir, entry.path))}{reason}")
    ok = sum(e.status == "ok" for e in entries)
    manifest = os.path.join(run_dir, paths.MANIFEST_NAME)
    print(f"verlprof: {ok} of {len(entries)} report(s) ok in {visible(manifest)}")
    return 0 if entries and ok == len(entries) else 1


def _decision(actor: Any, token: str, request_id: str, timeout_s: float) -> CaptureDecision:
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = ray.get(actor.decision.remote(token, request_id, 30.0), timeout=90)
        if isinstance(answer, CaptureDecision):
            return answer
        if isinstance(answer, str):
            raise ProfilingRuntimeError(f"capture refused: {answer}")
    raise ProfilingRuntimeError(f"no step boundary within {timeout_s:g} s: the request stays "
                                "queued and is decided at the job's next step")


def _wait_for_manifest(run_dir: str, decision: CaptureDecision, by: str,
                       timeout_s: float) -> List[ReportEntry]:
    """The manifest entries of ``decision``'s reports: as soon as a manifest lists them all
    (the job gathers a torch window's report right after its last step), or whatever the job's
    final manifest lists."""
    path = os.path.join(run_dir, paths.MANIFEST_NAME)
    deadline = time.monotonic() + timeout_s
    targets = {(g, r) for g, r in decision.targets}
    while time.monotonic() < deadline:
        try:
            manifest: Optional[Manifest] = read_manifest(run_dir)
        except ValueError:  # not written yet
            manifest = None
        entries = [e for e in (manifest.reports if manifest else ()) if e.requested_by == by
                   and (e.group, e.rank) in targets and set(e.steps) <= set(decision.steps)]
        if manifest is not None and (len(entries) >= len(decision.reports)
                                     or not manifest.running):
            return entries
        time.sleep(0.5)
    raise ProfilingRuntimeError(f"the reports were not in {path} within {timeout_s:g} s "
                                "(nsys writes an armed rank's reports when the job ends)")


def _status(args: argparse.Namespace) -> int:
    try:
        _, _, token, actor = _desk(args)
    except ProfilingRuntimeError:
        return _ended_status(args.output_dir)
    import ray

    progress = ray.get(actor.status.remote(token), timeout=60)
    if not isinstance(progress, JobProgress):
        raise ProfilingRuntimeError(f"status refused: {progress}")
    print(f"verlprof: job at step {progress.step}"
          + (" (ended: no more requests)" if progress.ended else ""))
    print(f"  windows open: {', '.join(progress.open_windows) or 'none'}")
    print(f"  requests: {progress.pending} pending, {progress.accepted} accepted; "
          f"{progress.scheduled} window(s) scheduled")
    print(f"  on-demand reports so far: {progress.reports} (torch's in manifest.json after "
          "their last step)")
    return 0


def _ended_status(output_dir: str) -> int:
    path = os.path.join(output_dir, paths.MANIFEST_NAME)
    try:
        from verlprof.runtime import leftovers  # not on the parser's import path

        state, manifest = leftovers.run_state(output_dir)
    except ValueError:
        raise ProfilingRuntimeError(f"{output_dir}: no running job and no manifest") from None
    reports = manifest.reports
    asked = sum(1 for e in reports if e.requested_by)
    counts = ", ".join(f"{len(manifest.by_status(s))} {s}" for s in ("ok", "incomplete",
                                                                       "missing"))
    print(f"verlprof: {visible(state)}")
    print(f"  {len(reports)} report(s) in {visible(path)} ({counts}), {asked} on demand")
    return 0


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0
