"""How each tool's selected processes start: the planning half of a backend, kept in the planner.

A pure function per tool from (config, topology, group, rank, window count) to a
:class:`~verlprof.plan_model.Launch`: argv, environment, capture options. The backends execute
these launches (preflight, capture, reading) and never build them, so the planner imports no
backend and the plan stays a function of the config alone.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Callable, Dict, List, Optional

from verlprof import paths
from verlprof.config.schema import ProfilingConfig
from verlprof.config.topology import GroupTopology, Topology
from verlprof.plan.nsys_argv import check_trace_has_nvtx, nsys_argv, resolve_trigger
from verlprof.plan.rocprof_argv import rocprof_argv, rocprof_env
from verlprof.plan_model import NSYS_NVTX_ENV, Launch, TorchCapture
from verlprof.records import NSYS_OWNER_ENV, Tool

ROCPROF_ARGS_KEY = "trainer.profiler.rocprof_sys.args"

QUIET_KINETO = {"KINETO_LOG_LEVEL": "6"}
"""PyTorch's profiler library (Kineto) prints ``USDT: ... profiler_start`` and
``profiler_stop`` on every window in every profiled process (level 5, above its errors at 4);
6 keeps the console the trainer's. A profiler that fails still shows: its window's report is
``missing`` with the reason (docs/backends.md)."""

WorkerLaunch = Callable[[ProfilingConfig, Topology, GroupTopology, int, int, List[str]], Launch]


def check_tool(config: ProfilingConfig, topology: Topology) -> None:
    """Refuse, with a ConfigError naming the key, a config the tool cannot honour (nsys: the
    trace must name nvtx, the trigger must work on this device). Once per profiled plan."""
    if config.tool == "nsys":
        key = config.nsys.worker_options_key
        check_trace_has_nvtx(config.nsys.worker_options, key)
        resolve_trigger(config.nsys, key, topology.cuda)


def _owner_env(config: ProfilingConfig) -> Dict[str, str]:
    return {NSYS_OWNER_ENV: config.output_dir}


def _nsys_worker(config: ProfilingConfig, topology: Topology, group: GroupTopology, rank: int,
                 windows: int, warnings: List[str]) -> Launch:
    key = config.nsys.worker_options_key
    trigger, _ = resolve_trigger(config.nsys, key, topology.cuda)
    argv = nsys_argv(config.nsys, options=config.nsys.worker_options,
                     flags=config.nsys.worker_flags, options_key=key, trigger=trigger,
                     windows=windows, output=paths.raw_prefix(config.output_dir, group.name, rank),
                     cpu_only=not topology.cuda, warnings=warnings)
    env = dict(NSYS_NVTX_ENV) if trigger == "nvtx" else {}
    return Launch(argv=argv, env={**env, **_owner_env(config)}, trigger=trigger,
                  open_ended=not windows)


def _torch_worker(config: ProfilingConfig, topology: Topology, group: GroupTopology, rank: int,
                  windows: int, warnings: List[str]) -> Launch:
    return Launch(capture_options=TorchCapture(**asdict(config.torch)), env=dict(QUIET_KINETO))


def _rocprof_worker(config: ProfilingConfig, topology: Topology, group: GroupTopology,
                    rank: int, windows: int, warnings: List[str]) -> Launch:
    return Launch(argv=rocprof_argv(config.rocprof_sys, ROCPROF_ARGS_KEY),
                  env=rocprof_env(config.rocprof_sys, config.output_dir, group.name, rank))


WORKER_LAUNCH: Dict[Tool, WorkerLaunch] = {
    "nsys": _nsys_worker, "torch": _torch_worker, "rocprof_sys": _rocprof_worker}
"""How a selected process ``(group, rank)`` that opens ``windows`` windows starts, by tool."""


def worker_launch(config: ProfilingConfig, topology: Topology, group: GroupTopology, rank: int,
                  windows: int, warnings: List[str]) -> Launch:
    """The launch of one selected worker process under ``config.tool``."""
    return WORKER_LAUNCH[config.tool](config, topology, group, rank, windows, warnings)


def controller_launch(config: ProfilingConfig, topology: Topology, windows: int,
                      warnings: List[str]) -> Optional[Launch]:
    """How the controller starts under nsys, or None when it is not profiled (no controller
    options, or another tool). It always uses the nvtx trigger: it does no GPU work of its own."""
    if config.tool != "nsys" or not config.nsys.controller_options:
        return None
    key = config.nsys.controller_options_key
    check_trace_has_nvtx(config.nsys.controller_options, key)
    argv = nsys_argv(config.nsys, options=config.nsys.controller_options,
                     flags=config.nsys.controller_flags, options_key=key, trigger="nvtx",
                     windows=windows, output=paths.controller_prefix(config.output_dir),
                     cpu_only=not topology.cuda, warnings=warnings)
    return Launch(argv=argv, env={**NSYS_NVTX_ENV, **_owner_env(config)}, trigger="nvtx")
