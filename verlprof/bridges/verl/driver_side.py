"""In the process that builds verl's worker groups (verl's TaskRunner, or a user's driver).

Two verl seams, patched once per process and idle until a :class:`Bridge` is attached:

* ``RayWorkerGroup._create_worker``: verl asks there for each rank's runtime_env, and puts
  ``nsight`` on every rank when it profiles. The bridge drops verl's ``nsight`` and wraps exactly
  the ranks its plan selects (their ``py_executable`` runs ``nsys profile ...``). Every rank gets
  the environment that loads the bridge when the worker imports verl.
* ``RayWorkerGroup._init_with_resource_pool``: once a pool's workers exist, they are registered
  with the bridge's controller, which configures the planned ranks.
"""

from __future__ import annotations

import logging
import os
import types
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from verlprof.bridges.verl.env import ENABLE_ENV, EXTERNAL_MODULES_ENV, PLUGIN_MODULE
from verlprof.bridges.verl.patching import wrap_once
from verlprof.bridges.verl.roles import fused_keys, roles_of_keys
from verlprof.bridges.verl.worker_side import remote_call
from verlprof.runtime.ray_options import worker_runtime_env

logger = logging.getLogger("verlprof")



class VerlActor:
    """A fused verl actor as the controller sees a rank: ``actor.verlprof_start.remote()`` runs
    the RPC through Ray's ``__ray_call__``, since a fused actor has only verl's registered
    methods."""

    def __init__(self, handle: Any):
        self.handle = handle

    def __getattr__(self, method: str) -> Any:
        if not method.startswith("verlprof_"):
            raise AttributeError(method)
        handle = self.handle
        return types.SimpleNamespace(
            remote=lambda *args: handle.__ray_call__.remote(remote_call, method, *args))


def bridge_env(base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Environment variables that make a process load the bridge when it imports verl."""
    env = dict(base or {})
    modules = [m for m in (env.get(EXTERNAL_MODULES_ENV) or os.environ.get(EXTERNAL_MODULES_ENV)
                           or "").split(",") if m.strip()]
    if PLUGIN_MODULE not in modules:
        modules.append(PLUGIN_MODULE)
    env[EXTERNAL_MODULES_ENV] = ",".join(modules)
    env[ENABLE_ENV] = "1"
    return env


def bridged_options(options: Dict[str, Any], plan: Any, group: Optional[str],
                    rank: int) -> Dict[str, Any]:
    """Ray actor ``options`` with the environment that loads the bridge and, for rank ``rank``
    of plan group ``group`` (None: not planned), the plan's launch of that rank."""
    runtime_env = dict(options.get("runtime_env") or {})
    env_vars = bridge_env(runtime_env.get("env_vars"))
    if group is not None:
        runtime_env = worker_runtime_env(plan, group, rank, runtime_env)
        env_vars.update(runtime_env.get("env_vars") or {})
    runtime_env["env_vars"] = env_vars
    return {**options, "runtime_env": runtime_env}


@dataclass(frozen=True)
class BuiltGroup:
    """A worker group verl built, as the bridge sees it before its first worker starts."""

    prefix: str
    """verl's ``name_prefix`` of the group (unique per group)."""
    roles: Tuple[str, ...]
    """verlprof roles of the fused class (from its prefixed ``<key>_start_profile`` methods)."""
    world_size: Optional[int]
    """Ranks of its resource pool (None when verl did not say)."""


class GroupMap:
    """Which plan group each of verl's worker groups is, from the roles of its fused class.

    The plan's groups are predicted from the config. verl may build a pool differently (a
    reference policy it deploys though the config reads as if it did not, a pool mapping the
    config does not show): the best-matching plan group (most roles in common) is taken and,
    when its roles differ, ``replan(built, name, predicted)`` is asked to plan again on the
    roles verl built; a group sharing no role with the plan becomes a group of its own
    (``predicted`` false). ``replan`` raises the one-line
    error when the observed pools cannot be planned (a rank beyond the pool verl built).
    """

    def __init__(self, plan: Any, replan: Callable[[BuiltGroup, str, bool], Any]):
        self.plan = plan
        self.replan = replan
        self.by_prefix: Dict[str, Optional[str]] = {}
        self.taken: List[str] = []

    def group_of(self, built: BuiltGroup) -> Optional[str]:
        """The plan group of ``built`` (None: it hosts no role verlprof profiles)."""
        if built.prefix in self.by_prefix:
            return self.by_prefix[built.prefix]
        if not built.roles:  # no verl profiler role: not a trainer worker group
            self.by_prefix[built.prefix] = None
            return None
        free = [g for g in self.plan.groups if g.name not in self.taken]
        shared = [g for g in free if set(g.roles) & set(built.roles)]
        best = max(shared, key=lambda g: (set(g.roles) == set(built.roles),
                                          len(set(g.roles) & set(built.roles))), default=None)
        # the name is decided here, once: the plan's own, or a new one clashing with none
        name = best.name if best is not None else new_group_name(
            built.roles, [g.name for g in self.plan.groups])
        if best is None or tuple(best.roles) != built.roles or (
                built.world_size is not None and best.world_size != built.world_size):
            self.plan = self.replan(built, name, best is not None)
        self.by_prefix[built.prefix] = name
        self.taken.append(name)
        return name


def new_group_name(roles: Sequence[str], taken: Sequence[str]) -> str:
    """The plan name of a pool the config did not predict: verl's pool names where they are
    known (``reward_pool`` for the reward model alone), else its roles joined."""
    base = "reward_pool" if tuple(roles) == ("rm",) else "_".join(roles) + "_pool"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}{n}", n + 1
    return name


_ACTIVE: List[Any] = []
"""The attached :class:`~verlprof.bridges.verl.Bridge` of this process (at most one)."""


def active_bridge() -> Optional[Any]:
    return _ACTIVE[0] if _ACTIVE else None


def set_active_bridge(bridge: Optional[Any]) -> None:
    _ACTIVE.clear()
    if bridge is not None:
        _ACTIVE.append(bridge)


def patch_worker_groups() -> bool:
    """Patch verl's ``RayWorkerGroup`` (idempotent); False when verl is not importable."""
    try:
        from verl.single_controller.ray import base as ray_base
    except ImportError:
        return False
    group_cls = ray_base.RayWorkerGroup

    def make_create(create: Callable) -> Callable:
        def _create_worker(self: Any, rank: int, *args: Any, **kwargs: Any) -> Any:
            bridge = active_bridge()
            ray_cls_with_init = next((a for a in args if hasattr(a, "update_options")),
                                     kwargs.get("ray_cls_with_init"))
            if bridge is None or ray_cls_with_init is None:  # off, or another verl signature
                return create(self, rank, *args, **kwargs)
            cls = getattr(ray_cls_with_init.cls, "__ray_actor_class__", ray_cls_with_init.cls)
            roles = roles_of_keys(fused_keys(dir(cls)))
            group = bridge.groups.group_of(BuiltGroup(
                prefix=self.name_prefix, roles=roles,
                world_size=getattr(self, "_world_size", None)))
            update = ray_cls_with_init.update_options

            def update_options(options: Dict[str, Any]) -> Any:
                runtime_env = dict(options.get("runtime_env") or {})
                runtime_env.pop("nsight", None)  # verl wraps every rank; the plan says which
                return update(bridged_options({**options, "runtime_env": runtime_env},
                                              bridge.plan, group, rank))

            ray_cls_with_init.update_options = update_options  # this call only
            try:
                return create(self, rank, *args, **kwargs)
            finally:
                del ray_cls_with_init.update_options

        return _create_worker

    def make_init(init_pool: Callable) -> Callable:
        def _init_with_resource_pool(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = init_pool(self, *args, **kwargs)
            bridge = active_bridge()
            if bridge is not None:
                group = bridge.groups.by_prefix.get(self.name_prefix)
                if group is not None:
                    bridge.register(group, list(self.workers))
            return result

        return _init_with_resource_pool

    wrap_once(group_cls, "_create_worker", make_create)
    wrap_once(group_cls, "_init_with_resource_pool", make_init)
    return True
