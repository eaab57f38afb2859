"""``python -m verlprof.bridges.verl <main_ppo's command line>``: verl's ``main_ppo``, profiled.

The launcher runs verl's own entry point (its Hydra config, checks and ``run_ppo``) with one
seam changed: ``run_ppo(config, task_runner_class)``. Before verl starts anything:

1. the plan is made from the user's config (verl's keys: ``global_profiler``, role blocks);
2. verl's own step list is cleared, so verl itself wraps no process and starts no capture
   (it would put every rank of every pool under nsys, and start ranks it does not select);
3. the TaskRunner (verl's controller process) is launched as the plan says: under nsys with its
   capture bounded to the profiled steps when controller options are set, with the environment
   that loads the bridge in every process, and with the bridge attached before verl's ``run``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, cast

from omegaconf import DictConfig, OmegaConf, open_dict

from verlprof.bridges.verl.bridge import attach, plan_of
from verlprof.bridges.verl.command_line import (
    ENTRY,
    ENTRY_CONFIG_NAME,
    CommandLine,
    compose,
    read_command_line,
)
from verlprof.bridges.verl.driver_side import active_bridge, bridge_env
from verlprof.bridges.verl.messages import (
    EXIT_BAD_INPUT,
    EXIT_NOTHING_PROFILED,
    hydra_error_line,
    nothing_profiled,
    verlprof_error,
)
from verlprof.bridges.verl.patching import wrap_once
from verlprof.errors import ConfigError
from verlprof.manifest import read_manifest
from verlprof.plan import ProfilePlan
from verlprof.plan.render import render_plan
from verlprof.runtime.ownership import claim_output
from verlprof.runtime.preflight import preflight
from verlprof.runtime.ray_options import controller_options
from verlprof.runtime.teardown import LATE_AGENTS_WAIT_S, end_late_agents

STEP_KEYS = ("global_profiler.steps", "trainer.profile_steps")
"""Where verl reads its profiled steps (0.6+, then the older layouts)."""


def prepare(config: DictConfig) -> ProfilePlan:
    """Plan ``config`` and clear verl's step list in it, in place. The config is resolved as
    verl's TaskRunner resolves it, so that the role blocks' interpolations are read. (The
    plan keeps what it was built from: the bridge plans again from it when verl builds pools
    the config did not predict.)"""
    resolved = OmegaConf.to_container(config, resolve=True)
    plan = plan_of(cast(Dict[str, Any], resolved))
    with open_dict(config):
        for key in STEP_KEYS:
            if OmegaConf.select(config, key) is not None:
                OmegaConf.update(config, key, None, merge=False)
    return plan


def _runner_class(base: Any, plan: ProfilePlan) -> type:
    """A subclass of verl's TaskRunner whose ``run`` attaches the bridge first (the plan travels
    with the class: Ray ships a class defined here by value)."""

    class VerlprofTaskRunner(base):
        def run(self, config: Any, *args: Any, **kwargs: Any) -> Any:
            bridge = attach(config, plan=plan)
            try:
                return super().run(config, *args, **kwargs)
            finally:
                if active_bridge() is bridge:  # fit() ended it already unless it never ran
                    bridge.finish()

    VerlprofTaskRunner.__qualname__ = VerlprofTaskRunner.__name__ = f"Verlprof{base.__name__}"
    return VerlprofTaskRunner


class TaskRunnerLauncher:
    """What ``run_ppo`` expects of ``task_runner_class`` (``.remote()`` and
    ``.options(...).remote()``), launching verl's TaskRunner as the plan says."""

    def __init__(self, task_runner_class: Any, plan: ProfilePlan,
                 run_env: Optional[Dict[str, str]] = None):
        import ray

        base = getattr(task_runner_class, "__ray_actor_class__", task_runner_class)
        defaults = dict(getattr(task_runner_class, "_default_options", {}) or {})
        self.plan = plan
        self.run_env = dict(run_env or {})  # the controller adopts the driver's claim
        runner = _runner_class(base, plan)
        self.actor_class = ray.remote(**defaults)(runner) if defaults else ray.remote(runner)

    def options(self, **options: Any) -> _Bound:
        return _Bound(self, options)

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return _Bound(self, {}).remote(*args, **kwargs)

    def launch_options(self, options: Dict[str, Any]) -> Dict[str, Any]:
        """verl's options without its ``nsight``, plus the plan's controller launch and the
        bridge's environment."""
        runtime_env = dict(options.get("runtime_env") or {})
        runtime_env.pop("nsight", None)
        runtime_env = controller_options(self.plan, runtime_env)["runtime_env"]
        runtime_env["env_vars"] = {**bridge_env(runtime_env.get("env_vars")), **self.run_env}
        return {**options, "runtime_env": runtime_env}


class _Bound:
    def __init__(self, launcher: TaskRunnerLauncher, options: Dict[str, Any]):
        self.launcher, self.options = launcher, options

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        options = self.launcher.launch_options(self.options)
        return self.launcher.actor_class.options(**options).remote(*args, **kwargs)


def wrap_run_ppo(run_ppo: Callable[..., Any]) -> Callable[..., Any]:
    """verl's ``run_ppo(config, task_runner_class)``, profiled by verlprof. A verlprof error,
    here or in the TaskRunner, is one line and exit 2 (Hydra passes ``SystemExit`` through);
    a run whose plan selected ranks and that wrote no report of them exits 3, saying why."""

    def run_ppo_profiled(config: DictConfig, task_runner_class: Any = None,
                         *args: Any, **kwargs: Any) -> Any:
        try:
            # the output directory is this run's before verl starts anything, and a refused
            # nsys option is said before the claim moves an earlier run aside
            plan = prepare(config)
            preflight(plan)
            run = claim_output(plan)
            with run:
                try:
                    result = run_ppo(config, TaskRunnerLauncher(task_runner_class, run.plan,
                                                                run.env()), *args, **kwargs)
                except BaseException:  # one look, no wait: an error or ^C should end now
                    _last_look(run.plan, wait_s=0.0)
                    raise
                _last_look(run.plan)  # the workers and replicas went with the TaskRunner
        except Exception as err:
            ours = verlprof_error(err)
            if ours is None:
                raise
            print(f"verlprof: {ours}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT) from None
        _exit_if_nothing_profiled(run.plan)
        return result

    run_ppo_profiled.__wrapped__ = run_ppo  # type: ignore[attr-defined]
    return run_ppo_profiled


def _last_look(plan: ProfilePlan, wait_s: float = LATE_AGENTS_WAIT_S) -> None:
    late = end_late_agents(plan.output_dir, wait_s).agents_line()
    if late:
        print(f"verlprof: {late}", flush=True)


def _exit_if_nothing_profiled(plan: ProfilePlan) -> None:
    # a rank armed for nsys on demand and never asked has no window to report
    selected = [f"{p.group} rank {p.rank}" for p in plan.processes if p.windows]
    if not selected:
        return
    try:
        manifest = read_manifest(plan.output_dir)
    except (OSError, ValueError) as err:
        why: Optional[str] = f"no manifest in {plan.output_dir} ({err})"
    else:
        why = nothing_profiled(manifest, selected)
    if why is not None:
        print(f"verlprof: {why}", file=sys.stderr)
        raise SystemExit(EXIT_NOTHING_PROFILED)


def install_launcher() -> Tuple[Any, Optional[Any]]:
    """Route verl's ``main_ppo.run_ppo`` through :func:`wrap_run_ppo`; this process and the
    local Ray cluster it starts load the bridge. Returns (main_ppo module, previous run_ppo)."""
    os.environ.update(bridge_env())
    from verl.trainer import main_ppo

    previous = main_ppo.run_ppo
    wrap_once(main_ppo, "run_ppo", wrap_run_ppo)
    return main_ppo, previous


def compose_verl_config(overrides: Sequence[str], config_name: str = ENTRY_CONFIG_NAME
                        ) -> DictConfig:
    """verl's trainer config from the installed verl, composed as ``main_ppo`` composes it."""
    return compose(read_command_line([f"--config-name={config_name}", *overrides]))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m verlprof.bridges.verl`` with the command line of ``python -m
    verl.trainer.main_ppo`` (Hydra's flags and overrides: see ``command_line``); ``--plan``,
    wherever it stands, prints what would be profiled and runs nothing. The config is composed
    once before verl starts, so that a line Hydra refuses is one line (exit 2) instead of
    Hydra's tracebacks."""
    try:
        line = read_command_line(list(sys.argv[1:] if argv is None else argv))
    except ConfigError as err:
        print(f"verlprof: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if line.shows and not line.plan_only:  # --cfg, --info, --help: Hydra's; nothing runs
        return _run_main_ppo(line, profiled=False)
    try:
        config = compose(line)
        if line.plan_only:
            render_plan(prepare(config))
            return 0
    except ConfigError as err:
        print(f"verlprof: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as err:  # Hydra's own: an unknown key, a bad override, a missing config
        if not type(err).__module__.startswith(("hydra", "omegaconf")):
            raise
        why = hydra_error_line(err, _base_config(line))
        if type(err).__name__ == "MissingConfigException":  # say where it was looked for
            why += f" (config path: {line.config_path})"
        print(f"verlprof: {why}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _run_main_ppo(line, profiled=True)


def _base_config(line: CommandLine) -> Optional[DictConfig]:
    """The line's config without its overrides, where the keys a refused one missed are."""
    try:
        return compose(line, overrides=())
    except Exception:  # noqa: BLE001 - no config to suggest keys from
        return None


def _run_main_ppo(line: CommandLine, profiled: bool) -> int:
    """verl's own ``main_ppo.main`` (its ``@hydra.main``: output directory, logging, checks)
    on ``line``, through the launcher when ``profiled``."""
    if profiled:
        install_launcher()
    from verl.trainer import main_ppo
    argv = sys.argv
    sys.argv = [argv[0] if argv else ENTRY, *line.hydra_argv()]
    try:
        main_ppo.main()
    finally:
        sys.argv = argv
    return 0
