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

import importlib
from typing import Any, Callable, List

from verlprof.bridges.verl.driver_side import active_bridge
from verlprof.bridges.verl.patching import wrap_once

_TRAINERS = (("verl.trainer.ppo.ray_trainer", "RayPPOTrainer", False),
             ("verl.trainer.ppo.v1.trainer_base", "PPOTrainer", True))
"""(module, class, whether verl's own hooks keep state the trainer reads)."""


def _wrap_start(stateful: bool) -> Callable[[Callable], Callable]:
    def make(original: Callable) -> Callable:
        def _start_profiling(self: Any, *args: Any, **kwargs: Any) -> Any:
            bridge = active_bridge()
            if bridge is None:
                return original(self, *args, **kwargs)
            result = original(self, *args, **kwargs) if stateful else None
            bridge.begin_step(int(self.global_steps))
            return result

        return _start_profiling

    return make


def _wrap_stop(stateful: bool) -> Callable[[Callable], Callable]:
    def make(original: Callable) -> Callable:
        def _stop_profiling(self: Any, *args: Any, **kwargs: Any) -> Any:
            bridge = active_bridge()
            if bridge is None:
                return original(self, *args, **kwargs)
            bridge.end_step(int(self.global_steps))
            return original(self, *args, **kwargs) if stateful else None

        return _stop_profiling

    return make


def _wrap_fit(original: Callable) -> Callable:
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
        wrap_once(cls, "_start_profiling", _wrap_start(stateful))
        wrap_once(cls, "_stop_profiling", _wrap_stop(stateful))
        wrap_once(cls, "fit", _wrap_fit)
        patched.append(class_name)
    return patched
