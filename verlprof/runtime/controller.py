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

import logging
import os
import socket
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

from verlprof import paths
from verlprof.backends.nsys.controller_capture import ControllerCapture
from verlprof.errors import ProfilingRuntimeError
from verlprof.manifest import Manifest
from verlprof.plan_model import ProfilePlan
from verlprof.records import (
    ON_RANK_FAILURE,
    OnRankFailure,
    ProcessIdentity,
    SessionStatus,
    StepWindow,
    Target,
    WorkerReport,
)
from verlprof.runtime import finish_hook, ownership, placement, request_windows, summarise
from verlprof.runtime.collect import collect_at_exit, unreachable_reports
from verlprof.runtime.output_guard import OutputGuard
from verlprof.runtime.preflight import preflight as check_before_start
from verlprof.runtime.rank_rpc import RankCalls, RankRPC, describe_error
from verlprof.runtime.run_context import RunContext
from verlprof.runtime.signals import ProfilingTerminated, SignalGuard
from verlprof.runtime.teardown import settle_on_nodes
from verlprof.safe_text import visible
from verlprof.worker.identity import node_id

__all__ = ["ON_RANK_FAILURE", "ProfileController", "ProfilingTerminated", "describe_error"]

logger = logging.getLogger("verlprof")


class ProfileController:
    """Drives start/stop of the planned windows and gathers the reports at the end.

    ``on_rank_failure``, ``rpc_timeout_s`` and ``finalize_timeout_s`` default to the plan's
    :class:`~verlprof.plan_model.RunPolicy` (``trainer.profiler.*`` in the YAML); an argument
    overrides it. ``on_rank_failure``: ``"continue"`` records a failed or dead rank, stops
    profiling it and carries on; ``"raise"`` stops the other windows and raises
    :class:`~verlprof.errors.ProfilingRuntimeError` naming the rank. ``handle_signals``: inside
    ``with controller:`` (main thread only) SIGTERM and Ctrl-C stop every window and finalise
    the reports before the signal takes effect. ``preflight``: ``True`` checks the output
    directory and dry-runs each nsys command before any worker starts (see
    :func:`verlprof.runtime.preflight.preflight`), ``"quick"`` skips the dry run, ``False`` checks
    nothing. ``rpc``: the layer that reaches the ranks (default: Ray actor calls; tests pass
    :class:`~verlprof.runtime.local_rpc.InProcessRanks`); its timeout is set as above.
    ``requests``: where capture requests arrive (default: the Ray desk, runtime/request_desk.py).
    """

    def __init__(self, plan: ProfilePlan, *, rpc_timeout_s: Optional[float] = None,
                 finalize_timeout_s: Optional[float] = None, echo: bool = True,
                 on_rank_failure: Optional[OnRankFailure] = None, handle_signals: bool = True,
                 preflight: Union[bool, str] = True, preflight_timeout_s: float = 60.0,
                 rpc: Optional[RankRPC] = None, requests: Optional[Any] = None):
        policy = plan.policy
        on_rank_failure = policy.on_rank_failure if on_rank_failure is None else on_rank_failure
        if on_rank_failure not in ON_RANK_FAILURE:
            raise ValueError(f"on_rank_failure must be one of {', '.join(ON_RANK_FAILURE)}, "
                             f"not {on_rank_failure!r}")
        # this run's output directory (maybe <output_dir>/<run id>/), or one line refusing it
        self.run = run = ownership.adopt_or_claim(plan)
        plan = run.plan
        self.finalize_timeout_s = (policy.finalize_timeout_s if finalize_timeout_s is None
                                   else finalize_timeout_s)
        self.handle_signals = handle_signals
        self.echo = echo
        self.host, self.pid = socket.gethostname(), os.getpid()
        timeout = policy.rpc_timeout_s if rpc_timeout_s is None else rpc_timeout_s
        rpc = RankCalls(timeout) if rpc is None else rpc
        rpc.rpc_timeout_s = timeout  # an injected layer follows the same policy
        self.context = RunContext(plan, run, rpc, on_rank_failure=on_rank_failure,
                                  host=self.host, pid=self.pid,
                                  warnings=list(plan.warnings) + list(run.notes))
        """What capture requests and the verl bridge share with the controller."""
        self._rpc: RankRPC = rpc
        self._started: Dict[Target, StepWindow] = {}
        self._stopped: List[Tuple[Dict[Target, StepWindow], Set[Target]]] = []
        self._next: Dict[Target, Optional[StepWindow]] = {}
        self._open: Optional[StepWindow] = None
        self._done_windows: Set[StepWindow] = set()
        self._finalized: Optional[Manifest] = None
        self._signals = SignalGuard(hold_s=self.finalize_timeout_s)
        line = f"verlprof controller: host={visible(self.host)} pid={self.pid}"
        logger.info(line)
        if echo:
            print(line, flush=True)
        if preflight:
            check_before_start(plan, timeout_s=preflight_timeout_s, dry_run=preflight != "quick")
        self._output = OutputGuard(plan, echo=echo, warn=self.context.warnings.append)
        self._controller = ControllerCapture(plan)
        self.context.under_profiler = self._controller.attached
        if self._controller.attached:
            # nsys does not create its -o directory: it would write to /tmp instead
            os.makedirs(os.path.join(plan.output_dir, paths.CONTROLLER_DIR), exist_ok=True)
        unwrapped = self._controller.unwrapped_warning()
        if unwrapped is not None:
            self.context.warnings.append(unwrapped)
        self._on_demand = request_windows.serve_requests(  # off: a no-op
            self.context, requests, self._output.budget)
        self._summaries = summarise.NodeSummaries(self.context, echo=echo)
        # closed windows' reports leave their node while the job runs
        self._placement = placement.Placement(self.context, targets=lambda: self.targets,
                                              gathered=lambda: self._on_demand.gathered)

    @property
    def plan(self) -> ProfilePlan:
        """The plan being executed (capture requests extend it while the job runs)."""
        return self.context.plan

    @property
    def on_rank_failure(self) -> OnRankFailure:
        return self.context.on_rank_failure

    @property
    def rpc_timeout_s(self) -> float:
        """How long an RPC to a rank is waited for (finalize waits longer)."""
        return self._rpc.rpc_timeout_s

    # -- wiring ----------------------------------------------------------------------------
    def register_group(self, name: str, actors: Sequence[Any]) -> None:
        """Attach a worker group (``actors[r]`` is rank ``r``); configures its planned ranks."""
        group = self.plan.group(name)
        if group is None:
            raise ProfilingRuntimeError(f"group {name!r} is not in the plan "
                                        f"({', '.join(g.name for g in self.plan.groups)})")
        if len(actors) != group.world_size:
            raise ProfilingRuntimeError(f"group {name!r} has {len(actors)} actors but the plan "
                                        f"expects world size {group.world_size}")
        plans = {(name, p.rank): p for p in self.plan.processes if p.group == name}
        targets = list(plans)
        self._rpc.actors.update((t, actors[t[1]]) for t in targets)
        self._on_demand.register(name, actors)
        self.context.registered = [(p.group, p.rank) for p in self.plan.processes
                                   if (p.group, p.rank) in self._rpc.actors]
        statuses, errors = self._rpc.call("verlprof_configure", targets, lambda t: (plans[t],))
        for target, status in statuses.items():
            reply: SessionStatus = status
            self.context.identity[target] = reply.identity
            self._next[target] = reply.next
        self.context.on_errors(errors)
        self.context.clocks.measure(self._rpc, targets)

    def replan(self, plan: ProfilePlan) -> ProfilePlan:
        """Follow ``plan``, planned again on the groups verl built: before the first step only,
        and leaving registered processes as planned."""
        if plan.output_dir != self.plan.output_dir:
            plan = ownership.retarget(plan, self.plan.output_dir)
        changed = [t for t in self.context.registered
                   if plan.process(*t) != self.plan.process(*t)]
        if self._done_windows or changed:
            raise ProfilingRuntimeError(f"no new plan after a step or for registered {changed}")
        self.context.plan = plan
        return plan

    def note(self, *lines: str) -> None:
        """Warnings: logged and kept in the manifest."""
        self.context.note(*lines)

    @property
    def targets(self) -> List[Target]:
        """Registered planned processes, in plan order, then those added on demand."""
        return self.context.registered + self._on_demand.added

    @property
    def failed_ranks(self) -> Dict[Target, str]:
        """(group, rank) → why, for every rank that died (it is never asked again). Ranks whose
        RPC raised or timed out are named in the log and warnings, and are still asked."""
        return dict(self._rpc.failed)

    @property
    def placed_while_running(self) -> int:
        """Reports placed in output_dir so far while the job runs (``trainer.profiler.place``:
        always 0 with ``at_end``)."""
        return len(self._placement.placed)

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
        if window is not None and window not in self._done_windows \
                and self._output.window_may_open(window, self.on_rank_failure == "raise",
                                                 self.plan):  # the budget: plan as followed
            self._done_windows.add(window)
            self._open = window
            with self._controller.opening(window):  # overlaps the workers' start
                self._start(window)
        with self._on_demand.step(step), self._controller.range(f"step/{step}"):
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

    def _start(self, window: StepWindow) -> None:
        """Start ``window`` on every live target. A worker whose next planned window is this
        one (as mirrored in ``_next``) gets ``verlprof_start()`` without arguments: Ray
        serialises each argument of each call, which made a start+stop fan-out cost about 1.37x
        a bare no-op fan-out instead of about 1.0x (benchmarks/p2_fanout.py). The mirror holds
        because each worker runs this controller's calls in order; a rank with an error gets
        the explicit form until it answers again."""
        targets = self.context.live(self.context.registered)
        # also the late ones: their stop must follow their start
        self._started.update(dict.fromkeys(targets, window))
        self._placement.opened(window, targets)
        mirrored = list(map(self._next.get, targets))
        explicit = set() if mirrored.count(window) == len(targets) else \
            {t for t, n in zip(targets, mirrored) if n != window}
        following = self.plan.window_after(window)
        try:
            _, errors = self._rpc.call("verlprof_start", targets,
                                       lambda t: (window,) if t in explicit else ())
            self._next.update(dict.fromkeys(targets, following))
            for target, _ in errors:
                self._next[target] = None
            self.context.on_errors(errors)
        except BaseException:
            with self._signals.shield():
                self.stop_all(raise_errors=False)
            raise

    def stop_all(self, raise_errors: Optional[bool] = None) -> None:
        """Stop every window this controller started (idempotent). A rank that fails is named
        and recorded; it raises only when ``on_rank_failure="raise"`` (or ``raise_errors``).
        ``verlprof_stop()`` goes without arguments (it closes what is armed), as in ``_start``."""
        started, self._started = self._started, {}
        self._open = None
        targets = self.context.live(list(started))
        unclosed = set(started).difference(targets) if len(targets) < len(started) else set()
        self._stopped.append((started, unclosed))  # for what a rank that dies later left
        try:
            if targets:
                # each stop's answer is a clock reading too: one per window, for the trace
                _, errors = self.context.clocks.call(self._rpc, "verlprof_stop", targets)
                unclosed.update(target for target, _ in errors)
                for target, _ in errors:
                    self._next[target] = None
                self.context.on_errors(errors, raise_errors)
        finally:  # the workers' windows first: none of them takes in this process's close
            self._placement.closed(started, unclosed)
            self._controller.close()

    # -- end of run ------------------------------------------------------------------------
    def finalize(self, timeout_s: Optional[float] = None) -> Manifest:
        """Stop everything, gather every report into output_dir, write and return the manifest.

        Never raises for a rank: a rank that cannot be asked has its reports marked
        ``missing`` with the reason. A second call returns the first manifest.
        """
        if self._finalized is not None:
            return self._finalized
        with self._signals.shield():
            if self._signals.received is not None:  # said in the manifest, not only the log
                self.note(self._signals.stopped_by())
            self._on_demand.finish()  # requests not taken yet are refused
            self.stop_all(raise_errors=False)
            timeout = self.finalize_timeout_s if timeout_s is None else timeout_s
            items: List[WorkerReport] = []
            alive, cut = self.context.live(self.targets), ""
            margin = min(30.0, 5.0 + timeout / 10)
            try:
                results, errors = self._rpc.call("verlprof_finalize", alive, lambda t: (timeout,),
                                                 timeout_s=timeout + margin, wait_busy=True)
            except KeyboardInterrupt as err:  # a held signal came due: the manifest still goes
                cut = self._signals.cut_short(err)
                results, errors = {}, [(t, cut) for t in alive]
            self.context.on_errors(errors, False)
            why = {t: msg for t, msg in errors}
            local_node, plans = node_id(), {(p.group, p.rank): p for p in self.plan.processes}
            for target in self.targets:
                if target in results:
                    items.extend(results[target])
                    self.note(*(n for item in results[target] for n in item.notes))
                    continue
                died = self._rpc.failed.get(target)  # then what it wrote may be placed
                sent = [(s[target], target not in unclosed) for s, unclosed in self._stopped
                        if died and target in s]
                items.extend(unreachable_reports(
                    plans[target],
                    self.context.identity.get(target, ProcessIdentity(host="", pid=0)),
                    died or why.get(target, "no answer"), sent, self.plan.tool, local_node,
                    0 if cut else timeout))
            entries = self._placement.merge(items, self._rpc.actors, local_node,
                                            0.0 if cut else min(60.0, timeout))
            entries += self._on_demand.gathered  # gathered while the job ran
            entries += self._controller.collect(0 if cut else timeout, local_node)
            entries = self._output.before_manifest(entries)
            manifest = self._summaries.finish(self.context.write(self.context.manifest(entries)),
                                              bool(cut))
            if self.plan.finish_hook is not None:
                manifest = finish_hook.into_manifest(self.plan.finish_hook, manifest, self.plan,
                                                     self.context.identity, self.echo,
                                                     self.context.write)
                self.context.warnings[:] = manifest.warnings  # with the hook's failures
            self._finalized = manifest
            self.run.release()
        if cut:  # now that the manifest is written
            raise self._signals.interruption()
        return manifest

    def wait_for_profilers(self, timeout_s: float = 120.0,
                           only: Optional[Set[Target]] = None) -> List[str]:
        """Call after the workers exited, before ``ray.shutdown()``: waits until each wrapped
        process's profiler has ended (runtime/teardown.py; ``only``: those of these targets),
        gathers what a tool wrote at exit (rocprof-sys) into the manifest (:meth:`finalize`
        then returns it); problems, one each."""
        by_node: Dict[str, List[int]] = {}
        for target, identity in self.context.identity.items():
            if identity.profiler_pid and (only is None or target in only):
                by_node.setdefault(identity.node_id, []).append(identity.profiler_pid)
        settled = settle_on_nodes(by_node, timeout_s, self.plan.output_dir)
        if settled.ended_agents:  # housekeeping after nsys, not a problem of the run
            logger.info("verlprof: %s", settled.agents_line())
        problems = list(settled.problems)
        if self._finalized is not None:  # output written at exit (rocprof-sys): gather it now
            manifest, late = collect_at_exit(self._finalized, self.plan, timeout_s, node_id())
            if manifest is not self._finalized:  # finalize() now returns the rewritten one
                self._finalized = self.context.write(manifest)
            problems += late
        self.context.warnings.extend(problems)
        return problems

    # -- with controller: ... ---------------------------------------------------------------
    def install_signal_handlers(self) -> bool:
        """Route SIGTERM and Ctrl-C through the controller (main thread only; ``with
        controller:`` does this when ``handle_signals``); whether anything was installed."""
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
        except KeyboardInterrupt:  # the held signal came due or a second one came: passed on
            if self._signals.received is None:
                raise
        finally:
            self.run.release()
            received = self._signals.restore()
        if received is not None:
            self._signals.pass_on()
