"""The controller's RPC layer for ranks that are plain Python objects in this process.

:class:`InProcessRanks` has the semantics of :class:`~verlprof.runtime.rank_rpc.RankCalls` without
Ray, so that the controller's window logic, its bookkeeping of failed and busy ranks, and
collection run in unit tests and benchmarks (thousands of fake ranks)::

    rpc = InProcessRanks()
    controller = ProfileController(plan, rpc=rpc, preflight=False, handle_signals=False)
    controller.register_group("critic", [Critic(r) for r in range(4)])

A rank answers by returning from its method; the answer is handed over as is (Ray would copy
it). A method that raises fails that call, named in one line. A rank dies by raising
:exc:`RankDied` (or by :meth:`InProcessRanks.kill`, like a SIGKILL from outside): that call and
every later one fail with ``worker process died (...)`` without running anything, and the rank
is recorded in ``failed``.

By default a rank's method runs in the caller's thread: no thread and no queue per call, which
is what a fan-out to thousands of ranks needs. A rank that can block (busy in a long phase, or
hung) is registered wrapped in :class:`OnOwnThread`: its calls then run one at a time, in order,
on one thread of its own (like a Ray actor's), and the caller waits at most the timeout. A call
not answered in time leaves the rank ``busy``: later calls are still queued behind it, so they
run in order once it is free, but nobody waits on them until it has answered.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future, wait
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from verlprof.records import Target
from verlprof.runtime.rank_rpc import RankError, describe_error, note_unanswered

DEFAULT_TIMEOUT_S = 120.0
"""As :class:`~verlprof.plan_model.RunPolicy`; the controller sets the plan's own."""


class RankDied(Exception):
    """Raised by an in-process rank to act as a process that died during the call."""


def death(err: BaseException) -> str:
    """The one line a dead rank is remembered by (shaped like the Ray layer's)."""
    return f"worker process died ({describe_error(err)})"


class OnOwnThread:
    """Wraps a rank whose methods may block: its calls run on one daemon thread of its own, one
    at a time and in the order they were sent (as a Ray actor runs them), so that the caller
    can stop waiting. The thread starts with the first call.

    ``rank`` is the wrapped object. Once a call raised :exc:`RankDied` (or after
    :meth:`InProcessRanks.kill`) the calls still queued fail the same way without running.
    """

    def __init__(self, rank: Any):
        self.rank = rank
        self.died: Optional[RankDied] = None
        self._queue: Optional[queue.SimpleQueue] = None
        self._lock = threading.Lock()

    def send(self, fn: Callable[..., Any], args: tuple) -> Future:
        """Queue ``fn(*args)``; its future holds the answer or the exception."""
        future: Future = Future()
        with self._lock:
            if self._queue is None:
                self._queue = queue.SimpleQueue()
                threading.Thread(target=self._serve, args=(self._queue,), daemon=True,
                                 name=f"verlprof-rank-{type(self.rank).__name__}").start()
            self._queue.put((fn, args, future))
        return future

    def close(self) -> None:
        """End the thread once the calls already queued have run."""
        with self._lock:
            if self._queue is not None:
                self._queue.put(None)
                self._queue = None

    def _serve(self, calls: queue.SimpleQueue) -> None:
        while True:
            item = calls.get()
            if item is None:
                return
            fn, args, future = item
            if not future.set_running_or_notify_cancel():
                continue
            if self.died is not None:
                future.set_exception(self.died)
                continue
            try:
                future.set_result(fn(*args))
            except RankDied as err:
                self.died = err
                future.set_exception(err)
            except BaseException as err:  # handed to the caller, as Ray hands a task's error
                future.set_exception(err)


class _Actors(Dict[Target, Any]):
    """``(group, rank) -> rank object``, remembering which ranks run on their own thread."""

    def __init__(self) -> None:
        super().__init__()
        self.threaded: Set[Target] = set()

    def __setitem__(self, target: Target, actor: Any) -> None:
        super().__setitem__(target, actor)
        if isinstance(actor, OnOwnThread):
            self.threaded.add(target)
        else:
            self.threaded.discard(target)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for target, actor in dict(*args, **kwargs).items():
            self[target] = actor


class InProcessRanks:
    """:class:`~verlprof.runtime.rank_rpc.RankRPC` over plain objects in this process
    (``actors[(group, rank)]``, filled by the controller's ``register_group``)."""

    def __init__(self, rpc_timeout_s: float = DEFAULT_TIMEOUT_S):
        self.rpc_timeout_s = rpc_timeout_s
        self._registry = _Actors()
        self.actors: Dict[Target, Any] = self._registry
        self.failed: Dict[Target, str] = {}
        """Dead ranks: (group, rank) -> why (noticed at a call, as over Ray)."""
        self.busy: Dict[Target, Tuple[str, Future, float]] = {}
        """Ranks with an unanswered call: (first method, last future, since)."""
        self._dead: Dict[Target, str] = {}
        """Ranks that died, noticed or not yet: their calls fail without running."""

    def is_dead(self, target: Target) -> bool:
        """Whether ``target`` died, noticed by a call or not yet (an asker skips it, as a dead
        Ray actor would not answer)."""
        return target in self._dead

    def kill(self, target: Target, why: str = "killed") -> None:
        """``target`` dies now, as if SIGKILLed: the controller notices at its next call."""
        err = RankDied(why)
        self._dead[target] = death(err)
        actor = self.actors.get(target)
        if isinstance(actor, OnOwnThread):
            actor.died = err

    def close(self) -> None:
        """End the threads of the :class:`OnOwnThread` ranks (after their queued calls)."""
        for actor in self.actors.values():
            if isinstance(actor, OnOwnThread):
                actor.close()

    def call(self, method: str, targets: Sequence[Target], args: Callable[[Target], tuple],
             *, timeout_s: Optional[float] = None, wait_busy: bool = False
             ) -> Tuple[Dict[Target, Any], List[RankError]]:
        """Call ``method`` on every target; (answers, errors), as ``RankCalls.call``.

        The threaded ranks get their calls first, so that they run while the plain ranks
        answer in this thread; then they are waited for, at most ``timeout_s`` (default
        :attr:`rpc_timeout_s`) from there, except those still busy (unless ``wait_busy``).
        """
        if not targets:
            return {}, []
        self.reap_busy()
        timeout = self.rpc_timeout_s if timeout_s is None else timeout_s
        results: Dict[Target, Any] = {}
        errors: List[RankError] = []
        # only targets are kept for the second pass, not a bound method and a tuple per rank:
        # thousands of live objects per fan-out set off Python's cyclic GC, whose passes then
        # scan a heap that grows with N (benchmarks/controller_scale.py)
        inline: List[Target] = []
        waited: Dict[Future, Target] = {}
        now = time.monotonic()
        # this pass touches no rank object unless some ranks died or run on threads: at 8,192
        # ranks the step's cost is then memory-bound, and each object touched is a cache miss
        dead_ranks, threaded = self._dead, self._registry.threaded
        for target in targets:
            dead = dead_ranks.get(target) if dead_ranks else None
            if dead is not None:
                self.failed[target] = dead
                self.busy.pop(target, None)
                errors.append((target, f"{method} failed: {dead}"))
                continue
            if not (threaded and target in threaded):
                inline.append(target)
                continue
            actor = self.actors[target]
            try:
                fn = getattr(actor.rank, method)
            except Exception as err:  # as a Ray handle without that method
                errors.append((target, f"{method} could not be sent: {describe_error(err)}"))
                continue
            future = actor.send(fn, args(target))
            if wait_busy or target not in self.busy:
                waited[future] = target
            else:
                errors.append(note_unanswered(self.busy, target, method, future, now))
        for target in inline:
            try:
                fn = getattr(self.actors[target], method)
            except Exception as err:
                errors.append((target, f"{method} could not be sent: {describe_error(err)}"))
                continue
            try:
                results[target] = fn(*args(target))
            except Exception as err:
                errors.append(self._failure(target, method, err))
        if waited:
            self._wait(method, waited, timeout, results, errors)
        return results, errors

    def _wait(self, method: str, waited: Dict[Future, Target], timeout: float,
              results: Dict[Target, Any], errors: List[RankError]) -> None:
        done, late = wait(waited, timeout=timeout)
        for future in done:
            target = waited[future]
            self.busy.pop(target, None)
            err = future.exception()
            if err is None:
                results[target] = future.result()
            else:
                errors.append(self._failure(target, method, err))
        now = time.monotonic()
        errors += [note_unanswered(self.busy, waited[future], method, future, now, timeout)
                   for future in late]

    def _failure(self, target: Target, method: str, err: BaseException) -> RankError:
        why = self._died(target, err) if isinstance(err, RankDied) else describe_error(err)
        return target, f"{method} failed: {why}"

    def reap_busy(self) -> None:
        """Forget ranks whose last unanswered call has finished (noting deaths)."""
        for target, (_, future, _) in list(self.busy.items()):
            if future.done():
                del self.busy[target]
                err = future.exception()
                if isinstance(err, RankDied):
                    self._died(target, err)

    def _died(self, target: Target, err: RankDied) -> str:
        why = self._dead.setdefault(target, death(err))
        self.failed[target] = why
        actor = self.actors.get(target)
        if isinstance(actor, OnOwnThread) and actor.died is None:
            actor.died = err
        return why
