"""Calls from the controller to planned ranks: in parallel, bounded, one line per failure.

A rank that dies is remembered (never asked again); a rank that does not answer in time is
remembered as busy: later calls are still sent, so they run in order once it is free, but
nobody waits on them twice. Ray's error messages run over many lines: :func:`describe_error`
gives the one line that the log and the manifest carry.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from verlprof.records import Target
from verlprof.safe_text import one_line

RankError = Tuple[Target, str]
"""(group, rank) and one line saying what went wrong."""


class RankRPC(Protocol):
    """What the controller needs to reach its ranks. :class:`RankCalls` does it over Ray;
    tests drive the controller with in-process fake ranks behind the same interface."""

    rpc_timeout_s: float
    actors: Dict[Target, Any]
    """The handle of every registered planned rank."""
    failed: Dict[Target, str]
    """Dead ranks: (group, rank) -> why. They are never asked again."""

    def call(self, method: str, targets: Sequence[Target], args: Callable[[Target], tuple],
             *, timeout_s: Optional[float] = None, wait_busy: bool = False
             ) -> Tuple[Dict[Target, Any], List[RankError]]:
        """Call ``method`` on every target in parallel; (answers, errors)."""
        ...


DIED = "worker process died"
"""How :func:`describe_error` begins for a process that is gone."""


def describe_error(err: BaseException) -> str:
    """One short line for an RPC failure (Ray's messages run over many lines)."""
    from ray.exceptions import RayActorError, RayTaskError

    text = one_line(err)
    if isinstance(err, RayActorError):
        kind = re.search(r"Worker exit type: (\w+)", text)
        detail = re.search(r"Worker exit detail: (.*?\.)(?:\s|$)", text)
        extra = ", ".join(x for x in (kind and kind.group(1), detail and detail.group(1)) if x)
        return _clip(f"{DIED} ({type(err).__name__}{': ' + extra if extra else ''})")
    if isinstance(err, RayTaskError) and getattr(err, "cause", None) is not None:
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


def note_unanswered(busy: Dict[Target, Tuple[str, Any, float]], target: Target, method: str,
                    pending: Any, now: float, timeout_s: Optional[float] = None) -> RankError:
    """Record ``target`` as busy (keeping the method and time it first stopped answering, and
    the call still pending now) and say so in one line: the call did not answer within
    ``timeout_s``, or (None) it was not awaited, the rank being busy already."""
    first, _, since = busy.get(target, (method, None, now))
    busy[target] = (first, pending, since)
    if timeout_s is None:
        return target, (f"{method} not awaited: still busy since {first} {now - since:.0f}s ago "
                        "(it runs once the rank is free)")
    return target, f"{method} did not answer within {timeout_s:g}s (busy in a long call, or hung)"


class RankCalls:
    """The controller's parallel RPCs to its planned ranks (``actors[(group, rank)]``)."""

    def __init__(self, rpc_timeout_s: float):
        self.rpc_timeout_s = rpc_timeout_s
        self.actors: Dict[Target, Any] = {}
        self.failed: Dict[Target, str] = {}
        """Dead ranks: (group, rank) -> why."""
        self.busy: Dict[Target, Tuple[str, Any, float]] = {}
        """Ranks with an unanswered call: (first method, last ref, since)."""

    def call(self, method: str, targets: Sequence[Target], args: Callable[[Target], tuple],
             *, timeout_s: Optional[float] = None, wait_busy: bool = False
             ) -> Tuple[Dict[Target, Any], List[RankError]]:
        """Call ``method`` on every target in parallel, waiting at most ``timeout_s``.

        Returns (answers, errors); each error is (target, one line). A dead rank is recorded
        in :attr:`failed`. A target still busy with an earlier unanswered call gets the call
        too (so its calls run in order) but is not waited for unless ``wait_busy``.
        """
        if not targets:
            return {}, []
        import ray

        self.reap_busy()
        timeout = self.rpc_timeout_s if timeout_s is None else timeout_s
        errors: List[RankError] = []
        refs: Dict[Any, Target] = {}
        for target in targets:
            try:
                refs[getattr(self.actors[target], method).remote(*args(target))] = target
            except Exception as err:  # a handle that cannot even submit
                errors.append((target, f"{method} could not be sent: {describe_error(err)}"))
        now = time.monotonic()
        waited = [r for r, t in refs.items() if wait_busy or t not in self.busy]
        errors += [note_unanswered(self.busy, t, method, r, now)
                   for r, t in refs.items() if not wait_busy and t in self.busy]
        ready, late = (ray.wait(waited, num_returns=len(waited), timeout=timeout)
                       if waited else ([], []))
        results: Dict[Target, Any] = {}
        for ref in ready:
            target = refs[ref]
            self.busy.pop(target, None)
            try:
                results[target] = ray.get(ref)
            except Exception as err:
                why = describe_error(err)
                if _is_death(err):
                    self.failed[target] = why
                errors.append((target, f"{method} failed: {why}"))
        errors += [note_unanswered(self.busy, refs[ref], method, ref, now, timeout)
                   for ref in late]
        return results, errors

    def reap_busy(self) -> None:
        """Forget ranks whose last unanswered call has finished (noting deaths)."""
        if not self.busy:
            return
        import ray

        for target, (_, ref, _) in list(self.busy.items()):
            ready, _ = ray.wait([ref], timeout=0)
            if ready:
                del self.busy[target]
                try:
                    ray.get(ready[0])
                except Exception as err:
                    if _is_death(err):
                        self.failed[target] = describe_error(err)
