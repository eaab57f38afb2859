"""How many bytes a plan's reports will take, per step window, against
``trainer.profiler.max_total_bytes``.

Every figure is in :data:`REPORT_BYTES`, one row per kind of report, with where it comes from.
A report's size depends most on what is traced (CUDA activity dwarfs the CPU-side ranges) and on
how long its window stays open, which no plan knows; so the figures are per step a window
covers, taken from a measured or published report, and the run replaces them by what it
measures once its first reports are written (:mod:`verlprof.runtime.size_budget`). Before the
run they decide one thing: a budget that holds not even the first window is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Sequence, Tuple, get_args

from verlprof.config.options import pop_option
from verlprof.config.schema import ProfilingConfig
from verlprof.config.size_budget import human_bytes
from verlprof.config.topology import Topology
from verlprof.errors import ConfigError
from verlprof.plan_model import ControllerPlan, ProcessPlan, SizeKind, SizePlan
from verlprof.records import Mode, StepWindow, Tool

KIB, MIB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class ReportSize:
    """Estimated bytes of one report per step its window covers, and their source."""

    bytes_per_step: int
    basis: str


_NSYS_CPU = 256 * KIB
_NSYS_CUDA = 192 * MIB
_TORCH_CPU = 1 * MIB
_TORCH_CUDA = 150 * MIB
_PHASES = 4
"""Annotated phase calls of one process in a PPO step (a discrete report holds one)."""

REPORT_BYTES: Mapping[Tuple[Tool, Mode, bool], ReportSize] = {
    ("nsys", "whole", False): ReportSize(_NSYS_CPU, (
        "measured: 156 KiB per report of a ~1 s CPU-only demo step traced nvtx,osrt "
        "(tests/docs/fixtures/quickstart_run), with room for a busier step")),
    ("nsys", "whole", True): ReportSize(_NSYS_CUDA, (
        "published: about 190 MB per nsys report of one step of a GPU serving rank with CUDA "
        "traced (issue 37)")),
    ("nsys", "discrete", False): ReportSize(_NSYS_CPU // _PHASES, (
        f"the whole-step figure over the {_PHASES} annotated phase calls of a PPO step")),
    ("nsys", "discrete", True): ReportSize(_NSYS_CUDA // _PHASES, (
        f"the whole-step figure over the {_PHASES} annotated phase calls of a PPO step")),
    ("torch", "whole", False): ReportSize(_TORCH_CPU, (
        "measured: 20 KiB gzipped for 1 s of a small model's training on CPU (7 iterations), "
        "with room for a step of many more operators")),
    ("torch", "whole", True): ReportSize(_TORCH_CUDA, (
        "published: about 150 MB of torch trace per GPU rank per step (issue 37)")),
    ("torch", "discrete", False): ReportSize(_TORCH_CPU // _PHASES, (
        f"the whole-step figure over the {_PHASES} annotated phase calls of a PPO step")),
    ("torch", "discrete", True): ReportSize(_TORCH_CUDA // _PHASES, (
        f"the whole-step figure over the {_PHASES} annotated phase calls of a PPO step")),
    # rocprof-sys: nothing measured here (no AMD GPU); taken as nsys tracing the same
    ("rocprof_sys", "whole", False): ReportSize(_NSYS_CPU, "taken as nsys (not measured)"),
    ("rocprof_sys", "whole", True): ReportSize(_NSYS_CUDA, "taken as nsys (not measured)"),
    ("rocprof_sys", "discrete", False): ReportSize(_NSYS_CPU // _PHASES,
                                                   "taken as nsys (not measured)"),
    ("rocprof_sys", "discrete", True): ReportSize(_NSYS_CUDA // _PHASES,
                                                  "taken as nsys (not measured)"),
}
"""Bytes of one report per step of its window, by (tool, mode, GPU activity traced)."""

AUTO_RAISE_UPTO = 5
"""An ``auto`` budget (a tenth of the free space) below the first window's estimate is raised
to it while that is at most 5x the budget (half the free space); beyond, it is refused."""

CONTROLLER_KIND: Tuple[Tool, Mode, bool] = ("nsys", "whole", False)
"""The controller's own report: nsys on a process that drives the workers (no CUDA)."""


def traces_gpu(tool: Tool, config: ProfilingConfig, topology: Topology) -> bool:
    """Whether ``tool``'s worker reports hold GPU activity: the workers have CUDA and the
    tool traces it (nsys: ``cuda`` among ``trace``, its default; torch: ``torch.cuda``)."""
    if not topology.cuda:
        return False
    if tool == "nsys":
        _, trace = pop_option(dict(config.nsys.worker_options), "trace")
        return trace is None or "cuda" in str(trace).split(",")
    if tool == "torch":
        return config.torch.cuda is not False
    return True


def kind_name(tool: str, mode: str, gpu: bool) -> str:
    return f"{tool} {'whole-step' if mode == 'whole' else mode}, " \
           f"{'CUDA traced' if gpu else 'CPU only'}"


def size_plan(config: ProfilingConfig, topology: Topology, processes: Sequence[ProcessPlan],
              controller: ControllerPlan, windows: Sequence[StepWindow]) -> SizePlan:
    """The estimate of every step window's reports, and the budget to hold it against."""
    budget = config.max_total_bytes
    per_window = [0] * len(windows)
    kinds: Dict[str, List] = {}  # name → [reports, bytes per step, basis]
    where = {step: i for i, window in enumerate(windows) for step in window}

    def add(name: str, size: ReportSize, steps: StepWindow) -> None:
        index = where.get(steps[0])
        if index is None:
            return
        per_window[index] += size.bytes_per_step * len(steps)
        kinds.setdefault(name, [0, size.bytes_per_step, size.basis])[0] += 1

    gpu: Dict[Tool, bool] = {tool: traces_gpu(tool, config, topology) for tool in get_args(Tool)}
    for process in processes:
        key: Tuple[Tool, Mode, bool] = (process.backend, process.mode, gpu[process.backend])
        for window in process.windows:
            add(kind_name(*key), REPORT_BYTES[key], window.steps)
    if controller.launch_argv:
        for steps in controller.windows:
            add("nsys controller, CPU only", REPORT_BYTES[CONTROLLER_KIND], steps)
    limit, basis = budget if isinstance(budget, int) else None, config.max_total_bytes_basis
    first = per_window[0] if per_window else 0
    if limit is not None and basis and limit < first <= limit * AUTO_RAISE_UPTO:
        # auto holds the first window while it fits in half the free space: the default
        # budget never leaves a run with nothing; the measured sizes govern from there
        limit, basis = first, f"{basis}, raised to hold the first window"
    return SizePlan(max_total_bytes=limit, basis=basis, window_bytes=tuple(per_window),
                    kinds=tuple(SizeKind(kind=name, reports=n, bytes_per_step=each, basis=basis)
                                for name, (n, each, basis) in kinds.items()))


def check_budget(size: SizePlan, windows: Sequence[StepWindow]) -> None:
    """One line naming the key when the budget holds not even the first window."""
    if size.max_total_bytes is None or not size.window_bytes:
        return
    first = size.window_bytes[0]
    if first <= size.max_total_bytes:
        return
    steps = ",".join(map(str, windows[0]))
    given = human_bytes(size.max_total_bytes) + (f" ({size.basis})" if size.basis else "")
    raise ConfigError(size.key, f"{given} holds not even the first window: step(s) [{steps}] "
                                f"make about {human_bytes(first)} of reports (verlprof plan "
                                "shows the estimate); raise it, profile fewer ranks, or set it "
                                "to null for no budget")


__all__ = ["CONTROLLER_KIND", "REPORT_BYTES", "ReportSize", "check_budget", "kind_name",
           "size_plan", "traces_gpu"]
