"""The controller: executes the plan's step windows against the live worker groups.

::

    controller = ProfileController(plan)            # logs host and pid; preflight checks
    controller.register_group("actor_rollout_ref", actors)
    with controller:                                 # SIGTERM/Ctrl-C: stop, finalize, exit
        for step in range(1, total + 1):
            with controller.step(step):
                ...                                  # the trainer's step
    manifest = controller.finalize()                 # reports gathered, manifest written

Only the planned ranks receive RPCs, in parallel, with a timeout; a failure names the rank.
``step`` always stops what it started, also on exceptions and KeyboardInterrupt.

What happens under faults (docs/reliability.md, proved by tests/faults/):

* A rank that dies or whose RPC fails is named in one line (``<group> rank <R>: ...``), in the
  log and the manifest's warnings. ``on_rank_failure="continue"`` (default) stops profiling a
  dead rank and carries on: its reports become ``missing`` with the reason. ``"raise"`` stops
  every other window and raises :class:`~verlprof.errors.ProfilingRuntimeError` (``.group``,
  ``.rank``) at the next step boundary.
* An RPC that does not answer within ``rpc_timeout_s`` (a rank busy in a long call) is named and
  never waited for twice: later RPCs are still sent, so they run in order when the rank is free
  (a late start is always followed by its stop), but the controller does not block on them.
* A planned window opens at most once per controller: a step repeated or going backwards (a
  retry, a checkpoint resume) captures nothing new; a step outside the open window closes it; a
  step after the last window and any step after :meth:`finalize` do nothing.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import signal
import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from verlprof import nvtx, paths
from verlprof.collect import move_all, partial_reports, unreachable_entries
from verlprof.errors import ConfigError, ProfilingRuntimeError
from verlprof.manifest import Manifest, ProcessInfo, ReportEntry, write_manifest
from verlprof.plan import ProfilePlan

logger = logging.getLogger("verlprof")
Target = Tuple[str, int]

ON_RANK_FAILURE = ("continue", "raise")
"""What the controller does when a rank dies or an RPC to it fails or times out."""

MIN_FREE_BYTES = 64 << 20
"""Preflight: the output directory needs at least this much free space."""


class ProfilingTerminated(KeyboardInterrupt):
    """Raised in the controller's main thread on SIGTERM inside ``with controller:``.

    A :class:`KeyboardInterrupt` so that it also interrupts Ray's blocking calls (``ray.get``
    turns an exception from a signal handler into a ``KeyboardInterrupt``); the controller
    remembers the signal itself, so the type surviving does not matter.
    """

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"received {signal.Signals(signum).name}")


def describe_error(err: BaseException) -> str:
    """One short line for an RPC failure (Ray's messages run over many lines)."""
    try:
        from ray.exceptions import RayActorError, RayTaskError
    except ImportError:  # pragma: no cover - Ray is a dependency
        RayActorError = RayTaskError = ()  # type: ignore[assignment]
    text = " ".join(str(err).split())
    if RayActorError and isinstance(err, RayActorError):
        kind = re.search(r"Worker exit type: (\w+)", text)
        detail = re.search(r"Worker exit detail: (.*?\.)(?:\s|$)", text)
        extra = ", ".join(x for x in (kind and kind.group(1), detail and detail.group(1)) if x)
        return _clip(f"worker process died ({type(err).__name__}{': ' + extra if extra else ''})")
    if RayTaskError and isinstance(err, RayTaskError) and getattr(err, "cause", None) is not None:
        err = err.cause
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    name = type(err).__name__
    return _clip(last if last.startswith(name) else f"{name}: {last}" if last else name)


def _clip(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_death(err: BaseException) -> bool:
    try:
        from ray.exceptions import ActorUnavailableError, RayActorError
    except ImportError:  # pragma: no cover
        return False
    return isinstance(err, RayActorError) and not isinstance(err, ActorUnavailableError)


# -------------------------------------------------------------------------------- preflight

_PREFLIGHT_OK: set = set()
"""Launch argvs (output options stripped) that passed a dry run in this process."""


def preflight(plan: ProfilePlan, *, timeout_s: float = 60.0, dry_run: bool = True,
              min_free_bytes: int = MIN_FREE_BYTES) -> None:
    """Check, before any worker starts, what would otherwise fail silently or hang later.

    * the output directory can be created and written, and has ``min_free_bytes`` free;
    * each profiler executable exists;
    * ``nsys`` accepts each distinct launch command: a trial run of ``python -c pass`` under
      it, bounded by ``timeout_s`` (like Ray's nsight plugin, but with a timeout and no agent
      left behind; a passing argv is remembered for the life of the process).

    Raises :class:`~verlprof.errors.ConfigError` (one line naming the setting) on the first
    problem. Runs on the calling node only: other nodes are assumed to look alike.
    """
    if not plan.enabled:
        return
    _check_output_dir(plan.output_dir, min_free_bytes)
    launches: List[Tuple[str, Tuple[str, ...]]] = []
    if plan.controller.launch_argv:
        launches.append((plan.controller_options_key, tuple(plan.controller.launch_argv)))
    launches += [(plan.worker_options_key, tuple(p.launch_argv)) for p in plan.processes
                 if p.launch_argv]
    if plan.tool == "nsys":
        from verlprof.backends.nsys import check_launch_argv, dry_run_key

        for key, argv in launches:
            cache_key = dry_run_key(argv)
            if cache_key in _PREFLIGHT_OK:
                continue
            problem = check_launch_argv(argv, timeout_s=timeout_s, dry_run=dry_run)
            if problem is not None:
                exe_key = "trainer.profiler.nsys.executable"
                raise ConfigError(exe_key if problem.startswith("nsys executable") else key,
                                  problem)
            if dry_run:
                _PREFLIGHT_OK.add(cache_key)
    elif plan.tool == "rocprof_sys":
        import shutil

        for _, argv in launches[:1]:
            if shutil.which(argv[0]) is None and not os.access(argv[0], os.X_OK):
                raise ConfigError("trainer.profiler.rocprof_sys.executable",
                                  f"{argv[0]!r} not found")


def _check_output_dir(output_dir: str, min_free_bytes: int) -> None:
    key = "trainer.profiler.output_dir"
    try:
        os.makedirs(output_dir, exist_ok=True)
        probe = os.path.join(output_dir, f".verlprof-probe-{os.getpid()}")
        try:
            with open(probe, "wb") as handle:
                handle.write(b"\0" * 65536)
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            if os.path.exists(probe):
                os.remove(probe)
        stat = os.statvfs(output_dir)
    except OSError as err:
        raise ConfigError(key, f"{output_dir} is not writable: {err.strerror or err}") from None
    free = stat.f_bavail * stat.f_frsize
    if free < min_free_bytes:
        raise ConfigError(key, f"{output_dir} has only {_size(free)} free; reports need at "
                               f"least {_size(min_free_bytes)}")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


# ------------------------------------------------------------------------------ signals


class _SignalGuard:
    """SIGTERM and Ctrl-C inside ``with controller:``: turned into an exception in the main
    thread so that open windows are stopped and reports finalised; the signal is then passed
    on. Installed only in the main thread, and never over an ignored signal or over someone
    else's SIGINT handler. While reports are being finalised the first signal is held back."""

    def __init__(self) -> None:
        self.previous: Dict[int, Any] = {}
        self.received: Optional[int] = None
        self._shield = 0
        self._held = 0

    @property
    def installed(self) -> bool:
        return bool(self.previous)

    def install(self) -> bool:
        if self.previous or threading.current_thread() is not threading.main_thread():
            return False
        for sig in (signal.SIGTERM, signal.SIGINT):
            current = signal.getsignal(sig)
            if current in (signal.SIG_IGN, None):
                continue
            if sig == signal.SIGINT and current is not signal.default_int_handler:
                continue
            self.previous[sig] = current
            signal.signal(sig, self._handle)
        return bool(self.previous)

    def restore(self) -> Optional[int]:
        """Put the previous handlers back; return the signal received meanwhile, if any."""
        if threading.current_thread() is threading.main_thread():
            for sig, handler in self.previous.items():
                if signal.getsignal(sig) == self._handle:
                    signal.signal(sig, handler)
        previous, self.previous = self.previous, {}
        self._previous_after_restore = previous
        return self.received

    @contextmanager
    def shield(self) -> Iterator[None]:
        self._shield += 1
        try:
            yield
        finally:
            self._shield -= 1

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None or signum == signal.SIGTERM:
            self.received = signum
        if self._shield and self._held == 0:
            self._held += 1
            logger.warning("verlprof: %s received while finalising reports; finishing first "
                           "(send it again to abort)", signal.Signals(signum).name)
            return
        if signum == signal.SIGTERM:
            raise ProfilingTerminated(signum)
        raise KeyboardInterrupt

    def pass_on(self) -> None:
        """After finalising: act on the signal received as its previous handler would."""
        signum, self.received = self.received, None
        previous = getattr(self, "_previous_after_restore", {})
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        if signum == signal.SIGTERM:
            handler = previous.get(signal.SIGTERM, signal.SIG_DFL)
            if callable(handler):
                handler(signal.SIGTERM, None)  # e.g. Ray's worker handler: exits the actor
            raise SystemExit(128 + signal.SIGTERM)


class ProfileController:
    """Drives start/stop of the planned windows and gathers the reports at the end.

    ``on_rank_failure``: ``"continue"`` (default) records a failed or dead rank, stops
    profiling it and carries on; ``"raise"`` stops the other windows and raises
    :class:`~verlprof.errors.ProfilingRuntimeError` naming the rank. ``handle_signals``: inside
    ``with controller:`` (main thread only) SIGTERM and Ctrl-C stop every window and finalise
    the reports before the signal takes effect. ``preflight``: ``True`` checks the output
    directory and dry-runs each nsys command before any worker starts (see :func:`preflight`),
    ``"quick"`` skips the dry run, ``False`` checks nothing.
    """

    def __init__(self, plan: ProfilePlan, *, rpc_timeout_s: float = 120.0,
                 finalize_timeout_s: float = 300.0, echo: bool = True,
                 on_rank_failure: str = "continue", handle_signals: bool = True,
                 preflight: Union[bool, str] = True, preflight_timeout_s: float = 60.0):
        if on_rank_failure not in ON_RANK_FAILURE:
            raise ValueError(f"on_rank_failure must be one of {', '.join(ON_RANK_FAILURE)}, "
                             f"not {on_rank_failure!r}")
        self.plan = plan
        self.rpc_timeout_s = rpc_timeout_s
        self.finalize_timeout_s = finalize_timeout_s
        self.on_rank_failure = on_rank_failure
        self.handle_signals = handle_signals
        self.host, self.pid = socket.gethostname(), os.getpid()
        self._actors: Dict[Target, Any] = {}
        self._identity: Dict[Target, Dict[str, Any]] = {}
        self._started: Dict[Target, Tuple[int, ...]] = {}
        self._next: Dict[Target, Optional[Tuple[int, ...]]] = {}
        self._open: Optional[Tuple[int, ...]] = None
        self._done_windows: set = set()
        self._failed: Dict[Target, str] = {}
        self._busy: Dict[Target, Tuple[str, Any, float]] = {}
        self._warnings: List[str] = list(plan.warnings)
        self._finalized: Optional[Manifest] = None
        self._signals = _SignalGuard()
        line = f"verlprof controller: host={self.host} pid={self.pid}"
        logger.info(line)
        if echo:
            print(line, flush=True)
        if preflight:
            _preflight(plan, timeout_s=preflight_timeout_s, dry_run=preflight != "quick")
        self._controller = _ControllerCapture(plan)
        if self._controller.attached:
            # nsys does not create its -o directory: it would write to /tmp instead
            os.makedirs(os.path.join(plan.output_dir, paths.CONTROLLER_DIR), exist_ok=True)
        if plan.controller.launch_argv and not self._controller.attached:
            self._warnings.append(
                "trainer.controller_nsight_options is set but this controller does not run "
                "under nsys; start it with verlprof.launch.controller_options(plan)")

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
        statuses, errors = self._fanout("verlprof_configure", targets, lambda t: (plans[t],))
        self._identity.update(statuses)
        for target, status in statuses.items():
            self._next[target] = tuple(status["next"]) if status.get("next") else None
        self._on_errors(errors)

    @property
    def targets(self) -> List[Target]:
        """Registered planned processes, in plan order."""
        return [(p.group, p.rank) for p in self.plan.processes
                if (p.group, p.rank) in self._actors]

    @property
    def failed_ranks(self) -> Dict[Target, str]:
        """(group, rank) → why, for every rank that died (it is never asked again). Ranks whose
        RPC raised or timed out are named in the log and the manifest's warnings, and are still
        asked (their later calls run in order once they are free)."""
        return dict(self._failed)

    # -- steps -----------------------------------------------------------------------------
    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Profile ``step`` as planned: open windows that start here, close those that end.

        Idempotent across repeats: a window opens at most once, so a repeated or backwards
        step (retry, checkpoint resume) records nothing new; a step outside the open window
        closes it first. After :meth:`finalize` it does nothing.
        """
        if self._finalized is not None:
            yield
            return
        if self._open is not None and step not in self._open:
            self.stop_all()
        window = self.plan.window_starting_at(step)
        if window is not None and window not in self._done_windows:
            self._done_windows.add(window)
            self._open = window
            self._controller.open(window)
            self._start(window)
        with self._controller.range(f"step/{step}"):
            try:
                yield
            except BaseException:
                with self._signals.shield():
                    self.stop_all(raise_errors=False)
                raise
        if self._open is not None and self._open[-1] == step:
            self.stop_all()

    @contextmanager
    def range(self, label: str) -> Iterator[None]:
        """A controller-side range ``controller/<label>`` (recorded in the controller report)."""
        with self._controller.range(f"controller/{label}"):
            yield

    def _start(self, window: Tuple[int, ...]) -> None:
        """Start ``window`` on every live target. A worker whose next planned window is this
        one (as mirrored in ``_next``) gets ``start_profile()`` without arguments: Ray
        serialises each argument of each call, which made a start+stop fan-out cost about 1.37x
        a bare no-op fan-out instead of about 1.0x (benchmarks/p2_fanout.py). The mirror holds
        because each worker runs this controller's calls in order; a rank with an error gets
        the explicit form until it answers again."""
        targets = [t for t in self.targets if t not in self._failed]
        for target in targets:  # also the late ones: their stop must follow their start
            self._started[target] = window
        implicit = {t for t in targets if self._next.get(t) == window}
        following = self.plan.window_after(window)
        try:
            _, errors = self._fanout("start_profile", targets,
                                     lambda t: () if t in implicit else (window,))
            for target in targets:
                self._next[target] = following
            for target, _ in errors:
                self._next[target] = None
            self._on_errors(errors)
        except BaseException:
            with self._signals.shield():
                self.stop_all(raise_errors=False)
            raise

    def stop_all(self, raise_errors: Optional[bool] = None) -> None:
        """Stop every window this controller started (idempotent). A rank that fails is named
        and recorded; it raises only when ``on_rank_failure="raise"`` (or ``raise_errors``).
        ``stop_profile()`` goes without arguments (it closes what is armed), as in ``_start``."""
        started, self._started = self._started, {}
        self._open = None
        self._controller.close()
        targets = [t for t in started if t not in self._failed]
        if targets:
            _, errors = self._fanout("stop_profile", targets, lambda t: ())
            for target, _ in errors:
                self._next[target] = None
            self._on_errors(errors, raise_errors)

    # -- end of run ------------------------------------------------------------------------
    def finalize(self, timeout_s: Optional[float] = None) -> Manifest:
        """Stop everything, gather every report into output_dir, write and return the manifest.

        Never raises for a rank: a rank that cannot be asked has its reports marked
        ``missing`` with the reason. A second call returns the first manifest.
        """
        if self._finalized is not None:
            return self._finalized
        with self._signals.shield():
            self.stop_all(raise_errors=False)
            timeout = self.finalize_timeout_s if timeout_s is None else timeout_s
            items: List[Dict[str, Any]] = []
            alive = [t for t in self.targets if t not in self._failed]
            margin = min(30.0, 5.0 + timeout / 10)
            results, errors = self._fanout("finalize_profiles", alive, lambda t: (timeout,),
                                           timeout_s=timeout + margin, wait_busy=True)
            self._on_errors(errors, False)
            why = {t: msg for t, msg in errors}
            plans = {(p.group, p.rank): p for p in self.plan.processes}
            for target in self.targets:
                if target in results:
                    items.extend(results[target])
                    continue
                identity = self._identity.get(target, {})
                reason = self._failed.get(target) or why.get(target, "no answer")
                partial = partial_reports(plans[target], identity)
                if partial:
                    where = os.path.relpath(os.path.dirname(partial[0]), self.plan.output_dir)
                    reason += f"; {len(partial)} uncollected file(s) left in {where}"
                items.extend(unreachable_entries(plans[target], identity, reason))
            entries = move_all(items, self._actors, self.plan.output_dir, _node_id())
            entries += self._controller.collect(timeout)
            manifest = self._manifest(entries)
            try:
                write_manifest(manifest, self.plan.output_dir)
            except OSError as err:
                raise ProfilingRuntimeError(
                    f"cannot write {paths.MANIFEST_NAME} to {self.plan.output_dir}: "
                    f"{err.strerror or err}") from None
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

    # -- with controller: ... ---------------------------------------------------------------
    def install_signal_handlers(self) -> bool:
        """Route SIGTERM and Ctrl-C through the controller (main thread only; ``with
        controller:`` does this when ``handle_signals``). Returns whether anything was
        installed."""
        return self._signals.install()

    def __enter__(self) -> ProfileController:
        if self.handle_signals:
            self.install_signal_handlers()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            with self._signals.shield():
                try:
                    self.finalize()
                except Exception as err:
                    if exc is None:
                        raise
                    logger.error("verlprof: finalize after %s failed: %s",
                                 exc_type.__name__, describe_error(err))
        finally:
            received = self._signals.restore()
        if received is not None:
            self._signals.pass_on()

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
    def _fanout(self, method: str, targets: Sequence[Target], args: Callable[[Target], tuple],
                *, timeout_s: Optional[float] = None, wait_busy: bool = False
                ) -> Tuple[Dict[Target, Any], List[Tuple[Target, str]]]:
        """Call ``method`` on every target in parallel, waiting at most ``timeout_s``.

        Returns (answers, errors); each error is (target, one line). A dead rank is recorded
        in ``failed_ranks``. A target still busy with an earlier unanswered call gets the call
        too (so its calls run in order) but is not waited for unless ``wait_busy``.
        """
        if not targets:
            return {}, []
        import ray

        self._reap_busy()
        timeout = self.rpc_timeout_s if timeout_s is None else timeout_s
        errors: List[Tuple[Target, str]] = []
        refs: Dict[Any, Target] = {}
        for target in targets:
            try:
                refs[getattr(self._actors[target], method).remote(*args(target))] = target
            except Exception as err:  # a handle that cannot even submit
                errors.append((target, f"{method} could not be sent: {describe_error(err)}"))
        now = time.monotonic()
        waited = [r for r, t in refs.items() if wait_busy or t not in self._busy]
        for ref, target in refs.items():
            if ref not in waited:
                first_method, _, since = self._busy[target]
                self._busy[target] = (first_method, ref, since)
                errors.append((target, f"{method} not awaited: still busy since {first_method} "
                                       f"{now - since:.0f}s ago (it runs once the rank is free)"))
        ready, late = (ray.wait(waited, num_returns=len(waited), timeout=timeout)
                       if waited else ([], []))
        results: Dict[Target, Any] = {}
        for ref in ready:
            target = refs[ref]
            self._busy.pop(target, None)
            try:
                results[target] = ray.get(ref)
            except Exception as err:
                why = describe_error(err)
                if _is_death(err):
                    self._failed[target] = why
                    self._busy.pop(target, None)
                errors.append((target, f"{method} failed: {why}"))
        for ref in late:
            target = refs[ref]
            since = self._busy.get(target, (method, None, now))
            self._busy[target] = (since[0], ref, since[2])
            errors.append((target, f"{method} did not answer within {timeout:g}s "
                                   "(busy in a long call, or hung)"))
        return results, errors

    def _reap_busy(self) -> None:
        """Forget ranks whose last unanswered call has finished (noting deaths)."""
        if not self._busy:
            return
        import ray

        for target, (_, ref, _) in list(self._busy.items()):
            ready, _ = ray.wait([ref], timeout=0)
            if ready:
                del self._busy[target]
                try:
                    ray.get(ready[0])
                except Exception as err:
                    if _is_death(err):
                        self._failed[target] = describe_error(err)

    def _on_errors(self, errors: List[Tuple[Target, str]],
                   raise_errors: Optional[bool] = None) -> None:
        """Log and record each error (one line naming the rank); raise per the policy."""
        if not errors:
            return
        lines = [f"{group} rank {rank}: {message}" for (group, rank), message in errors]
        for line in lines:
            logger.error("verlprof: %s", line)
        self._warnings.extend(lines)
        should_raise = self.on_rank_failure == "raise" if raise_errors is None else raise_errors
        if should_raise:
            group, rank = errors[0][0]
            raise ProfilingRuntimeError("; ".join(lines), group=group, rank=rank)


def _preflight(plan: ProfilePlan, *, timeout_s: float, dry_run: bool) -> None:
    """:func:`preflight`, reachable from ``ProfileController.__init__``, whose ``preflight``
    argument shadows the module-level name."""
    preflight(plan, timeout_s=timeout_s, dry_run=dry_run)


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
        from verlprof.backends.nsys import REPORT_POLL_S, ordinals
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
        waited = wait_for_reports(pattern, len(self.plan.controller.windows), timeout_s,
                                  poll_s=REPORT_POLL_S)
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
