"""GPU rows (issue 38, ``python -m benchmarks --only gpu``): a small CUDA training loop
(:mod:`benchmarks.gpu_app`, one rank, a step of at least 100 ms) profiled through verlprof's
own plan, on a machine with an NVIDIA GPU. Three rows:

- **nsys on a CUDA step**: the step's time while its window is open, the rank launched under
  the plan's ``nsys profile`` argv (``--trace=cuda,nvtx``, cudaProfilerApi trigger, one
  window over the measured steps), vs the same loop in a plain process; processes
  interleaved (nsys, plain, plain, nsys, ...), the first steps of each dropped. Goal 1.05x.
- **the report's GPU columns**: kernel time and count summed over the phases verlprof's reader
  gives for that report (what ``verlprof report``'s kernel columns come from) against
  ``nsys stats --report cuda_gpu_kern_sum`` of the same report; equal.
- **torch CUDA activity**: the same loop under the torch profiler (its CUDA activity on, as
  the plan sets it on a CUDA topology) vs plain; INFO, with the kernels its trace holds (none
  is a failure).

On a machine without an NVIDIA GPU (or with a CPU-only torch) :func:`missing` says why and
nothing runs.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import pickle
import shutil
import subprocess
from typing import Any, Dict, List, Optional, Tuple

from benchmarks.bounds import Started, deadline_s, run_bounded
from benchmarks.common import ROOT, WORK_DIR, Result, block_ratios, median, python, spread

APP = os.path.join(ROOT, "benchmarks", "gpu_app.py")
GROUP = "actor_rollout_ref"
STEP_GOAL = 1.05
EQUAL_GOAL = 1.001
"""Kernel time and count, reader vs ``nsys stats``: equal (the larger over the smaller, either
way, at most this: rounding of the CSV's nanoseconds aside)."""


def missing() -> Optional[str]:
    """Why the GPU rows cannot run here (None: they can)."""
    if shutil.which("nvidia-smi") is None:
        return "no NVIDIA GPU on this machine (nvidia-smi not found)"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    from verlprof.backends.nsys.cli import find_nsys

    if find_nsys() is None:
        return "nsys is not installed (scripts/install_nsys.sh)"
    return None


def plan_for(tool: str, steps: range, output_dir: str) -> Any:
    """verlprof's plan for one CUDA rank of ``GROUP``: ``tool`` over ``steps``, one window."""
    from verlprof.config.schema import (
        ComponentConfig,
        ComponentsConfig,
        NsysConfig,
        ProfilingConfig,
    )
    from verlprof.config.topology import Topology
    from verlprof.plan import build_plan

    config = ProfilingConfig(
        steps=tuple(steps), continuous_steps=True, tool=tool,  # type: ignore[arg-type]
        output_dir=output_dir, components=ComponentsConfig(actor=ComponentConfig(ranks=(0,))),
        nsys=NsysConfig(trigger="cuda", worker_options={"trace": "cuda,nvtx"}))
    return build_plan(config, Topology.of({GROUP: 1}, cuda=True))


def _app(argv: List[str], env: Dict[str, str], what: str, steps: int) -> Dict[int, float]:
    """One app process (``argv`` ends with its output JSON): its step times."""
    out = argv[-1]
    with Started("gpu") as started:
        proc = started.popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
        text, _ = started.communicate(proc, deadline_s(300, 2.0, steps), what)
    if proc.returncode != 0 or not os.path.exists(out):
        raise RuntimeError(f"{what}: exit {proc.returncode}: {text.strip()[-300:]}")
    with open(out) as handle:
        return {int(s): t for s, t in json.load(handle)["times"].items()}


def _reports(output_dir: str) -> List[str]:
    """Paths of the ``ok`` reports of the manifest under ``output_dir``."""
    for folder, _, names in os.walk(output_dir):
        if "manifest.json" in names:
            with open(os.path.join(folder, "manifest.json")) as handle:
                manifest = json.load(handle)
            return [os.path.join(folder, r["path"]) for r in manifest["reports"]
                    if r["status"] == "ok"]
    raise RuntimeError(f"no manifest.json under {output_dir}")


def run(rounds: int = 2, steps: int = 30, warmup: int = 10, log=print) -> List[Result]:
    work = os.path.join(WORK_DIR, "gpu")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ)
    cal = run_bounded("gpu", [python(), APP, "calibrate"], deadline_s(600), "gpu: calibrate",
                      env=env, cwd=ROOT)
    if cal.returncode != 0:
        raise RuntimeError(f"gpu calibrate: {cal.stderr.strip()[-300:]}")
    micro = cal.stdout.split()[-1]
    measured = range(warmup + 1, steps + 1)
    times: Dict[str, List[List[float]]] = {"nsys": [], "plain": [], "torch": []}
    last: Dict[str, str] = {}
    log(f"gpu: {micro} micro-batches a step; {rounds} rounds of nsys / plain / torch, "
        f"{steps} steps each, the first {warmup} dropped")
    for r in range(rounds):
        order = ("nsys", "plain", "torch") if r % 2 == 0 else ("torch", "plain", "nsys")
        for side in order:
            folder = os.path.join(work, f"{side}{r}")
            os.makedirs(folder)
            out = os.path.join(folder, "times.json")
            argv, side_env = [python(), APP, "run", str(steps), micro, "-", out], env
            if side != "plain":
                plan = plan_for(side, measured, os.path.join(folder, "run"))
                with open(os.path.join(folder, "plan.pkl"), "wb") as handle:
                    pickle.dump(plan, handle)
                argv[-2] = os.path.join(folder, "plan.pkl")
                process = plan.process(GROUP, 0)
                argv = [*process.launch_argv, *argv]
                side_env = {**env, **process.launch_env}
                last[side] = os.path.join(folder, "run")
            got = _app(argv, side_env, f"gpu: {side} round {r}", steps)
            times[side].append([got[s] for s in measured])
    plain = sum(times["plain"], [])
    rows = [Result("GPU: CUDA step under nsys (cuda,nvtx; cudaProfilerApi) vs plain",
                   median(sum(times["nsys"], [])) / median(plain), STEP_GOAL,
                   samples=block_ratios(times["nsys"], times["plain"]),
                   details=[f"nsys: {spread([t * 1e9 for t in sum(times['nsys'], [])])}",
                            f"plain: {spread([t * 1e9 for t in plain])} (goal holds for a "
                            f"step >= 100 ms)"])]
    rows.append(kernel_columns(_reports(last["nsys"])))
    rows.append(torch_row(times, _reports(last["torch"])))
    return rows


def kernel_columns(reports: List[str]) -> Result:
    """Kernel time and count per report: verlprof's reader vs ``nsys stats``."""
    from verlprof.backends.nsys.read import exported_sqlite, read_nsys_sqlite

    ours, theirs, details = [0, 0], [0, 0], []
    for path in reports:
        sqlite = exported_sqlite(path)
        data = read_nsys_sqlite(sqlite)
        mine = (sum(r.kernel_ns or 0 for r in data.ranges),
                sum(r.kernel_count or 0 for r in data.ranges))
        stats = kern_sum(sqlite)
        details.append(f"{os.path.basename(path)}: reader {mine[0] / 1e6:.3f} ms in {mine[1]} "
                       f"kernels; nsys stats {stats[0] / 1e6:.3f} ms in {stats[1]}")
        ours, theirs = [ours[0] + mine[0], ours[1] + mine[1]], [theirs[0] + stats[0],
                                                                theirs[1] + stats[1]]
    if not reports or not theirs[1]:
        raise RuntimeError(f"no kernels in the nsys reports ({len(reports)} reports)")
    apart = max(max(a, b) / max(min(a, b), 1) for a, b in zip(ours, theirs))
    return Result("GPU: report's kernel time and count vs nsys stats cuda_gpu_kern_sum", apart,
                  EQUAL_GOAL, goal_text="equal (<= 1.001x apart)", details=details)


def kern_sum(sqlite: str) -> Tuple[int, int]:
    """(total kernel ns, kernels) from ``nsys stats``'s kernel summary of ``sqlite``."""
    from verlprof.backends.nsys.cli import find_nsys

    exe = find_nsys() or "nsys"
    for report in ("cuda_gpu_kern_sum", "gpukernsum"):  # the name before nsys 2023.1
        done = run_bounded("gpu", [exe, "stats", "--report", report, "--format", "csv",
                                   "--output", "-", sqlite], deadline_s(300),
                           f"nsys stats --report {report}")
        rows = _csv_rows(done.stdout)
        if done.returncode == 0 and rows is not None:
            return (sum(int(float(r["Total Time (ns)"])) for r in rows),
                    sum(int(r["Instances"]) for r in rows))
    raise RuntimeError(f"nsys stats gave no kernel summary for {sqlite}: "
                       f"{(done.stderr or done.stdout).strip()[-300:]}")


def _csv_rows(text: str) -> Optional[List[Dict[str, str]]]:
    """The CSV table in ``nsys stats`` output (after any notice lines), or None."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Total Time (ns)" in line), None)
    if start is None:
        return None
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def torch_row(times: Dict[str, List[List[float]]], reports: List[str]) -> Result:
    """The torch profiler with CUDA activity: step time vs plain, and its trace's kernels."""
    kernels = 0
    for path in reports:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as handle:
            events = json.load(handle).get("traceEvents", [])
        kernels += sum(1 for e in events if e.get("cat") == "kernel")
    if not kernels:
        raise RuntimeError(f"the torch traces hold no CUDA kernel ({len(reports)} traces)")
    torch_times = sum(times["torch"], [])
    return Result("GPU: CUDA step under the torch profiler (CUDA activity) vs plain",
                  median(torch_times) / median(sum(times["plain"], [])), None,
                  samples=block_ratios(times["torch"], times["plain"]),
                  details=[f"torch: {spread([t * 1e9 for t in torch_times])}",
                           f"{kernels} CUDA kernels in {len(reports)} trace(s)"])
