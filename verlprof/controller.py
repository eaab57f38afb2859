"""The controller: executes the plan's step windows against the live worker groups.

::

    controller = ProfileController(plan)            # logs host and pid
    controller.register_group("actor_rollout_ref", actors)
    for step in range(1, total + 1):
        with controller.step(step):
            ...                                      # the trainer's step
    manifest = controller.finalize()                 # reports gathered, manifest written

Only the planned ranks receive RPCs, in parallel, with a timeout; a failure names the rank.
``step`` always stops what it started, also on exceptions and KeyboardInterrupt.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from verlprof import nvtx, paths
from verlprof.collect import move_all, unreachable_entries
from verlprof.errors import ProfilingRuntimeError
from verlprof.manifest import Manifest, ProcessInfo, ReportEntry, write_manifest
from verlprof.plan import ProfilePlan

logger = logging.getLogger("verlprof")
Target = Tuple[str, int]


class ProfileController:
    """Drives start/stop of the planned windows and gathers the reports at the end."""

    def __init__(self, plan: ProfilePlan, *, rpc_timeout_s: float = 120.0,
                 finalize_timeout_s: float = 300.0, echo: bool = True):
        self.plan = plan
        self.rpc_timeout_s = rpc_timeout_s
        self.finalize_timeout_s = finalize_timeout_s
        self.host, self.pid = socket.gethostname(), os.getpid()
        self._actors: Dict[Target, Any] = {}
        self._identity: Dict[Target, Dict[str, Any]] = {}
        self._started: Dict[Target, Tuple[int, ...]] = {}
        self._done_windows: set = set()
        self._failed: Dict[Target, str] = {}
        self._warnings: List[str] = list(plan.warnings)
        self._finalized: Optional[Manifest] = None
        self._controller = _ControllerCapture(plan)
        if self._controller.attached:
            # nsys does not create its -o directory: it would write to /tmp instead
            os.makedirs(os.path.join(plan.output_dir, paths.CONTROLLER_DIR), exist_ok=True)
        if plan.controller.launch_argv and not self._controller.attached:
            self._warnings.append(
                "trainer.controller_nsight_options is set but this controller does not run "
                "under nsys; start it with verlprof.launch.controller_options(plan)")
        line = f"verlprof controller: host={self.host} pid={self.pid}"
        logger.info(line)
        if echo:
            print(line, flush=True)

    # -- wiring ----------------------------------------------------------------------------
    def register_group(self, name: str, actors: Sequence[Any]) -> None:
        """Attach a worker group (``actors[r]`` is rank ``r``); configures its planned ranks."""
        group = next((g for g in self.plan.groups if g.name == name), None)
        if group is None:
            raise ProfilingRuntimeError(f"group {name!r} is not in the plan "
                                        f"({', '.join(g.name for g in self.plan.groups)})")
        if len(actors) != group.world_size:
            raise ProfilingRuntimeError(f"group {name!r} has {len(actors)} actors but the plan "
                                        f"expects world size {group.world_size}")
        targets = []
        for process in self.plan.processes:
            if process.group == name:
                self._actors[(name, process.rank)] = actors[process.rank]
                targets.append((name, process.rank))
        plans = {(p.group, p.rank): p for p in self.plan.processes}
        statuses = self._fanout("verlprof_configure", targets,
                                lambda t: (plans[t],))
        self._identity.update(statuses)

    @property
    def targets(self) -> List[Target]:
        """Registered planned processes, in plan order."""
        return [(p.group, p.rank) for p in self.plan.processes
                if (p.group, p.rank) in self._actors]

    # -- steps -----------------------------------------------------------------------------
    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Profile ``step`` as planned: open windows that start here, close those that end."""
        window = self.plan.window_starting_at(step)
        if window is not None and window not in self._done_windows:
            self._done_windows.add(window)
            self._controller.open(window)
            self._start(window)
        with self._controller.range(f"step/{step}"):
            try:
                yield
            except BaseException:
                self.stop_all()
                raise
        if self.plan.window_ending_at(step) is not None:
            self.stop_all()

    @contextmanager
    def range(self, label: str) -> Iterator[None]:
        """A controller-side range ``controller/<label>`` (recorded in the controller report)."""
        with self._controller.range(f"controller/{label}"):
            yield

    def _start(self, window: Tuple[int, ...]) -> None:
        targets = [t for t in self.targets if t not in self._failed]
        for target in targets:
            self._started[target] = window
        try:
            self._fanout("start_profile", targets, lambda t: (window,))
        except BaseException:
            self.stop_all()
            raise

    def stop_all(self) -> None:
        """Stop every window this controller started (idempotent; never raises for a rank)."""
        started, self._started = self._started, {}
        self._controller.close()
        targets = [t for t in started if t not in self._failed]
        if targets:
            try:
                self._fanout("stop_profile", targets, lambda t: (started[t],))
            except ProfilingRuntimeError as err:
                self._warnings.append(str(err))
                logger.warning("%s", err)

    # -- end of run ------------------------------------------------------------------------
    def finalize(self, timeout_s: Optional[float] = None) -> Manifest:
        """Stop everything, gather every report into output_dir, write and return the manifest."""
        if self._finalized is not None:
            return self._finalized
        self.stop_all()
        timeout = self.finalize_timeout_s if timeout_s is None else timeout_s
        items: List[Dict[str, Any]] = []
        alive = [t for t in self.targets if t not in self._failed]
        results = self._fanout("finalize_profiles", alive, lambda t: (timeout,),
                               timeout_s=timeout + 30, raise_errors=False)
        plans = {(p.group, p.rank): p for p in self.plan.processes}
        for target in self.targets:
            if target in results:
                items.extend(results[target])
            else:
                items.extend(unreachable_entries(plans[target], self._identity.get(target, {}),
                                                 self._failed.get(target, "no answer")))
        entries = move_all(items, self._actors, self.plan.output_dir, _node_id())
        entries += self._controller.collect(timeout)
        manifest = self._manifest(entries)
        write_manifest(manifest, self.plan.output_dir)
        self._finalized = manifest
        return manifest

    def wait_for_profilers(self, timeout_s: float = 120.0) -> List[str]:
        """Call after the workers have exited, before ``ray.shutdown()``: waits until each
        wrapped process's profiler has finished writing and ended (see :mod:`verlprof.teardown`).
        Returns problems, one line each (also recorded as warnings)."""
        from verlprof.teardown import settle_on_nodes

        by_node: Dict[str, List[int]] = {}
        for identity in self._identity.values():
            if identity.get("profiler_pid"):
                by_node.setdefault(identity.get("node_id", ""), []).append(
                    int(identity["profiler_pid"]))
        problems = settle_on_nodes(by_node, timeout_s)
        self._warnings.extend(problems)
        return problems

    def __enter__(self) -> ProfileController:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.finalize()

    def _manifest(self, entries: List[ReportEntry]) -> Manifest:
        from verlprof import __version__

        processes = tuple(ProcessInfo(g, r, i.get("host", ""), int(i.get("pid", 0)),
                                      i.get("node_id", ""), bool(i.get("under_profiler")))
                          for (g, r), i in self._identity.items())
        return Manifest(
            tool=self.plan.tool, output_dir=self.plan.output_dir,
            step_windows=self.plan.step_windows, reports=tuple(entries),
            controller=ProcessInfo("controller", 0, self.host, self.pid, _node_id(),
                                   self._controller.attached),
            processes=processes, groups={g.name: g.world_size for g in self.plan.groups},
            source=self.plan.source, warnings=tuple(dict.fromkeys(self._warnings)),
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            verlprof_version=__version__)

    # -- fan-out ---------------------------------------------------------------------------
    def _fanout(self, method: str, targets: Sequence[Target], args, *,
                timeout_s: Optional[float] = None, raise_errors: bool = True
                ) -> Dict[Target, Any]:
        """Call ``method`` on every target in parallel; name the ranks that fail or are late."""
        if not targets:
            return {}
        import ray

        refs = {getattr(self._actors[t], method).remote(*args(t)): t for t in targets}
        timeout = self.rpc_timeout_s if timeout_s is None else timeout_s
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        results: Dict[Target, Any] = {}
        errors: List[str] = []
        try:
            for target, value in zip([refs[r] for r in ready], ray.get(ready)):
                results[target] = value
        except Exception:  # find which rank failed: ask each ref on its own
            for ref in ready:
                try:
                    results[refs[ref]] = ray.get(ref)
                except Exception as err:
                    group, rank = refs[ref]
                    self._failed[refs[ref]] = f"{type(err).__name__}: {_first_line(err)}"
                    errors.append(f"{group} rank {rank}: {method} failed: "
                                  f"{self._failed[refs[ref]]}")
        for ref in late:
            group, rank = refs[ref]
            errors.append(f"{group} rank {rank}: {method} did not answer within {timeout:g}s")
        if errors:
            for line in errors:
                logger.error("verlprof: %s", line)
            self._warnings.extend(errors)
            if raise_errors:
                failed = [refs[r] for r in late] + [refs[r] for r in ready
                                                     if refs[r] not in results]
                group, rank = failed[0]
                raise ProfilingRuntimeError("; ".join(errors), group=group, rank=rank)
        return results


class _ControllerCapture:
    """The controller's own nsys window, when this process runs under the plan's nsys argv."""

    def __init__(self, plan: ProfilePlan):
        self.plan = plan
        self.attached = bool(plan.controller.launch_argv) and nvtx.get_emitter().enabled
        self._handle: Any = None
        self._windows: List[Tuple[int, ...]] = []

    def open(self, window: Tuple[int, ...]) -> None:
        if self.attached and self._handle is None:
            self._handle = nvtx.capture_open()
            self._windows.append(window)

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            nvtx.capture_close(handle)

    @contextmanager
    def range(self, label: str) -> Iterator[None]:
        if self._handle is None:
            yield
            return
        emitter = nvtx.get_emitter()
        handle = emitter.range_start(label)
        try:
            yield
        finally:
            emitter.range_end(handle)

    def collect(self, timeout_s: float) -> List[ReportEntry]:
        """Entries for the controller's planned windows (its reports are written in place)."""
        if not self.attached:
            return []
        from verlprof.backends.nsys import ordinals
        from verlprof.backends.nsys_cli import wait_for_reports

        self.close()
        opened = list(self._windows)
        # like a worker, close the plan out so nsys writes its repeat:N reports now
        fillers = [w for w in self.plan.controller.windows if w not in opened]
        for window in fillers:
            self.open(window)
            self.close()
        base = paths.CONTROLLER_OUTPUT_FORMAT.replace("%h", socket.gethostname()).replace(
            "%p", str(os.getpid()))
        pattern = os.path.join(self.plan.output_dir, paths.CONTROLLER_DIR, base + ".*nsys-rep")
        waited = wait_for_reports(pattern, len(self.plan.controller.windows), timeout_s)
        by_ordinal = ordinals([str(p) for p in waited.found])
        entries = []
        for n, window in enumerate(opened + fillers, start=1):
            path = by_ordinal.get(n)
            if n > len(opened):
                if path:
                    os.remove(path)
                path, reason = None, f"controller window {list(window)} never opened"
            else:
                reason = None if path else f"nsys wrote no report within {timeout_s:g}s"
            relpath = (os.path.relpath(path, self.plan.output_dir) if path else
                       f"{paths.CONTROLLER_DIR}/{base}.{n}{paths.EXTENSIONS['nsys']}")
            entries.append(ReportEntry(
                steps=window, group="controller", rank=0, component="controller",
                backend="nsys", path=relpath, status="ok" if path else "missing",
                host=socket.gethostname(), pid=os.getpid(), node_id=_node_id(),
                bytes=os.path.getsize(path) if path else 0, reason=reason,
                transfer="direct" if path else None))
        return entries


def _node_id() -> str:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except Exception:
        return ""


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[-1] if text else type(err).__name__
