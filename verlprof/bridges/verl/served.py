"""verl's served models: rollout replicas (0.7+) and the served reward model (0.8+).

verl generates on replica servers: ``LLMServerManager`` makes one ``RolloutReplica`` per
``tensor x data x pipeline parallel`` GPUs, and each replica's ``launch_servers`` starts its
server actors with ``self.server_class.options(...).remote(...)`` (vLLM, SGLang and the engines
registered through ``RolloutReplicaRegistry``). Two seams, both idle until a bridge is attached:

* driver side, :func:`patch_replicas`: every replica class handed out by
  ``RolloutReplicaRegistry.get`` has its ``launch_servers`` wrapped. While it runs, the
  replica's ``server_class`` is a :class:`ServerLauncher`: the server of node 0 of a planned
  replica runs under the plan's launch argv (nsys), every server gets the environment that
  loads the bridge, and once the server exists it is registered with the controller as rank
  ``replica_rank`` of the plan's replica group. The controller then opens and closes its
  windows at the step boundaries, like a training rank's.
* server side, :func:`~verlprof.bridges.verl.worker_side.route_generation`: in a configured
  server process, the server class's
  ``generate`` (what verl's ``LLMServerClient`` calls for every request) runs inside the
  range ``<role>/generate`` while a window is open, so that ``verlprof report`` counts
  generation per replica and step. Ray keeps the function objects of an actor class from the
  moment it loaded it, so the method is rerouted by giving that function a new ``__code__``
  (a trampoline into ``worker_side._generate_in_window``), in the configured process only.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from verlprof.bridges.verl.driver_side import active_bridge, bridge_env
from verlprof.bridges.verl.patching import MARK
from verlprof.config.verl_pools import REWARD_REPLICAS, ROLLOUT_REPLICAS, teacher_group
from verlprof.runtime.launch import worker_runtime_env


def replica_group(replica: Any, plan: Any = None) -> str:
    """The plan group of a verl replica: a distillation teacher's is its key's (verl names its
    servers ``..._<key>``) among the groups of ``plan``."""
    if getattr(replica, "is_teacher_model", False):
        groups = tuple(g.name for g in plan.groups) if plan is not None else ()
        return teacher_group(str(getattr(replica, "name_suffix", ""))[1:], groups)
    return REWARD_REPLICAS if getattr(replica, "is_reward_model", False) else ROLLOUT_REPLICAS


class ServerLauncher:
    """Stands in for a replica's ``server_class`` while it launches its servers: the first
    server (node 0) of a planned replica is wrapped as the plan says; every one loads the
    bridge."""

    def __init__(self, server_class: Any, plan: Any, group: Optional[str], replica_rank: int):
        self.server_class = server_class
        self.plan, self.group, self.replica_rank = plan, group, replica_rank
        self.launched = 0

    def options(self, **options: Any) -> Any:
        runtime_env = dict(options.get("runtime_env") or {})
        env_vars = bridge_env(runtime_env.get("env_vars"))
        if self.group is not None and self.launched == 0:
            runtime_env = worker_runtime_env(self.plan, self.group, self.replica_rank,
                                             runtime_env)
            env_vars.update(runtime_env.get("env_vars") or {})
        runtime_env["env_vars"] = env_vars
        self.launched += 1
        return self.server_class.options(**{**options, "runtime_env": runtime_env})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.server_class, name)


def _wrap_launch(launch: Callable) -> Callable:
    @functools.wraps(launch)
    async def launch_servers(self: Any, *args: Any, **kwargs: Any) -> Any:
        bridge = active_bridge()
        server_class = getattr(self, "server_class", None)
        if bridge is None or server_class is None:
            return await launch(self, *args, **kwargs)
        group: Optional[str] = replica_group(self, bridge.plan)
        if group is not None and all(g.name != group for g in bridge.plan.groups):
            group = None
        self.server_class = ServerLauncher(server_class, bridge.plan, group, self.replica_rank)
        try:
            result = await launch(self, *args, **kwargs)
        finally:
            self.server_class = server_class
        if group is not None and self.servers:
            bridge.register_replica(group, int(self.replica_rank), self.servers[0])
        if bridge.engines is not None and replica_group(self) == bridge.engines.route.group:
            bridge.engines.add(int(self.replica_rank), self)
        return result

    setattr(launch_servers, MARK, True)
    return launch_servers


def _wrap_stop_profile(stop: Callable) -> Callable:
    """verl's own ``stop_profile`` of a replica (verl drives its engine profiling): what the
    engine wrote is gathered as the bridge's latest step's."""
    @functools.wraps(stop)
    async def stop_profile(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await stop(self, *args, **kwargs)
        bridge = active_bridge()
        engines = getattr(bridge, "engines", None)
        if engines is not None and not engines.drive and int(self.replica_rank) in engines.replicas:
            engines.gather(engines.step, only=int(self.replica_rank))
        return result

    setattr(stop_profile, MARK, True)
    return stop_profile


def patch_replicas() -> bool:
    """Wrap ``launch_servers`` of every replica class verl's registry hands out (idempotent);
    False when verl has no replica registry (before 0.7)."""
    try:
        from verl.workers.rollout.replica import RolloutReplicaRegistry
    except ImportError:
        return False
    get = RolloutReplicaRegistry.__dict__["get"]
    if getattr(get.__func__, MARK, False):
        return True
    original = get.__func__

    @functools.wraps(original)
    def get_replica_class(cls: Any, name: str) -> Any:
        replica_class = original(cls, name)
        launch = replica_class.launch_servers
        if not getattr(launch, MARK, False):
            replica_class.launch_servers = _wrap_launch(launch)
        stop = getattr(replica_class, "stop_profile", None)
        if stop is not None and not getattr(stop, MARK, False):
            replica_class.stop_profile = _wrap_stop_profile(stop)
        return replica_class

    setattr(get_replica_class, MARK, True)
    RolloutReplicaRegistry.get = classmethod(get_replica_class)
    return True
