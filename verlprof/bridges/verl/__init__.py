"""verlprof inside real verl, without a fork: verl's own worker groups, profiler and trainer.

Two ways in (docs/verl.md has the exact lines):

* ``python -m verlprof.bridges.verl <the overrides you pass to verl.trainer.main_ppo>``
* in your own driver, before building worker groups: ``bridge = attach(config)``, then verl's
  trainer (or your loop calling ``_start_profiling`` / ``_stop_profiling``) as usual.

verl's config keys say what to profile (``global_profiler.*`` and each role's ``profiler``
block, or the older layouts); verlprof plans it, wraps only the planned ranks under nsys,
drives verl's ``DistProfiler`` / ``annotate`` from its controller, and gathers every report
with a manifest that ``verlprof report`` reads.

The names below load on first use: verl imports :mod:`verlprof.bridges.verl.plugin` in every
process, and that must stay cheap where the bridge is off.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from verlprof.bridges.verl.env import ENABLE_ENV

if TYPE_CHECKING:
    from verlprof.bridges.verl.bridge import Bridge, attach, install, plan_of, uninstall
    from verlprof.bridges.verl.driver_side import bridge_env

_PUBLIC = {"Bridge": "bridge", "attach": "bridge", "install": "bridge", "plan_of": "bridge",
           "uninstall": "bridge", "bridge_env": "driver_side"}

__all__ = ["ENABLE_ENV", "Bridge", "attach", "bridge_env", "install", "plan_of", "uninstall"]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'verlprof.bridges.verl' has no attribute {name!r}")
    return getattr(importlib.import_module(f"verlprof.bridges.verl.{_PUBLIC[name]}"), name)
