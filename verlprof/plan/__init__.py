"""Planning: ``build_plan(config, topology)`` → :class:`ProfilePlan`, a pure function.

:mod:`~verlprof.plan.model` holds the records, :mod:`~verlprof.plan.build` the function,
:mod:`~verlprof.plan.render` the tables ``verlprof plan`` prints. The backends read the model
and the builder asks the backends for launch commands, so :func:`build_plan` is loaded on first
use: importing ``verlprof.plan.model`` never pulls in the builder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verlprof.plan.model import (
    PHASE_ORDER,
    ROLE_PHASES,
    ControllerPlan,
    ProcessPlan,
    ProfilePlan,
    Report,
    RunPolicy,
    Window,
)

if TYPE_CHECKING:
    from verlprof.plan.build import build_plan, group_step_windows

__all__ = ["PHASE_ORDER", "ROLE_PHASES", "ControllerPlan", "ProcessPlan", "ProfilePlan", "Report",
           "RunPolicy", "Window", "build_plan", "group_step_windows"]


def __getattr__(name: str) -> Any:
    if name in ("build_plan", "group_step_windows"):
        from verlprof.plan import build

        return getattr(build, name)
    raise AttributeError(f"module 'verlprof.plan' has no attribute {name!r}")
