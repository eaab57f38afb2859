"""P4 at realistic report sizes: nsys reports of about 1, 20 and 100 MB, made once and cached.

Each size is K = 4 reports (2 ranks x 2 steps) written by the project's own worker command
(the ``nsys profile ...`` argv that ``verlprof plan`` gives ``actor_rollout_ref`` ranks 0 and 1
of the demo: NVTX capture range per step, ``repeat:2``) around a child process that uses
verlprof's own NVTX calls: per step one capture window (:func:`capture_open`), the four demo
phases as verlprof ranges (:func:`span`), and inside each phase millions of short ranges in the
*default* domain (``nvtx.push_range``), as user code or ``emit_nvtx`` would leave them. The
reports and their manifest are cached under ``$VERLPROF_BENCH_CACHE`` (default
``~/.cache/verlprof-bench``), keyed by size; a later run reuses them.

Generation costs about 2 minutes for the 20 MB set and 10 for the 100 MB set on 2 busy cores
(the first time only).

:func:`ensure_wide` makes issue 14's set the same way: K = 16 reports (4 ranks x 4 steps), each
with :data:`WIDE_RANGES` default-domain ranges around the verlprof phases.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Sequence

from benchmarks.bounds import Stalled, Started, deadline_s, hangs

RANGES_PER_MB = 80_000
"""Default-domain ranges per MB of report (200,000 ranges gave 2.1 MB with nsys 2022.4)."""
PHASES = ("rollout/generate_sequences", "actor/compute_log_prob", "ref/compute_ref_log_prob",
          "actor/update_actor")
STEPS = (1, 2)
RANKS = (0, 1)
GROUP = "actor_rollout_ref"
SIZES_MB = (1, 20, 100)
CACHE_ENV = "VERLPROF_BENCH_CACHE"
WIDE_RANKS = (0, 1, 2, 3)
WIDE_STEPS = (1, 2, 3, 4)
WIDE_RANGES = 200_000
"""Default-domain ranges per report in the K = 16 set (issue 14: >= 200,000 each)."""


def cache_root() -> str:
    return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache",
                                                     "verlprof-bench")


def worker_argv(output_prefix: str, steps: Sequence[int] = STEPS) -> List[str]:
    """The launch argv ``verlprof plan`` gives the demo's actor_rollout_ref ranks (``steps``
    profiled, one window each)."""
    from benchmarks.common import DEMO_CONFIG
    from verlprof.demo.run import plan_demo

    _, plan, _ = plan_demo(DEMO_CONFIG, [
        "trainer.profiler.output_dir=/tmp/verlprof-bench-plan",
        f"trainer.total_training_steps={max(steps)}",
        f"trainer.profile_steps=[{','.join(str(s) for s in steps)}]",
        "actor_rollout_ref.actor.profile_ranks=[0,1]"])
    argv = list(plan.processes[0].launch_argv)
    return [a for a in argv if not a.startswith("--output=")] + [f"--output={output_prefix}"]


def child(ranges_per_phase: int, steps: int = len(STEPS)) -> None:
    """Runs under nsys: ``steps`` capture windows, 4 verlprof phases each, short
    default-domain ranges inside every phase."""
    import nvtx

    from verlprof.backends.nsys.nvtx import capture_close, capture_open, span

    push, pop = nvtx.push_range, nvtx.pop_range
    if hangs("p4-generate-app"):  # test hook: the app under nsys stops making progress
        window = capture_open()
        time.sleep(10 ** 6)
    for step in range(1, steps + 1):
        window = capture_open()
        with span(f"step/{step}"):
            for phase in PHASES:
                with span(phase):
                    for _ in range(ranges_per_phase):
                        push("op")
                        pop()
        capture_close(window)


def reports_dir(size_mb: int) -> str:
    return os.path.join(cache_root(), f"p4_{size_mb}mb")


def ensure(size_mb: int, log=print) -> str:
    """The output directory (manifest + K = 4 reports) of ``size_mb``, made if not cached."""
    return _ensure(reports_dir(size_mb), max(1, size_mb * RANGES_PER_MB // len(PHASES)),
                   RANKS, STEPS, f"~{size_mb} MB", log)


def ensure_wide(log=print) -> str:
    """Issue 14's set: K = 16 reports (4 ranks x 4 steps) of :data:`WIDE_RANGES` default-domain
    ranges each, made if not cached."""
    return _ensure(os.path.join(cache_root(), "p4_16x200k"), WIDE_RANGES // len(PHASES),
                   WIDE_RANKS, WIDE_STEPS, f"{WIDE_RANGES:,} foreign ranges", log)


RANGE_S = 100e-6
"""Deadline per default-domain range a process emits under nsys (observed about 40 us on 2
busy cores, import included; the 100 MB set: 16 M ranges a process, 10 minutes)."""


def _ensure(out: str, per_phase: int, ranks: Sequence[int], steps: Sequence[int], what: str,
            log) -> str:
    if os.path.isfile(os.path.join(out, "manifest.json")):
        return out
    began = time.monotonic()
    tmp = out + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    # processes share the cores: each one's ranges, times how many run on one core
    ranges = per_phase * len(PHASES) * len(steps) * -(-len(ranks) // (os.cpu_count() or 1))
    with Started("p4-generate") as started:
        _generate(started, tmp, per_phase, ranks, steps, what, deadline_s(90, RANGE_S, ranges))
    entries = []
    for rank in ranks:
        pattern = os.path.join(tmp, ".raw", f"rank{rank}", "*.nsys-rep")
        found = sorted(glob.glob(pattern), key=os.path.getmtime)
        if len(found) != len(steps):
            raise RuntimeError(f"P4 sizes: rank {rank} wrote {len(found)} reports, expected "
                               f"{len(steps)}")
        for step, path in zip(steps, found):
            rel = os.path.join(f"step{step:04d}", GROUP, f"rank{rank}",
                               f"{GROUP}_step{step}_rank{rank}.nsys-rep")
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            os.replace(path, os.path.join(tmp, rel))
            entries.append(_entry(step, rank, rel, os.path.getsize(os.path.join(tmp, rel))))
    shutil.rmtree(os.path.join(tmp, ".raw"), ignore_errors=True)
    _write_manifest(tmp, out, entries, steps, len(ranks))
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    log(f"P4 sizes: made {len(entries)} reports of {what} in {out} "
        f"({time.monotonic() - began:.0f} s)")
    return out


def _generate(started: Started, tmp: str, per_phase: int, ranks: Sequence[int],
              steps: Sequence[int], what: str, deadline: float) -> None:
    """One ``nsys profile`` worker command per rank, bounded by ``deadline`` in all; ended by
    pid (the CLIs, their agents and apps: they carry the step's marker) when it expires."""
    from verlprof.backends.nsys.reports import ReportWriter, wait_for_reports

    until = time.monotonic() + deadline
    env = dict(os.environ, NSYS_NVTX_PROFILER_REGISTER_ONLY="0")
    clis = {}
    for rank in ranks:
        raw = os.path.join(tmp, ".raw", f"rank{rank}")
        os.makedirs(raw, exist_ok=True)
        argv = worker_argv(os.path.join(raw, f"{GROUP}_rank{rank}_%p"), steps) + [
            sys.executable, "-m", "benchmarks.p4_sizes", "--child", str(per_phase),
            str(len(steps))]
        clis[rank] = started.popen(argv, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, cwd=_root())
    started.wait(deadline, f"P4 sizes: making {what} under nsys")
    for rank, cli in clis.items():
        # nsys' agent may still be importing when `nsys profile` returns (100 MB: minutes):
        # wait as verlprof's collection does, judging the files, until its session is gone
        pattern = os.path.join(tmp, ".raw", f"rank{rank}", "*.nsys-rep")
        left = until - time.monotonic()
        waited = wait_for_reports([pattern], expected_count=len(steps), timeout_s=max(left, 0),
                                  poll_s=1.0, writer=ReportWriter(cli_pid=cli.pid))
        if not waited.complete:
            why = waited.problem or f"not finalised within {deadline:.0f}s"
            raise Stalled(f"P4 sizes: rank {rank}'s {len(steps)} reports {pattern}: "
                          f"{'; '.join(waited.missing)}; {why}; ended")


def _entry(step: int, rank: int, rel: str, size: int) -> Dict:
    return {"steps": [step], "group": GROUP, "rank": rank, "component": GROUP,
            "backend": "nsys", "path": rel, "status": "ok", "bytes": size,
            "roles": ["actor", "rollout", "ref"]}


def _write_manifest(folder: str, out: str, entries: List[Dict], steps: Sequence[int],
                    ranks: int) -> None:
    from verlprof.manifest import Manifest, ReportEntry, write_manifest

    reports = tuple(ReportEntry(**{**e, "steps": tuple(e["steps"]), "roles": tuple(e["roles"])})
                    for e in entries)
    write_manifest(Manifest(tool="nsys", output_dir=out, step_windows=tuple((s,) for s in steps),
                            reports=reports, groups={GROUP: ranks}), folder)


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def report_paths(out: str) -> List[str]:
    with open(os.path.join(out, "manifest.json")) as handle:
        manifest = json.load(handle)
    return [os.path.join(out, r["path"]) for r in manifest["reports"]]


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "--child":
        child(int(sys.argv[2]), *[int(a) for a in sys.argv[3:]])
    else:
        for mb in [int(a) for a in sys.argv[1:]] or SIZES_MB:
            print(ensure(mb))
