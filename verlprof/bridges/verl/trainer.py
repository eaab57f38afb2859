"""verl's trainers hand their profiling hooks to the bridge's controller.

``_start_profiling`` / ``_stop_profiling`` of the legacy ``RayPPOTrainer`` and of the v1
``PPOTrainer`` become the begin and end of ``controller.step(global_steps)``: the controller
opens exactly the plan's windows, on the planned ranks only (verl would call every rank of
every group). v1's own hooks still run after and before, for the step bookkeeping its
subclasses read; the bridge's launcher clears verl's step list, so they start nothing. ``fit``
ends with the bridge's :meth:`~verlprof.bridges.verl.Bridge.finish`: every report gathered,
the manifest written, even when training fails.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, List

from verlprof.bridges.verl.driver_side import active_bridge

_TRAINERS = (("verl.trainer.ppo.ray_trainer", "RayPPOTrainer", False),
             ("verl.trainer.ppo.v1.trainer_base", "PPOTrainer", True))
"""(module, class, whether verl's own hooks keep state the trainer reads)."""


def _wrap_start(original: Callable, stateful: bool) -> Callable:
    @functools.wraps(original)
    def _start_profiling(self: Any, *args: Any, **kwargs: Any) -> Any:
        bridge = active_bridge()
        if bridge is None:
            return original(self, *args, **kwargs)
        result = original(self, *args, **kwargs) if stateful else None
        bridge.begin_step(int(self.global_steps))
        return result

    return _start_profiling


def _wrap_stop(original: Callable, stateful: bool) -> Callable:
    @functools.wraps(original)
    def _stop_profiling(self: Any, *args: Any, **kwargs: Any) -> Any:
        bridge = active_bridge()
        if bridge is None:
            return original(self, *args, **kwargs)
        bridge.end_step(int(self.global_steps))
        return original(self, *args, **kwargs) if stateful else None

    return _stop_profiling


def _wrap_fit(original: Callable) -> Callable:
    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        finally:
            bridge = active_bridge()
            if bridge is not None:
                bridge.finish()

    return fit


def patch_trainers() -> List[str]:
    """Patch every verl trainer class that imports here (idempotent); their names."""
    patched = []
    for module_name, class_name, stateful in _TRAINERS:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue  # not in this verl version, or its optional dependencies are missing
        if not getattr(cls._start_profiling, "__verlprof_bridge__", False):
            for name, wrap in (("_start_profiling", _wrap_start), ("_stop_profiling", _wrap_stop)):
                wrapped = wrap(getattr(cls, name), stateful)
                wrapped.__verlprof_bridge__ = True  # type: ignore[attr-defined]
                setattr(cls, name, wrapped)
            cls.fit = _wrap_fit(cls.fit)
        patched.append(class_name)
    return patched
