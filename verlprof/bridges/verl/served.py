"""verl's served models: rollout replicas (0.7+) and the served reward model (0.8+).

verl generates on replica servers: ``LLMServerManager`` makes one ``RolloutReplica`` per
``tensor x data x pipeline parallel`` GPUs, and each replica's ``launch_servers`` starts its
server actors with ``<actor class>.options(...).remote(...)``: vLLM, SGLang and the engines
registered through ``RolloutReplicaRegistry`` name ``self.server_class``; TRT-LLM names its
module's ``TRTLLMHttpServer``. Two seams, both idle until a bridge is attached:

* driver side, :func:`patch_replicas`: every replica class verl makes a replica of has its
  ``launch_servers`` wrapped, and each Ray actor class
  it names directly (a module global) is replaced by a :class:`LaunchingClass` (until
  ``uninstall()``).
  While a bridged launch runs, the replica's ``server_class`` is one too, and the launch's
  :class:`ServerLauncher` is in the task's context (a ``ContextVar``: verl launches its
  replicas concurrently, each in a task of its own, and a direct class is shared by all): each
  server of a planned replica runs under the plan's launch argv (nsys), every server
  gets the environment that loads the bridge, and once the servers exist they are registered
  with the controller as the ranks of the plan's replica group (one per server: a replica
  wider than a node has one server per node). The controller
  then opens and closes its windows at the step boundaries, like a training rank's.
* server side, :func:`~verlprof.bridges.verl.worker_side.route_generation`: in a configured
  server process, the server class's
  ``generate`` (what verl's ``LLMServerClient`` calls for every request) runs inside the
  range ``<role>/generate`` while a window is open, so that ``verlprof report`` counts
  generation per replica and step, in the configured process only; a training process of a
  hybrid replica has its ``update_weights`` rerouted too (``rollout/update_weights``).
"""

from __future__ import annotations

import contextvars
from typing import Any, Callable, Dict, Optional

from verlprof.bridges.verl.driver_side import active_bridge, bridged_options
from verlprof.bridges.verl.engine_traces import node_of_actor
from verlprof.bridges.verl.patching import replace_global, wrap_once
from verlprof.config.verl_pools import REWARD_REPLICAS, ROLLOUT_REPLICAS, teacher_group
from verlprof.runtime.rank_rpc import describe_error


def replica_group(replica: Any, plan: Any = None) -> str:
    """The plan group of a verl replica: a distillation teacher's is its key's (verl names its
    servers ``..._<key>``) among the groups of ``plan``."""
    if getattr(replica, "is_teacher_model", False):
        groups = tuple(g.name for g in plan.groups) if plan is not None else ()
        return teacher_group(str(getattr(replica, "name_suffix", ""))[1:], groups)
    return REWARD_REPLICAS if getattr(replica, "is_reward_model", False) else ROLLOUT_REPLICAS


class ServerLauncher:
    """The options of the servers one replica launches, one per node in order: each is rank
    ``replica_rank * servers_per_replica + node`` of the plan's group, wrapped as the plan
    says; every one loads the bridge."""

    def __init__(self, plan: Any, group: Optional[str], replica_rank: int):
        self.plan, self.group = plan, group
        planned = plan.group(group) if group else None
        self.servers = planned.servers_per_replica if planned else 1
        self.first_rank = replica_rank * self.servers
        self.launched = 0

    def options(self, options: Dict[str, Any]) -> Dict[str, Any]:
        planned = self.group if self.launched < self.servers else None
        rank = self.first_rank + self.launched
        self.launched += 1
        return bridged_options(options, self.plan, planned, rank)


_LAUNCHING: contextvars.ContextVar[Optional[ServerLauncher]] = contextvars.ContextVar(
    "verlprof_launching", default=None)
"""The launcher of the bridged ``launch_servers`` running in this task, if any."""


class LaunchingClass:
    """A replica's server actor class, whose ``options`` go through the launch in progress in
    the caller's task (verl's own options where none is)."""

    def __init__(self, actor_class: Any):
        self.actor_class = actor_class

    def options(self, **options: Any) -> Any:
        launcher = _LAUNCHING.get()
        return self.actor_class.options(**(launcher.options(options) if launcher else options))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.actor_class, name)


def _direct_server_classes(launch: Callable) -> None:
    """Replace each Ray actor class ``launch`` names as a global of its module (TRT-LLM's
    ``TRTLLMHttpServer``) by a :class:`LaunchingClass`: idle outside a bridged launch."""
    import ray.actor

    namespace = launch.__globals__
    for name in launch.__code__.co_names:
        if isinstance(namespace.get(name), ray.actor.ActorClass):
            replace_global(namespace, name, LaunchingClass(namespace[name]))


def _wrap_launch(launch: Callable) -> Callable:
    async def launch_servers(self: Any, *args: Any, **kwargs: Any) -> Any:
        bridge = active_bridge()
        if bridge is None or _LAUNCHING.get() is not None:  # a subclass's calling its base's
            return await launch(self, *args, **kwargs)
        own = replica_group(self, bridge.plan)
        group = own if any(g.name == own for g in bridge.plan.groups) else None
        token = _LAUNCHING.set(ServerLauncher(bridge.plan, group, self.replica_rank))
        server_class = getattr(self, "server_class", None)
        if server_class is not None:
            self.server_class = LaunchingClass(server_class)
        try:
            result = await launch(self, *args, **kwargs)
        except Exception as error:  # verl raises it on; the manifest says which replica
            if group is not None:
                bridge.controller.note(f"{group} replica {self.replica_rank}: verl's launch_"
                                       f"servers raised {describe_error(error)}: not profiled")
            raise
        finally:
            _LAUNCHING.reset(token)
            if server_class is not None:
                self.server_class = server_class
        if group is not None and self.servers:
            bridge.register_replica(group, int(self.replica_rank), self.servers)
        if bridge.engines is not None and own == bridge.engines.route.group:
            node = await self.servers[0].__ray_call__.remote(node_of_actor) \
                if self.servers else ""
            bridge.engines.add(int(self.replica_rank), self, node)
        return result

    return launch_servers


def _wrap_stop_profile(stop: Callable) -> Callable:
    """verl's own ``stop_profile`` of a replica (verl drives its engine profiling): what the
    engine wrote is gathered as the bridge's latest step's."""
    async def stop_profile(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await stop(self, *args, **kwargs)
        bridge = active_bridge()
        engines = getattr(bridge, "engines", None)
        if engines is not None and not engines.drive and int(self.replica_rank) in engines.replicas:
            engines.gather(engines.step, only=int(self.replica_rank))
        return result

    return stop_profile


def patch_replicas() -> bool:
    """Wrap ``launch_servers`` and ``stop_profile`` of every replica class verl makes a
    replica of, on its first replica (idempotent); False before verl 0.7 (no replicas).

    The seam is ``RolloutReplica.__init__``, which every replica class calls: verl's registry
    hands out most classes, but ``get_rollout_replica_class`` imports its PD-disaggregated
    ones directly, and a recipe may set ``LLMServerManager.rollout_replica_class`` itself."""
    try:
        from verl.workers.rollout.replica import RolloutReplica
    except ImportError:
        return False

    def make(init: Callable) -> Callable:
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            replica_class, launch = type(self), type(self).launch_servers
            if wrap_once(replica_class, "launch_servers", _wrap_launch):
                _direct_server_classes(launch)
            if getattr(replica_class, "stop_profile", None) is not None:
                wrap_once(replica_class, "stop_profile", _wrap_stop_profile)

        return __init__

    wrap_once(RolloutReplica, "__init__", make)
    return True
