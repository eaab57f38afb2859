"""Which verl release a verl-layout config was written for, and what that release does.

verl's profiler keys changed meaning between releases without changing much shape, so the same
``enable: true`` means "no rank" in 0.6.0 and "rank 0" in 0.8.0. verlprof recognises the release
from the keys present (never from an installed verl: the config may be planned anywhere) and
keeps its semantics, read from each release's code (docs/migrating_from_verl.md has the table):

=========  ============================================================================
release    recognised by (newest first)
=========  ============================================================================
0.9.1      ``global_profiler.relocate_results`` / ``finish_hook_*``, or torch_memory's
           ``memory_snapshot_num_steps``
0.9.0      a role's ``tool_config.torch.schedule`` or ``profile_token_*``; ``trainer.use_v1``
0.8.0      ``reward.reward_model``, ``distillation``, a role's ``tool_config.torch.contents``
           or ``precision_debugger``
0.7.0      ``reward_model.use_reward_loop``, ``transfer_queue``
0.6.0      any other ``global_profiler`` config
0.5.0      ``actor_rollout_ref.profiler`` (one block for the hybrid worker)
0.4.1      role ``profiler: {discrete, all_ranks, ranks}`` blocks, ``trainer.profile_steps``
=========  ============================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple, get_args

from verlprof.config.topology import section
from verlprof.records import VerlRelease

RELEASES: Tuple[VerlRelease, ...] = get_args(VerlRelease)
"""verl releases verlprof knows, oldest first."""

ROLE_PROFILER_BLOCKS: Dict[str, str] = {
    "actor": "actor_rollout_ref.actor.profiler", "rollout": "actor_rollout_ref.rollout.profiler",
    "ref": "actor_rollout_ref.ref.profiler", "critic": "critic.profiler",
    "rm": "reward_model.profiler"}
"""Each role's ``profiler`` block in verl's configs."""

FINISH_HOOK_KEYS: Tuple[str, ...] = ("relocate_results", "finish_hook_cmd",
                                     "finish_hook_all_ranks", "finish_hook_ranks")
"""Keys verl 0.9.1 added to ``global_profiler`` (and, interpolated, to each role block)."""

_LEGACY_PHASES: Dict[str, Tuple[str, ...]] = {
    "rollout": ("generate_sequences",), "actor": ("compute_log_prob", "update_actor"),
    "ref": ("compute_ref_log_prob",), "critic": ("compute_values", "update_critic"),
    "rm": ("compute_rm_score",)}
"""Methods the fsdp/megatron workers of 0.4.1 to 0.7.0 annotate with ``DistProfiler.annotate``
(``verl/workers/fsdp_workers.py``, ``megatron_workers.py``)."""

_ENGINE_PHASES: Dict[str, Tuple[str, ...]] = {
    "rollout": (), "actor": ("compute_log_prob", "update_actor"),
    "ref": ("compute_ref_log_prob",), "critic": ("train_batch",), "rm": ()}
"""Methods verl 0.8.0+ annotates (``verl/workers/engine_workers.py``): the hybrid
``ActorRolloutRefWorker`` (``actor_compute_log_prob``, ``ref_compute_log_prob``,
``actor_update``) and the critic's ``TrainingWorker.train_batch`` (once per mini-batch; the
first call of a step opens the window). Rollout and reward model are served, not annotated."""


@dataclass(frozen=True)
class VerlTraits:
    """One verl release's semantics, resolved against the config (some depend on its keys)."""

    release: VerlRelease
    """The release recognised."""
    phases: Dict[str, Tuple[str, ...]] = field(default_factory=dict)
    """Per role, the methods this release's workers annotate and the trainer calls each step:
    one discrete window each (rollout's ``generate_sequences`` only while the trainer still
    calls it, i.e. before 0.7.0 and with ``rollout.mode: sync``)."""
    enable_picks_rank0: bool = False
    """``enable: true`` with no ranks selects rank 0 (0.8.0+); before, no rank."""
    rollout_follows_actor: bool = False
    """The hybrid worker profiles actor and rollout with the actor's block (0.6.0+)."""
    ref_follows_actor: bool = False
    """The reference policy is fused into the actor's worker and profiled with the actor's
    block (0.8.0+, and 0.7.0 with ``trainer.use_legacy_worker_impl: disable``)."""
    rm_served: bool = False
    """The reward model is served (reward loop / LLM servers), not a verl worker group, so no
    verl profiler can reach it (0.7.0 with ``reward_model.use_reward_loop``, 0.8.0+)."""
    critic_block_ignored: bool = False
    """verl 0.8.0 builds its critic without ``critic.profiler`` (a bug fixed in 0.9.0)."""
    hybrid_reads_rollout_block: bool = False
    """verl 0.4.1's FSDP hybrid worker reads only the rollout's block (the last assigned)."""
    torch_broken: bool = False
    """``tool: torch`` raises TypeError in verl's own ``start_profile`` (0.6.0, 0.7.0)."""

    def at_least(self, release: VerlRelease) -> bool:
        return RELEASES.index(self.release) >= RELEASES.index(release)


def detect(raw: Mapping[Any, Any], layout: str) -> VerlTraits:
    """The release of a config in verl's ``layout`` (``verl_profiler`` or
    ``verl_global_profiler``), with its semantics for this config."""
    release = _recognise(raw, layout)
    arr = section(raw, "actor_rollout_ref")
    legacy_impl = section(raw, "trainer").get("use_legacy_worker_impl")
    strategy = section(arr, "actor").get("strategy", "fsdp")
    reward_loop = section(raw, "reward_model").get("use_reward_loop") is True
    phases = dict(_ENGINE_PHASES if release in ("0.8.0", "0.9.0", "0.9.1") else _LEGACY_PHASES)
    if release not in ("0.4.1", "0.5.0", "0.6.0") or (
            section(arr, "rollout").get("mode") == "async"):
        phases["rollout"] = ()  # generation goes through the async rollout servers
    if release == "0.7.0" and legacy_impl == "disable" and section(raw, "critic").get(
            "strategy", "fsdp") in ("fsdp", "fsdp2"):
        phases["critic"] = ()  # 0.7.0's engine TrainingWorker annotates nothing
    if release == "0.7.0" and reward_loop:
        phases["rm"] = ()
    return VerlTraits(
        release=release, phases=phases,
        enable_picks_rank0=release in ("0.8.0", "0.9.0", "0.9.1"),
        rollout_follows_actor=release not in ("0.4.1", "0.5.0"),
        ref_follows_actor=release in ("0.8.0", "0.9.0", "0.9.1") or (
            release == "0.7.0" and legacy_impl == "disable"),
        rm_served=release in ("0.8.0", "0.9.0", "0.9.1") or (release == "0.7.0" and reward_loop),
        critic_block_ignored=release == "0.8.0",
        hybrid_reads_rollout_block=release == "0.4.1" and strategy in ("fsdp", "fsdp2"),
        torch_broken=release in ("0.6.0", "0.7.0"))


def _recognise(raw: Mapping[Any, Any], layout: str) -> VerlRelease:
    """The newest release some key of ``raw`` belongs to."""
    if layout != "verl_global_profiler":
        profiler = section(raw, "actor_rollout_ref").get("profiler")
        return "0.5.0" if isinstance(profiler, Mapping) else "0.4.1"
    gp = section(raw, "global_profiler")
    memory = section(section(gp, "global_tool_config"), "torch_memory")
    if any(key in gp for key in FINISH_HOOK_KEYS) or "memory_snapshot_num_steps" in memory:
        return "0.9.1"
    tools = [section(_role_block(raw, role), "tool_config") for role in ROLE_PROFILER_BLOCKS]
    torch = [section(tool_config, "torch") for tool_config in tools]
    if "use_v1" in section(raw, "trainer") or any(
            name in t for t in torch for name in ("schedule", "profile_token_start",
                                                  "profile_token_end")):
        return "0.9.0"
    if isinstance(section(raw, "reward").get("reward_model"), Mapping) \
            or isinstance(raw.get("distillation"), Mapping):
        return "0.8.0"
    if any("contents" in t for t in torch) or any("precision_debugger" in t for t in tools):
        return "0.8.0"
    if "use_reward_loop" in section(raw, "reward_model"):
        return "0.7.0"
    return "0.7.0" if isinstance(raw.get("transfer_queue"), Mapping) else "0.6.0"


def _role_block(raw: Mapping[Any, Any], role: str) -> Mapping[Any, Any]:
    node: Any = raw
    for part in ROLE_PROFILER_BLOCKS[role].split("."):
        node = section(node, part)
    return node


def role_of_method(method: str) -> Optional[str]:
    """The role whose phase ``method`` is in verl's workers (``generate_sequences`` → rollout),
    for a method verl annotates without a role label (0.4.1, and Megatron up to 0.6.0)."""
    for table in (_LEGACY_PHASES, _ENGINE_PHASES):
        for role, methods in table.items():
            if method in methods:
                return role
    return None

