"""Ray launch settings: wrap exactly the planned processes in their profiler, nothing else.

Ray runs ``py_executable`` through ``bash -c`` with the string as given, so the argv from the
plan is joined with :func:`shlex.join`: every value stays inside its own argv slot. The real
interpreter (``sys.executable``) is used, not the word ``python`` (Ray's nsight plugin breaks
virtualenvs that way), and no trial run of nsys is made per worker.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any, Dict, Mapping, Optional, Sequence

from verlprof.plan_model import ProfilePlan


def wrapped_executable(argv: Sequence[str], python: Optional[str] = None) -> str:
    """``py_executable`` for Ray: the launch argv followed by the interpreter, shell-quoted."""
    return shlex.join([*argv, python or sys.executable])


def _runtime_env(argv: Sequence[str], env: Mapping[str, str],
                 base: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    runtime_env = dict(base or {})
    if argv:
        runtime_env["py_executable"] = wrapped_executable(argv)
    else:
        # Ray merges a child's runtime_env into its creator's: workers created by a controller
        # that runs under nsys would inherit its wrapped py_executable unless told otherwise.
        runtime_env.setdefault("py_executable", sys.executable)
    if argv or env:  # env unwrapped: an in-process profiler's settings (torch's quiet Kineto)
        runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), **env}
    return runtime_env


def worker_runtime_env(plan: ProfilePlan, group: str, rank: int,
                       base: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """``runtime_env`` for rank ``rank`` of ``group``: wrapped when planned, else plain."""
    process = plan.process(group, rank)
    if process is None:
        return _runtime_env((), {}, base)
    return _runtime_env(process.launch_argv, process.launch_env, base)


def worker_options(plan: ProfilePlan, group: str, rank: int,
                   base_runtime_env: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """Keyword arguments for ``ActorClass.options(**...)`` of that rank."""
    return {"runtime_env": worker_runtime_env(plan, group, rank, base_runtime_env)}


def controller_options(plan: ProfilePlan,
                       base_runtime_env: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """``.options(...)`` for the actor that runs the trainer loop (the controller)."""
    return {"runtime_env": _runtime_env(plan.controller.launch_argv, plan.controller.launch_env,
                                        base_runtime_env)}
