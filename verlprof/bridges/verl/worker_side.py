"""Inside every verl worker process: verl's own ``DistProfiler`` drives verlprof's session.

verl fuses every role of a resource pool into one process (``create_colocated_worker_cls``), so
the process, not a role object, owns verlprof's session: one :class:`ProcessHost` per process.
Each ``DistProfiler`` that verl's workers build is remembered (weakly) and left exactly as
verl built it: its type, its ``_impl``, its flags and its calls are verl's. Only while a window
of this process is armed or open (the session says so) does it delegate to verlprof: its
``_impl`` becomes :class:`VerlprofImpl` and its three gates are raised, so that verl's
``DistProfiler.annotate``, which looks up ``self.profiler._impl`` on every call, runs the
phases verl already decorated through the session: an NVTX range (nsys) or
``record_function`` (torch) in an open window, and in discrete mode their own window. When the
last window closes, verl's impl and gates come back as they were. A process that verlprof does
not profile never has a window, so verl's own profiler works there as in verl (verl's profiler
unit tests pass with the bridge switched on: tests/unit/test_verl_transparency.py).

The controller reaches the session through Ray's ``__ray_call__``. A fused verl actor exposes
only its registered methods, so :func:`remote_call` runs on the actor and forwards to the
``verlprof_*`` RPCs of the :class:`ProcessHost`.
"""

from __future__ import annotations

import functools
import inspect
import threading
import types
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from verlprof.bridges.verl.patching import MARK, swap_code, wrap_once
from verlprof.bridges.verl.roles import phase_of
from verlprof.config.verl_pools import REWARD_REPLICAS, ROLLOUT_REPLICAS, TEACHER_REPLICAS
from verlprof.worker import ProfilingWorkerMixin

_FLAGS = ("_enable", "_this_rank", "_this_step")
"""verl's ``DistProfiler`` gates: enabled, this rank selected, inside a profiled step."""
_SWAPPED = ("_impl", *_FLAGS)
"""What a live window changes on a verl ``DistProfiler`` (and gives back when it closes)."""


class ProcessHost(ProfilingWorkerMixin):
    """This process's verlprof worker: the controller's RPCs land here, whatever verl role
    objects the process holds."""

    def __init__(self) -> None:
        self._profilers: weakref.WeakKeyDictionary[Any, Optional[str]] = \
            weakref.WeakKeyDictionary()
        """verl's profilers in this process → their worker's role key."""
        self._saved: Dict[int, Tuple[Any, ...]] = {}
        self._active = False
        self._lock = threading.Lock()

    @property
    def _verlprof_active(self) -> bool:
        return self._active

    @_verlprof_active.setter
    def _verlprof_active(self, active: bool) -> None:
        """Set by the session when this process's first window is armed and its last closes:
        route verl's profilers to :class:`VerlprofImpl` with their gates open, or give them
        back verl's own impl and gates."""
        with self._lock:
            self._active = active
            for profiler in list(self._profilers):
                self._gate(profiler, active)

    def _gate(self, profiler: Any, active: bool) -> None:
        if active and id(profiler) not in self._saved:
            self._saved[id(profiler)] = tuple(getattr(profiler, a, None) for a in _SWAPPED)
            profiler._impl = VerlprofImpl(self, self._profilers.get(profiler))
            for flag in _FLAGS:
                setattr(profiler, flag, True)
        elif not active and id(profiler) in self._saved:
            for name, value in zip(_SWAPPED, self._saved.pop(id(profiler))):
                setattr(profiler, name, value)

    def release(self) -> None:
        """Forget every verl profiler adopted so far, giving each verl's impl and gates back
        (``uninstall()``)."""
        with self._lock:
            for profiler in list(self._profilers):
                self._gate(profiler, False)
            self._profilers.clear()

    def adopt(self, profiler: Any, worker_key: Optional[str]) -> None:
        """Remember ``profiler`` (a verl ``DistProfiler``): it delegates to this process's
        session while a window is live, and is verl's own otherwise."""
        with self._lock:
            self._profilers[profiler] = worker_key
            if self._active:
                self._gate(profiler, True)


class VerlprofImpl:
    """What verl's ``DistProfiler`` delegates to (the shape of verl's own implementations:
    ``start``, ``stop``, ``step``, ``annotate``). Windows are the controller's business, so
    verl's start/stop do nothing here; phases run through the session."""

    def __init__(self, host: ProcessHost, worker_key: Optional[str]):
        self.host = host
        self.worker_key = worker_key

    def start(self, **kwargs: Any) -> None:
        """verl's ``start_profile``: the bridge's controller opens windows, not verl."""

    def stop(self, *args: Any, **kwargs: Any) -> None:
        """verl's ``stop_profile``: nothing to do (see :meth:`start`)."""

    def step(self) -> None:
        """verl's ``step_profile`` (a torch schedule tick): windows follow verlprof's plan."""

    def annotate(self, message: Optional[str] = None, color: Optional[str] = None,
                 domain: Optional[str] = None, category: Optional[str] = None,
                 **kwargs: Any) -> Callable[[Callable], Callable]:
        """A decorator running the method as phase ``<role>/<method>`` of the session. The
        colour is verl's business: verlprof names ranges, and never fails a phase for a colour
        the ``nvtx`` package does not know."""
        label = kwargs.get("role") or message
        host, worker_key = self.host, self.worker_key

        def decorate(fn: Callable) -> Callable:
            role, phase = phase_of(label, fn.__name__, worker_key)

            @functools.wraps(fn)
            def run(owner: Any, *args: Any, **kw: Any) -> Any:
                session = host._verlprof_session
                if session is None:
                    return fn(owner, *args, **kw)
                return session.run_phase(role, phase, fn, owner, args, kw)

            return run

        return decorate


SERVED_GROUPS = (ROLLOUT_REPLICAS, REWARD_REPLICAS, TEACHER_REPLICAS)
"""The served models' plan groups (a teacher's among several: ``teacher_replicas_<key>``)."""
_HOST: Optional[ProcessHost] = None
_HOST_LOCK = threading.Lock()


def host() -> ProcessHost:
    """This process's :class:`ProcessHost`, made on first use."""
    global _HOST
    if _HOST is None:
        with _HOST_LOCK:
            if _HOST is None:
                _HOST = ProcessHost()
    return _HOST


def remote_call(actor: Any, method: str, *args: Any) -> Any:
    """Runs on a verl actor through ``__ray_call__``: the ``verlprof_*`` RPC ``method``."""
    if not method.startswith("verlprof_"):
        raise PermissionError(f"{method} is not a verlprof RPC")
    reply = getattr(host(), method)(*args)
    plan = args[0] if method == "verlprof_configure" and args else None
    if plan is not None and plan.group.startswith(SERVED_GROUPS):
        route_generation(type(actor), plan.roles[0])  # a server: requests become ranges
    elif plan is not None and "rollout" in plan.roles:  # a training process of a replica
        route_weight_sync(actor)
    return reply


# -- verl's coroutine methods that no annotation marks become ranges in this process's windows

GENERATE = "generate"
"""The server method verl's ``LLMServerClient`` calls for each request (vLLM, SGLang, ...)."""
WEIGHT_SYNC = "update_weights"
"""The training worker's method that hands its weights to the rollout's engine (verl 0.7+:
``CheckpointEngineManager.update_weights`` calls it in every step's ``update_weights``)."""

_KEY = "__verlprof_key__"
"""In the trampoline's code, the constant that becomes the rerouted method's qualified name."""


async def _trampoline(*args: Any, **kwargs: Any) -> Any:  # its code becomes verl's function's
    from verlprof.bridges.verl.patching import run_rerouted  # no global of verl's module
    return await run_rerouted("__verlprof_key__", args, kwargs)


def route_generation(server_class: type, role: str) -> List[str]:
    """A replica's server: each request (``generate``) is the range ``<role>/generate``.
    Ray calls the server's methods through the function objects it held when it loaded the
    class, so ``generate`` itself is given the trampoline's code (:func:`patching.swap_code`)."""
    return route_method(server_class, GENERATE, f"{role}/{GENERATE}", held_by_ray=True)


def route_weight_sync(actor: Any) -> List[str]:
    """A training process of a hybrid replica: the weights it hands to the rollout's engine
    (``update_weights``, of its fused roles' workers too) are the range
    ``rollout/update_weights`` (in verl 0.7+ no generation runs in this process). verl's fused
    actor looks its role workers' methods up on every call: those are wrapped."""
    name = f"rollout/{WEIGHT_SYNC}"
    workers = (getattr(actor, "worker_dict", None) or {}).values()
    return route_method(type(actor), WEIGHT_SYNC, name, held_by_ray=True) + [
        key for worker in workers for key in route_method(type(worker), WEIGHT_SYNC, name)]


def route_method(owner_class: type, method: str, range_name: str,
                 held_by_ray: bool = False) -> List[str]:
    """Run ``owner_class.<method>`` (a coroutine function) inside ``range_name`` while a window
    of this process is open; returns what was rerouted. ``held_by_ray``: the class is the
    actor's own, whose methods Ray calls without looking them up, so verl's function (the
    innermost: Ray's and verl's decorators wrap each method in a closure calling it) gets the
    trampoline's code; otherwise the class attribute is wrapped."""
    static = inspect.getattr_static(owner_class, method, None)
    function = inspect.unwrap(static or (lambda: None))
    if not inspect.iscoroutinefunction(function) or getattr(static, MARK, False):
        return []
    key = function.__qualname__

    def make(original: Callable) -> Callable:
        async def routed(*args: Any, **kwargs: Any) -> Any:
            return await _in_window(range_name, original, args, kwargs)
        return routed

    if not held_by_ray:
        return [key] if wrap_once(owner_class, method, make) else []
    code = _trampoline.__code__
    if function.__closure__ or function.__code__.co_filename == code.co_filename:
        return []  # code with free variables cannot take the trampoline's; or rerouted already
    copy = types.FunctionType(function.__code__, function.__globals__, function.__name__,
                              function.__defaults__, None)
    copy.__kwdefaults__ = function.__kwdefaults__
    swap_code(function, code.replace(co_name=function.__name__, co_consts=tuple(
        key if const == _KEY else const for const in code.co_consts)), key, make(copy))
    return [key]


def forget_routes() -> None:
    """After ``uninstall()``: no verl profiler of this process is routed to verlprof."""
    host().release()


async def _in_window(range_name: str, original: Callable, args: tuple, kwargs: dict) -> Any:
    """A rerouted method: its range around it while a window of this process is open; verl's
    function as it is otherwise."""
    process = host()
    session = process._verlprof_session
    if session is None or not process._verlprof_active:
        return await original(*args, **kwargs)
    with session.capture.phase(range_name):
        return await original(*args, **kwargs)


def patch_dist_profiler() -> bool:
    """Remember every ``DistProfiler`` verl builds from now on, so that a live window of this
    process can route it to verlprof (it is verl's own until then). Idempotent; False when
    verl's profiler module is not importable."""
    try:
        from verl.utils.profiler import profile as verl_profile
    except ImportError:
        return False
    def make(original: Callable) -> Callable:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            # DistProfiler(rank, config, tool_config, save_file_prefix): its worker's role key
            key = kwargs.get("save_file_prefix", args[3] if len(args) > 3 else None)
            host().adopt(self, key if isinstance(key, str) else None)

        return __init__

    wrap_once(verl_profile.DistProfiler, "__init__", make)
    return True
