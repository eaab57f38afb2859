"""``verlprof demo``: the PPO-shaped trainer on a local Ray cluster, on CPU, profiled.

The backend is nsys with the nvtx trigger when nsys is installed, else the torch profiler.
It prints the controller's host and pid, the output directory and every report.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional, Sequence

from verlprof.config import load_config
from verlprof.errors import ConfigError
from verlprof.plan import ProfilePlan, build_plan

DEFAULT_CONFIG = os.path.join("trainer_configs", "ppo_trainer.yaml")


def plan_demo(config_path: Optional[str], overrides: Sequence[str] = ()):
    """Load the config and plan it, falling back to torch when nsys is not installed."""
    from verlprof.backends.nsys_cli import find_nsys

    path = config_path or DEFAULT_CONFIG
    if not os.path.exists(path):
        raise ConfigError("--config", f"{path} not found; pass --config FILE")
    loaded = load_config(path, list(overrides))
    notes: List[str] = []
    if loaded.profiling.tool == "nsys" and find_nsys(loaded.profiling.nsys.executable) is None:
        notes.append("nsys is not installed here: the demo uses the torch profiler instead "
                     "(`make nsys` installs Nsight Systems)")
        loaded = load_config(path, [*overrides, "++trainer.profiler.tool=torch"])
    return loaded, build_plan(loaded.profiling, loaded.topology), notes


def run_trainer(loaded, plan: ProfilePlan, *, ray_address: Optional[str] = None
                ) -> Dict[str, Any]:
    """Start Ray (unless connected already), run the trainer as a TaskRunner, shut down."""
    import ray

    from verlprof.demo.trainer import TaskRunner
    from verlprof.launch import controller_options

    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(address=ray_address, include_dashboard=False, log_to_driver=True,
                 logging_level="WARNING", configure_logging=True)
    try:
        demo = loaded.raw.get("demo") or {}
        placement = ({"resources": dict(demo["controller_resources"])}
                     if demo.get("controller_resources") else {})
        runner = TaskRunner.options(**controller_options(plan), **placement).remote()
        result = ray.get(runner.run.remote(loaded.raw, plan.to_dict()))
        # a normal exit lets the controller's nsys finish before Ray tears down (Ray #60904)
        done = runner.__ray_terminate__.remote()
        ray.wait([done], timeout=60)
        return result
    finally:
        if started_ray:
            ray.shutdown()


def run_demo(config_path: Optional[str], overrides: Sequence[str] = ()) -> int:
    loaded, plan, notes = plan_demo(config_path, overrides)
    for note in notes + list(loaded.warnings) + list(plan.warnings):
        print(f"verlprof: note: {note}")
    if not plan.enabled:
        print("verlprof: profiling is off for this config; running the trainer anyway")
    result = run_trainer(loaded, plan)
    controller = result["controller"]
    manifest = result["manifest"]
    print(f"verlprof controller ran on host={controller['host']} pid={controller['pid']}")
    print(f"verlprof output dir: {plan.output_dir}")
    counts: Dict[str, int] = {}
    for entry in manifest["reports"]:
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
        where = os.path.join(plan.output_dir, entry["path"])
        suffix = "" if entry["status"] == "ok" else f"  [{entry['status']}: {entry['reason']}]"
        print(f"  {where}{suffix}")
    print("verlprof reports: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    print(f"verlprof manifest: {os.path.join(plan.output_dir, 'manifest.json')}")
    if plan.enabled:
        _summarise(plan.output_dir)
    return 0 if set(counts) <= {"ok"} else 1


def _summarise(output_dir: str) -> None:
    """The cross-rank summary: tables in the terminal, summary/ files and the timeline."""
    from verlprof.report import summarize

    summary = summarize(output_dir)
    for name, path in sorted(summary.paths.items()):
        print(f"verlprof {name}: {path}")


if __name__ == "__main__":
    sys.exit(run_demo(sys.argv[1] if len(sys.argv) > 1 else None, sys.argv[2:]))
