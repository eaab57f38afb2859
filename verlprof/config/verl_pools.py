"""The topology of a verl config: verl's resource pools, one process per GPU.

verl fuses every role of a resource pool into one process per GPU
(``create_colocated_worker_cls``), so a verl run's worker groups are its pools, not its roles:

``global_pool`` (``trainer.nnodes * trainer.n_gpus_per_node`` ranks)
    actor and rollout; ref when verl uses a reference policy (``algorithm.use_kl_in_reward``
    or ``actor_rollout_ref.actor.use_kl_loss``); critic when verl uses one (``critic.enable``
    when set, else ``algorithm.adv_estimator == gae``); the reward model when it is a verl worker
    group living there (0.4.1 to 0.6.0, and 0.7.0 without its reward loop).
``reward_pool`` (roles: rm)
    when the reward model is a worker group with a pool of its own:
    ``reward_model.enable_resource_pool`` (0.6.0, 0.7.0), sized by that block.
``rollout_replicas`` (roles: rollout)
    verl's rollout replicas (0.7.0+ when generation is served): ``LLMServerManager`` makes
    pool // (tensor x data x pipeline parallel) of them, on global_pool's GPUs (hybrid
    engine) or ``actor_rollout_ref.rollout.nnodes x n_gpus_per_node`` (standalone). A
    selected global rank selects the replica that owns it, as verl maps the ranks.
``reward_replicas`` (roles: rm)
    the served reward model's replicas (0.8.0+, ``reward.reward_model.enable``), sized by
    ``reward.reward_model.rollout`` on its own pool or global_pool's GPUs.
``teacher_replicas`` (roles: teacher)
    the distillation teacher's replicas (0.8.0+, ``distillation.enabled``), on the teacher's
    pool (``distillation.nnodes x n_gpus_per_node``), sized by its ``inference`` block as verl's
    ``TeacherModelManager`` sizes them; selected by that block's ``profiler`` (which verl itself
    never reads): GPU ranks of the teacher's pool, a rank selecting the replica that owns it.
    Several teachers (``distillation.teacher_models`` with more than verl's default entry): one
    group per teacher, ``teacher_replicas_<key>``, each on its ``num_replicas`` replicas.

From 0.8.0 the reward model is read from ``reward.reward_model``, or from the legacy top-level
``reward_model`` block where that is set (verl 0.8.0 migrates it); both set to different values
is an error naming both keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from verlprof import paths
from verlprof.config import validate as v
from verlprof.config.topology import (
    GroupTopology,
    Topology,
    bounded_world_size,
    device_is_cuda,
    section,
)
from verlprof.config.verl_release import VerlTraits
from verlprof.errors import ConfigError

GLOBAL_POOL = "global_pool"
REWARD_POOL = "reward_pool"
ROLLOUT_REPLICAS = "rollout_replicas"
"""verl's rollout replicas (``RolloutReplica``, 0.7+): one server process per replica."""
REWARD_REPLICAS = "reward_replicas"
"""The served reward model's replicas (0.8+)."""
TEACHER_REPLICAS = "teacher_replicas"
"""The distillation teacher's replicas (0.8+); ``teacher_replicas_<key>`` for each of several."""
TEACHER = "teacher"
"""The plan role of a teacher's replicas (ranges ``teacher/generate``)."""
SINGLE_TEACHER = "teacher_model"
"""verl's default entry of ``distillation.teacher_models``, dropped when others are added."""

RM_KEYS: Tuple[str, ...] = ("enable", "enable_resource_pool", "n_gpus_per_node", "nnodes")
"""The reward model's keys that decide its pool, in ``reward.reward_model`` (0.8.0+) and in
the legacy ``reward_model`` block."""

RM_DEFAULTS: Dict[str, Any] = {"enable": False, "enable_resource_pool": False,
                               "n_gpus_per_node": 8, "nnodes": 0}
"""verl 0.8.0+'s defaults of ``reward.reward_model`` (a value equal to them was not set)."""

@dataclass(frozen=True)
class RewardModelPlace:
    """Where verl puts an enabled reward model."""

    own_pool: bool
    """In ``reward_pool`` (else on ``global_pool``'s GPUs)."""
    size: int = 0
    """``reward_pool``'s ranks (0 when it has no pool of its own)."""


@dataclass(frozen=True)
class Teacher:
    """One distillation teacher as verl's ``MultiTeacherModelManager`` makes it."""

    group: str
    """Its plan group (``teacher_replicas``, or ``teacher_replicas_<key>`` among several)."""
    prefix: str
    """Its ``inference`` block's key (``distillation.teacher_models.<entry>.inference``)."""
    inference: Mapping[Any, Any]
    """That block (a RolloutConfig: the engine, its parallel sizes, the ``profiler``)."""
    gpus: int
    """GPUs of the teacher's pool (its slice of verl's teacher pool)."""


def topology(raw: Mapping[Any, Any], traits: VerlTraits,
             warn: Callable[[str], None] = lambda message: None) -> Topology:
    """The pools of ``raw`` (a resolved verl config) under ``traits``' release; ``warn`` gets
    the one-line warnings (a legacy key verl's own trainer no longer reads)."""
    trainer = section(raw, "trainer")
    cuda = device_is_cuda(trainer)
    arr = section(raw, "actor_rollout_ref")
    hybrid = arr.get("hybrid_engine", True)
    if not isinstance(hybrid, bool):
        raise ConfigError("actor_rollout_ref.hybrid_engine", f"must be true or false, got "
                                                            f"{v.show(hybrid)}")
    if not hybrid and not traits.at_least("0.9.0"):
        raise ConfigError("actor_rollout_ref.hybrid_engine", f"false is not supported by verl "
                                                            f"{traits.release}: its trainer "
                                                            "asserts the hybrid engine")
    roles: List[str] = ["actor", "rollout"]
    algorithm = section(raw, "algorithm")
    if _flag(algorithm, "use_kl_in_reward", "algorithm") or _flag(
            section(arr, "actor"), "use_kl_loss", "actor_rollout_ref.actor"):
        roles.append("ref")
    if _uses_critic(raw):
        roles.append("critic")
    rm = _reward_model(raw, traits, warn)
    groups = []
    if rm is not None and not rm.own_pool and not traits.rm_served:
        roles.append("rm")
    global_size = _pool_size(trainer, "trainer", 1)
    groups.append(GroupTopology(GLOBAL_POOL, tuple(roles), global_size))
    if rm is not None and rm.own_pool and not traits.rm_served:
        groups.append(GroupTopology(REWARD_POOL, ("rm",), rm.size))
    if traits.at_least("0.7.0") and not traits.phases.get("rollout"):
        pool = global_size if hybrid else _pool_size(section(arr, "rollout"),
                                                     "actor_rollout_ref.rollout", 1)
        rollout = section(arr, "rollout")
        groups += _replicas(ROLLOUT_REPLICAS, "rollout", rollout, "actor_rollout_ref.rollout",
                            pool, "actor_rollout_ref.rollout.n_gpus_per_node",
                            rollout.get("n_gpus_per_node", trainer.get("n_gpus_per_node", 8)),
                            warn)
    if rm is not None and traits.rm_served:
        reward = section(section(raw, "reward"), "reward_model")
        groups += _replicas(REWARD_REPLICAS, "rm", section(reward, "rollout"),
                            "reward.reward_model.rollout",
                            rm.size if rm.own_pool else global_size,
                            "reward.reward_model.n_gpus_per_node",
                            reward.get("n_gpus_per_node", RM_DEFAULTS["n_gpus_per_node"]))
    distillation = section(raw, "distillation")
    for teacher in teachers(raw):
        groups += _replicas(teacher.group, TEACHER, teacher.inference, teacher.prefix,
                            teacher.gpus, "distillation.n_gpus_per_node",
                            distillation.get("n_gpus_per_node"))
    return Topology(tuple(groups), cuda=cuda)


def teachers(raw: Mapping[Any, Any]) -> List[Teacher]:
    """The distillation teachers of ``raw`` (none while ``distillation.enabled`` is false), as
    verl resolves ``teacher_models``: its one default entry takes the whole teacher pool;
    entries added beside it replace it, each on ``num_replicas`` replicas, keyed by ``key``."""
    distillation = raw.get("distillation")
    if not isinstance(distillation, Mapping) or not _flag(distillation, "enabled",
                                                          "distillation"):
        return []
    size = _required_size(distillation, "distillation", "distillation.enabled")
    models = section(distillation, "teacher_models")
    entries = [name for name in models if len(models) == 1 or name != SINGLE_TEACHER]
    out: List[Teacher] = []
    for name in entries:
        model, prefix = section(models, name), f"distillation.teacher_models.{name}"
        inference = section(model, "inference")
        if len(entries) == 1:
            out.append(Teacher(TEACHER_REPLICAS, f"{prefix}.inference", inference, size))
            continue
        key = model.get("key")
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{prefix}.key", f"must name the teacher when there are several "
                                               f"(verl routes by it), got {v.show(key)}")
        count = v.positive_int(model.get("num_replicas"), f"{prefix}.num_replicas",
                               "there are several teachers")
        group = teacher_group(key)
        if any(t.group == group for t in out):
            raise ConfigError(f"{prefix}.key", f"{key!r} names the same servers as another "
                                               "teacher's key (verl replaces / by _ in them)")
        span = _span(inference, f"{prefix}.inference")
        out.append(Teacher(group, f"{prefix}.inference", inference, count * span))
    return out


def teacher_group(key: str, groups: Tuple[str, ...] = ()) -> str:
    """The plan group of the teacher keyed ``key`` (a replica's ``name_suffix``): the one
    teacher's group where ``groups`` (the plan's) has it, else ``teacher_replicas_<key>``."""
    if TEACHER_REPLICAS in groups:
        return TEACHER_REPLICAS
    return f"{TEACHER_REPLICAS}_{paths.sanitize(key.replace('/', '_'))}"


def _replicas(name: str, role: str, rollout: Mapping[Any, Any], prefix: str,
              pool: int, node_key: str, gpus_per_node: Any,
              warn: Callable[[str], None] = lambda message: None) -> List[GroupTopology]:
    """A served model's replicas as verl's ``LLMServerManager`` makes them: each spans tensor x
    data x pipeline parallel GPUs of its pool (none when one does not fit), with one server
    per node of ``gpus_per_node`` GPUs it spans (``node_key`` sets it)."""
    span = _span(rollout, prefix)
    engine = rollout.get("name")
    engine = engine if isinstance(engine, str) and engine and engine != "???" else "unnamed"
    disaggregated = section(rollout, "disaggregation")
    if name == ROLLOUT_REPLICAS and _flag(disaggregated, "enabled", f"{prefix}.disaggregation"):
        servers = _pd_servers(disaggregated, f"{prefix}.disaggregation", rollout, warn)
        if servers == 0:
            return []
        span *= servers  # one prefill server and its decode servers, on one node (verl's PD)
    else:
        per_node = min(v.positive_int(gpus_per_node, node_key), span)  # gpus_per_replica_node
        if span % per_node:
            raise ConfigError(node_key, f"{gpus_per_node} GPUs per node do not divide a "
                                        f"replica's {span} GPUs ({prefix}: tensor x data x "
                                        "pipeline parallel); verl asserts they do")
        servers = span // per_node
    if pool // span < 1:
        return []
    return [GroupTopology(name, (role,), pool // span * servers, rank_span=span // servers,
                          engine=str(engine), servers_per_replica=servers)]


def _pd_servers(block: Mapping[Any, Any], prefix: str, rollout: Mapping[Any, Any],
                warn: Callable[[str], None]) -> int:
    """Servers of one PD-disaggregated replica (verl's ``vLLMPDReplica`` / ``SGLangPDReplica``:
    its prefill server, then each decode server, of tensor parallel GPUs each); 0 with a
    warning when decode and prefill differ in GPUs (each rank of a group spans as many)."""
    counts = [v.positive_int(block.get(key, 1), f"{prefix}.{key}")
              for key in ("prefill_replicas", "decode_replicas")]
    prefill_tp = rollout.get("tensor_model_parallel_size", 1)
    decode_tp = block.get("decode_tensor_model_parallel_size")
    if decode_tp is not None and decode_tp != prefill_tp:
        warn(f"{prefix}.decode_tensor_model_parallel_size: {v.show(decode_tp)} GPUs per decode "
             f"server against the prefill's {prefill_tp}; verlprof plans the servers of a "
             "replica with equal GPUs, so these PD replicas are not profiled")
        return 0
    return sum(counts)


def _span(rollout: Mapping[Any, Any], prefix: str) -> int:
    """GPUs of one replica: tensor x data x pipeline parallel (verl's replica world size)."""
    span = 1
    for key in ("tensor_model_parallel_size", "data_parallel_size",
                "pipeline_model_parallel_size"):
        span *= v.positive_int(rollout.get(key, 1), f"{prefix}.{key}")
    return span


def _uses_critic(raw: Mapping[Any, Any]) -> bool:
    """verl's ``need_critic``: ``critic.enable`` when not null, else GAE advantages."""
    enable = section(raw, "critic").get("enable")
    if enable is not None:
        return v.boolean(enable, "critic.enable")
    estimator = section(raw, "algorithm").get("adv_estimator", "gae")
    return estimator == "gae"


def _reward_model(raw: Mapping[Any, Any], traits: VerlTraits,
                  warn: Callable[[str], None]) -> Optional[RewardModelPlace]:
    """Where the reward model runs, or None when it is off."""
    if traits.at_least("0.8.0"):
        values, keys = _rm_from_both(raw)
        legacy = [key for key in keys.values() if key.startswith("reward_model.")]
        if legacy and traits.at_least("0.9.0"):
            # verl 0.9's main_ppo dropped migrate_legacy_reward_impl (only fully_async calls it)
            warn(f"{legacy[0]}: verl {traits.release}'s main_ppo no longer reads the legacy "
                 "reward_model block (only its fully_async entry point migrates it); verlprof "
                 f"reads it as verl 0.8.0 did: move it to reward.{legacy[0]}")
    else:
        block = section(raw, "reward_model")
        values = {k: block.get(k) for k in RM_KEYS}
        keys = {k: f"reward_model.{k}" for k in RM_KEYS}
    if not v.boolean(values["enable"], keys["enable"]):
        return None
    own_pool = traits.at_least("0.6.0") and v.boolean(values["enable_resource_pool"],
                                                      keys["enable_resource_pool"])
    if not own_pool:
        return RewardModelPlace(own_pool=False)
    size = 1
    for name in ("nnodes", "n_gpus_per_node"):
        size *= v.positive_int(values[name], keys[name],
                               f"{keys['enable_resource_pool']} is true (verl sizes "
                               "reward_pool with it)")
    return RewardModelPlace(own_pool=True, size=bounded_world_size(size, keys["nnodes"]))


def _rm_from_both(raw: Mapping[Any, Any]) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """0.8.0+: ``reward.reward_model``, overridden by the legacy ``reward_model`` where set."""
    new = section(section(raw, "reward"), "reward_model")
    legacy = section(raw, "reward_model")
    values, keys = {}, {}
    for name in RM_KEYS:
        new_value, old_value = new.get(name, RM_DEFAULTS[name]), legacy.get(name)
        if old_value is None:
            values[name], keys[name] = new_value, f"reward.reward_model.{name}"
            continue
        if new_value != old_value and new_value != RM_DEFAULTS[name]:
            raise ConfigError(f"reward_model.{name}", f"is {v.show(old_value)} but "
                                                      f"reward.reward_model.{name} is "
                                                      f"{v.show(new_value)}; set only "
                                                      f"reward.reward_model.{name} (the legacy "
                                                      "reward_model block is for old configs)")
        values[name], keys[name] = old_value, f"reward_model.{name}"
    return values, keys


def _required_size(block: Mapping[Any, Any], prefix: str, because: str) -> int:
    size = 1
    for name in ("nnodes", "n_gpus_per_node"):
        size *= v.positive_int(block.get(name), f"{prefix}.{name}", f"{because} is true")
    return bounded_world_size(size, f"{prefix}.nnodes")


def _pool_size(block: Mapping[Any, Any], prefix: str, default: int) -> int:
    """``nnodes * n_gpus_per_node``; a missing one counts as ``default``."""
    size = 1
    for name in ("nnodes", "n_gpus_per_node"):
        size *= v.positive_int(block.get(name, default), f"{prefix}.{name}")
    return bounded_world_size(size, f"{prefix}.nnodes")


def _flag(block: Mapping[Any, Any], name: str, prefix: str) -> bool:
    return v.boolean(block.get(name), f"{prefix}.{name}")
