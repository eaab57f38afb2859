"""Planning: ``build_plan(config, topology)`` → :class:`ProfilePlan`, a pure function.

:mod:`~verlprof.plan_model` (the contract layer) holds the records, :mod:`~verlprof.plan.build`
the function, :mod:`~verlprof.plan.tool_launch` each tool's launch argv, and
:mod:`~verlprof.plan.render` the tables ``verlprof plan`` prints. The planner imports no
backend, runtime or bridge (tests/unit/test_architecture.py): the backends execute the plan.
"""

from __future__ import annotations

from verlprof.plan.build import build_plan, group_step_windows
from verlprof.plan_model import (
    PHASE_ORDER,
    ROLE_PHASES,
    ControllerPlan,
    ProcessPlan,
    ProfilePlan,
    Report,
    RunPolicy,
    Window,
)

__all__ = ["PHASE_ORDER", "ROLE_PHASES", "ControllerPlan", "ProcessPlan", "ProfilePlan", "Report",
           "RunPolicy", "Window", "build_plan", "group_step_windows"]
