"""``verlprof demo``: the PPO-shaped trainer on a local Ray cluster, on CPU, profiled.

The backend is nsys with the nvtx trigger when nsys is installed, else the torch profiler.
It prints the controller's host and pid, the output directory and every report.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence

from verlprof.config import load_config
from verlprof.demo.default_config import DEFAULT_CONFIG
from verlprof.demo.local_ray import choose_token_auth
from verlprof.demo.local_ray import ray_address as ray_address_for
from verlprof.demo.settings import DemoSettings, demo_settings
from verlprof.errors import ConfigError
from verlprof.plan import ProfilePlan, build_plan
from verlprof.records import ProcessIdentity
from verlprof.runtime.teardown import LATE_AGENTS_WAIT_S, end_late_agents
from verlprof.safe_text import one_line, visible


class RayStartError(RuntimeError):
    """Ray could not be started or reached: one line, exit 1 (``verlprof.cli``)."""

    def __init__(self, address: Optional[str], err: BaseException):
        where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
        first = one_line(err, 300) or type(err).__name__
        super().__init__(f"demo: could not start or reach {where} ({type(err).__name__}: "
                         f"{first}); nothing was profiled. On a loaded machine, try again; "
                         "to use a running cluster pass --ray-address (or RAY_ADDRESS)")

def plan_demo(config_path: Optional[str], overrides: Sequence[str] = ()):
    """Load the config and plan it, falling back to torch when nsys is not installed."""
    from verlprof.backends.nsys.cli import find_nsys
    from verlprof.config.schema import NsysConfig

    path = config_path or str(DEFAULT_CONFIG)
    if not os.path.exists(path):
        raise ConfigError("--config", f"{path} not found (without --config the demo runs its "
                                      "own config; `verlprof init-config FILE` writes a copy)")
    loaded = load_config(path, list(overrides))
    notes: List[str] = []
    executable = loaded.profiling.nsys.executable
    if loaded.profiling.tool == "nsys" and find_nsys(executable) is None:
        if executable != NsysConfig.executable:  # the user named one: use it or say why not
            raise ConfigError("trainer.profiler.nsys.executable",
                              f"nsys executable {executable!r} not found")
        notes.append("nsys is not installed here: the demo uses the torch profiler instead "
                     "(for nsys reports install Nsight Systems; in a verlprof checkout "
                     "`make nsys` does)")
        loaded = load_config(path, [*overrides, "++trainer.profiler.tool=torch"])
    return loaded, build_plan(loaded.profiling, loaded.topology), notes


def run_trainer(loaded, plan: ProfilePlan, *, ray_address: Optional[str] = None,
                start_timeout_s: float = 300.0, runner_class: Any = None) -> Dict[str, Any]:
    """Start Ray (unless connected already), run the trainer as a TaskRunner, shut down.

    Before anything starts, and before the output directory is claimed (an earlier run in it
    moved aside), :func:`verlprof.runtime.preflight.preflight` checks the output directory and
    dry-runs each nsys command (a bad option is one clear line, not a hung worker). SIGTERM
    or Ctrl-C of this process is passed to the controller as SIGTERM: it stops every open
    window and finalises the reports; this function then waits for that (bounded), lets every
    profiler finish, shuts Ray down and re-raises (:class:`ProfilingTerminated` for SIGTERM).
    ``runner_class``: the controller actor (default the demo's
    :class:`~verlprof.demo.trainer.TaskRunner`; same ``identity``/``run`` methods).

    First of all the run claims its output directory
    (:func:`verlprof.runtime.ownership.claim_output`): one line and nothing started when it
    holds another run, or ``<output_dir>/<run id>/`` with ``existing_run=new_subdir``. The
    result's ``run_id`` and ``output_dir`` say which; the lock goes when this returns.
    """
    from verlprof.runtime.ownership import claim_output
    from verlprof.runtime.preflight import preflight

    settings = demo_settings(loaded.raw)  # a bad demo key: one line, before anything starts
    preflight(plan)  # a refused nsys option moves no earlier run aside
    with claim_output(plan) as claim:  # before anything starts; released however this ends
        for note in claim.notes:  # an earlier run moved aside, a stale lock taken over
            print(f"verlprof: warning: {visible(note)}", file=sys.stderr, flush=True)
        return {**_run_claimed(settings, claim.plan, claim.env(), ray_address=ray_address,
                               start_timeout_s=start_timeout_s, runner_class=runner_class),
                "run_id": claim.run_id, "output_dir": claim.output_dir}


def _run_claimed(settings: DemoSettings, plan: ProfilePlan, run_env: Dict[str, str], *,
                 ray_address: Optional[str], start_timeout_s: float,
                 runner_class: Any) -> Dict[str, Any]:
    import ray

    from verlprof.demo.trainer import TaskRunner
    from verlprof.runtime.ray_options import controller_options
    from verlprof.runtime.signals import ProfilingTerminated, SignalGuard

    started_ray = not ray.is_initialized()
    if started_ray:
        try:
            ray.init(address=ray_address_for(ray_address), include_dashboard=False,
                     log_to_driver=True, logging_level="WARNING", configure_logging=True)
        except Exception as err:  # a timeout, a refused address: Ray raises many types
            raise RayStartError(ray_address_for(ray_address), err) from None
    guard = SignalGuard()
    guard.install()  # after ray.init, which installs its own SIGTERM handler
    try:
        placement = ({"resources": dict(settings.controller_resources)}
                     if settings.controller_resources else {})
        runner_cls: Any = runner_class or TaskRunner
        # the controller adopts this run's claim (run_env) instead of claiming again
        runner = runner_cls.options(**controller_options(plan, {"env_vars": run_env}),
                                    **placement).remote()
        who: Optional[ProcessIdentity] = None
        aborted = False
        try:
            who = ray.get(runner.identity.remote(), timeout=start_timeout_s)
            run = runner.run.remote(settings, plan, "quick")
            try:
                return ray.get(run)
            except BaseException:
                if guard.received is not None:
                    bound = 2 * plan.policy.rpc_timeout_s + plan.policy.finalize_timeout_s + 90
                    aborted = not _stop_controller(run, who, bound, guard, plan.output_dir)
                raise
        finally:
            with guard.shield():
                if aborted:  # the user asked twice: no more waiting; collect places the rest
                    ray.kill(runner, no_restart=True)
                else:
                    # a normal exit lets the controller's nsys finish before Ray tears down
                    # (Ray #60904)
                    done = runner.__ray_terminate__.remote()
                    ray.wait([done], timeout=60)
                    _settle_controller(who, plan.output_dir)
                # a worker's nsys that finished after its settle looked leaves its agent
                # orphaned only now: this run's (marked) on the driver's node go too
                late = end_late_agents(plan.output_dir,
                                       wait_s=0 if aborted else LATE_AGENTS_WAIT_S).agents_line()
                if late:
                    print(f"verlprof: {late}", flush=True)
    except BaseException:
        if guard.received == signal.SIGTERM:  # also before the run started
            raise ProfilingTerminated(signal.SIGTERM) from None
        raise
    finally:
        guard.restore()
        if started_ray:
            ray.shutdown()


def _stop_controller(run: Any, who: Optional[ProcessIdentity], bound_s: float,
                     guard: Any, output_dir: str) -> bool:
    """Pass a termination on to the controller process and wait (bounded) until it has
    stopped its windows and finalised the reports. A second signal meanwhile stops the wait
    at once (False): the run is left as a job that died, for ``verlprof collect``."""
    import ray

    from verlprof.runtime.teardown import signal_on_node

    if who is None or not who.pid:
        return True
    name = signal.Signals(guard.received).name
    print(f"verlprof: {name}: asking the controller (pid {who.pid}) to stop every window "
          "and finalise the reports (send it again to stop waiting)", file=sys.stderr,
          flush=True)
    first = guard.count
    deadline = time.monotonic() + bound_s
    try:
        with guard.shield():  # a second signal is counted here, not raised
            signal_on_node(who.node_id, who.pid, signal.SIGTERM)
            while guard.count == first and time.monotonic() < deadline:
                if ray.wait([run], timeout=0.5)[0]:
                    return True
    except KeyboardInterrupt:  # a third one raises: the same answer
        pass
    if guard.count == first:
        return True  # the bound ran out: the caller goes on as before
    print(f"verlprof: {signal.Signals(guard.received).name} again: not waiting for the "
          "controller; the reports it did not finalise stay where their processes wrote "
          f"them: `verlprof status {output_dir}`, then `verlprof collect {output_dir}` places "
          "them", file=sys.stderr, flush=True)
    return False


def _settle_controller(who: Optional[ProcessIdentity], output_dir: str) -> None:
    """Wait for the controller's own profiler (if any) to finish writing and exit."""
    from verlprof.runtime.teardown import settle_on_nodes

    if who is not None and who.profiler_pid:
        settled = settle_on_nodes({who.node_id: [who.profiler_pid]}, 60.0, output_dir)
        for line in [*settled.problems, settled.agents_line()]:
            if line:
                print(f"verlprof: {line}", flush=True)


def run_demo(config_path: Optional[str], overrides: Sequence[str] = (),
             ray_address: Optional[str] = None) -> int:
    print(f"verlprof: config: {config_path}" if config_path else
          f"verlprof: config: {DEFAULT_CONFIG} (the demo's default; "
          "`verlprof init-config FILE` writes a copy to edit)", flush=True)
    loaded, plan, notes = plan_demo(config_path, overrides)
    choose_token_auth(ray_address_for(ray_address))  # before anything imports Ray
    for note in notes + list(loaded.warnings) + list(plan.warnings):
        print(f"verlprof: note: {note}")
    if not plan.enabled:
        print("verlprof: profiling is off for this config; running the trainer anyway")
    result = run_trainer(loaded, plan, ray_address=ray_address)
    controller = result["controller"]
    manifest = result["manifest"]
    output_dir = result["output_dir"]  # <output_dir>/<run id>/ with existing_run=new_subdir
    print(f"verlprof controller ran on host={controller['host']} pid={controller['pid']}")
    print(f"verlprof run: {result['run_id']}")
    print(f"verlprof output dir: {output_dir}")
    counts = Counter(entry["status"] for entry in manifest["reports"])
    for line in report_lines(manifest["reports"], output_dir):
        print(line)
    print("verlprof reports: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    print(f"verlprof manifest: {os.path.join(output_dir, 'manifest.json')}")
    if plan.enabled:  # the tables in the terminal, summary/ files and the timeline
        from verlprof.report import summarize
        from verlprof.report.cli import trace_of_report

        summary = summarize(output_dir)  # prints the tables, the files it wrote, next steps
        trace_of_report(output_dir, summary=summary)  # summary/trace.pftrace, as report does
    return 0 if set(counts) <= {"ok"} else 1


LIST_EVERY_REPORT_UP_TO = 12
"""Up to this many reports the demo lists each; above, only those not ``ok`` (at most
:data:`LIST_PROBLEMS_UP_TO`), so that 40 profiled steps do not print 80 paths."""
LIST_PROBLEMS_UP_TO = 20


def report_lines(entries: Sequence[Dict[str, Any]], output_dir: str) -> List[str]:
    """One line per report worth reading here; the manifest lists every one."""
    def line(entry: Dict[str, Any]) -> str:
        where = visible(os.path.join(output_dir, entry["path"]))  # names are data
        if entry["status"] == "ok":
            return f"  {where}"
        return f"  {where}  [{entry['status']}: {visible(str(entry['reason']))}]"

    if len(entries) <= LIST_EVERY_REPORT_UP_TO:
        return [line(e) for e in entries]
    problems = [e for e in entries if e["status"] != "ok"]
    out = [line(e) for e in problems[:LIST_PROBLEMS_UP_TO]]
    if len(problems) > LIST_PROBLEMS_UP_TO:
        out.append(f"  ... and {len(problems) - LIST_PROBLEMS_UP_TO} more not ok "
                   "(manifest.json has each with its reason)")
    ok = len(entries) - len(problems)
    if ok:
        out.append(f"  {ok} ok report(s) under {output_dir} (each listed in manifest.json)")
    return out


if __name__ == "__main__":
    sys.exit(run_demo(sys.argv[1] if len(sys.argv) > 1 else None, sys.argv[2:]))
