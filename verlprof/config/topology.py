"""Which worker groups exist, which roles each process hosts, and how many ranks each has.

The plan needs the world size of every group to validate ranks and to know which processes
exist. It comes from the trainer config (``trainer.nnodes * trainer.n_gpus_per_node``, or a
group's own ``nnodes``/``n_gpus_per_node``) or from live worker groups (:meth:`Topology.of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from verlprof.errors import ConfigError

MAX_WORLD_SIZE = 1 << 17
"""Most ranks a worker group may have (131,072: 16,384 nodes of 8 GPUs). The largest RL runs
people profile have a few thousand; the bound keeps a mistyped size from hanging the plan."""

HYBRID_GROUP = "actor_rollout_ref"
"""The hybrid-engine group: actor, rollout and ref share one process per rank."""

HYBRID_ROLES: Tuple[str, ...] = ("actor", "rollout", "ref")

# group name -> (roles, config section that sizes it and can disable it)
_STANDALONE: Dict[str, Tuple[Tuple[str, ...], str]] = {
    "critic": (("critic",), "critic"),
    "rm": (("rm",), "reward_model"),
}


@dataclass(frozen=True)
class GroupTopology:
    """One Ray worker group: its roles (colocated in one process per rank) and world size."""

    name: str
    """Group name used in paths and worker names (``actor_rollout_ref``, ``critic``, ``rm``)."""

    roles: Tuple[str, ...]
    """Roles hosted by each process of this group."""

    world_size: int
    """Number of ranks (processes) in the group."""

    rank_span: int = 1
    """Global ranks each rank of the group owns: 1 for a worker group; for the servers of a
    served model's replicas (verl's rollout replicas since 0.7), the GPUs of one server: the
    replica's world size (tensor x data x pipeline parallel) split over its nodes."""

    engine: str = ""
    """The inference engine of a served model's replicas (``vllm``, ``sglang``, ...); empty
    for a worker group."""

    servers_per_replica: int = 1
    """Servers of each replica: verl starts one per node a replica spans (more than one when
    its world size exceeds the engine's ``n_gpus_per_node``). Rank ``r`` of a served group is
    server ``r % servers_per_replica`` of replica ``r // servers_per_replica``."""

    @property
    def served(self) -> bool:
        """The group is a served model's replicas: one server process per rank, whose
        windows are whole steps (it has no annotated phase of its own)."""
        return bool(self.engine)

    @property
    def replica_span(self) -> int:
        """GPUs (global ranks) of one replica; a selected global rank selects every server of
        the replica that owns it, as verl maps ``rollout.profiler.ranks``."""
        return self.rank_span * self.servers_per_replica

    @property
    def worker_name(self) -> str:
        """Name matched by NeMo RL worker patterns, e.g. ``actor_rollout_ref_worker``."""
        return f"{self.name}_worker"


@dataclass(frozen=True)
class UnprofiledGroup:
    """Processes of the run that verlprof knows of but cannot profile: listed by
    ``verlprof plan``, never an error."""

    name: str
    """Its name (a pool's, as the trainer names it)."""

    description: str
    """What runs there, in words."""

    world_size: int
    """Number of ranks (GPUs) it takes."""

    reason: str
    """Why it is not profiled."""


@dataclass(frozen=True)
class Topology:
    """All worker groups of a run, and whether their processes have CUDA."""

    groups: Tuple[GroupTopology, ...]
    """The worker groups, in launch order."""

    cuda: bool = True
    """Workers run on CUDA devices (decides the nsys trigger and trace defaults)."""

    unprofiled: Tuple[UnprofiledGroup, ...] = ()
    """Processes of the run that no plan can select, with the reason."""

    def group(self, name: str) -> Optional[GroupTopology]:
        """The group called ``name``, or None."""
        return next((g for g in self.groups if g.name == name), None)

    def group_of(self, role: str) -> Optional[GroupTopology]:
        """The group whose processes host ``role``, or None when the role is not deployed."""
        return next((g for g in self.groups if role in g.roles), None)

    @classmethod
    def of(cls, sizes: Mapping[str, int], *, cuda: bool = True, hybrid_engine: bool = True
           ) -> Topology:
        """A topology from group sizes, e.g. ``{"actor_rollout_ref": 2, "critic": 1, "rm": 1}``.

        Groups not named are absent. With ``hybrid_engine=False`` name ``actor``, ``rollout``
        and ``ref`` separately.
        """
        known = _group_roles(hybrid_engine)
        groups = []
        for name, size in sizes.items():
            if name not in known:
                raise ConfigError("topology", f"unknown group {name!r}; known: {sorted(known)}")
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ConfigError(f"topology.{name}",
                                  f"world size must be a positive int, got {size!r}")
            groups.append(GroupTopology(name, known[name], size))
        return cls(tuple(groups), cuda=cuda)

    @classmethod
    def from_trainer_config(cls, cfg: Mapping[str, Any]) -> Topology:
        """Derive groups and sizes from a verl-style trainer config (a plain nested dict)."""
        trainer = section(cfg, "trainer")
        default_size = _size(trainer, "trainer", default=1)
        hybrid = section(cfg, "actor_rollout_ref").get("hybrid_engine", True)
        if not isinstance(hybrid, bool):
            raise ConfigError("actor_rollout_ref.hybrid_engine",
                              f"must be true or false, got {hybrid!r}")
        cuda = device_is_cuda(trainer)
        sizes: Dict[str, int] = {}
        arr_size = _size(section(cfg, "actor_rollout_ref"), "actor_rollout_ref", default_size)
        for name in ((HYBRID_GROUP,) if hybrid else HYBRID_ROLES):
            sizes[name] = arr_size
        for name, (_, key) in _STANDALONE.items():
            block = section(cfg, key)
            if block.get("enable", True) is False:
                continue
            sizes[name] = _size(block, key, default_size)
        return cls.of(sizes, cuda=cuda, hybrid_engine=hybrid)


def device_is_cuda(trainer: Mapping[str, Any]) -> bool:
    """``trainer.device`` (default ``cuda``) is ``cuda``; it must be cuda, cpu or npu."""
    device = trainer.get("device", "cuda")
    if not isinstance(device, str) or device not in ("cuda", "cpu", "npu"):
        raise ConfigError("trainer.device", f"must be cuda, cpu or npu, got {device!r}")
    return device == "cuda"


def _group_roles(hybrid_engine: bool) -> Dict[str, Tuple[str, ...]]:
    roles: Dict[str, Tuple[str, ...]] = (
        {HYBRID_GROUP: HYBRID_ROLES} if hybrid_engine else {r: (r,) for r in HYBRID_ROLES})
    roles.update({name: r for name, (r, _) in _STANDALONE.items()})
    return roles


def section(node: Any, key: str) -> Mapping[Any, Any]:
    """``node[key]`` where both are mappings, else an empty one (a config read as written)."""
    value = node.get(key) if isinstance(node, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def _size(block: Mapping[str, Any], prefix: str, default: int) -> int:
    """``nnodes * n_gpus_per_node`` of a section, each falling back to ``default``'s parts."""
    if "nnodes" not in block and "n_gpus_per_node" not in block:
        return default
    values = []
    for key in ("nnodes", "n_gpus_per_node"):
        value = block.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{prefix}.{key}", f"must be a positive int, got {value!r}")
        values.append(value)
    return bounded_world_size(values[0] * values[1], f"{prefix}.nnodes")


def bounded_world_size(size: int, key: str) -> int:
    """``size`` if a plan can walk that many ranks; else one line naming ``key``."""
    if size > MAX_WORLD_SIZE:  # a plan walks every rank: a mistyped size must not hang it
        raise ConfigError(key, f"nnodes x n_gpus_per_node = {size} ranks, more than verlprof "
                               f"plans for ({MAX_WORLD_SIZE})")
    return size
