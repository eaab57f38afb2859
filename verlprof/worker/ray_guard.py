"""Ray calls from verlprof's own threads, never at the same moment as ``ray.shutdown()``.

The controller places reports and summarises them from background threads while the job
runs. A driver that shuts Ray down while such a thread submits or waits on a call (a
controller never finalized: an exception on the way out, a benchmark, a test) crashed the
whole process in Ray's core worker: a segfault in ``_actor_method_call``, seen under the test
suite with P2's controllers. Ray orders ``ray.init`` and ``ray.shutdown`` by one lock of its
own; a call made while holding it cannot overlap either, and a thread that finds Ray shut
down stops calling it (:class:`RayGone`). Every Ray call counts, down to asking for this
node's id (:func:`verlprof.worker.identity.node_id`): a call after the shutdown makes Ray's core
worker end the process ("The core worker has already been shutdown ... The process will exit",
the second form of the same crash). Hold it for short spans only: a shutdown waits.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

_FALLBACK = threading.RLock()


class RayGone(RuntimeError):
    """``ray.shutdown()`` was called in this process: a background thread stops calling Ray."""


def _shutdown_lock() -> Any:
    """The lock ``ray.init`` and ``ray.shutdown`` take (a private name of Ray's; a Ray without
    it gets a lock of ours, which still keeps our threads from calling after a shutdown they
    have seen)."""
    try:
        from ray._private import worker
    except ImportError:  # pragma: no cover - Ray is a dependency
        return _FALLBACK
    return getattr(worker, "_connect_or_shutdown_lock", _FALLBACK)


@contextlib.contextmanager
def ray_connected() -> Iterator[None]:
    """Run the body's Ray calls with Ray up and no shutdown able to start until they return;
    raises :class:`RayGone` when this process is no longer connected."""
    import ray

    with _shutdown_lock():
        if not ray.is_initialized():
            raise RayGone("Ray was shut down in this process")
        yield
