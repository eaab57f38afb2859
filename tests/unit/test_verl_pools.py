"""The topology of verl configs: verl's resource pools, the reward model's place in each
release, the distillation teachers' replicas; the seed layout keeps its own groups."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from tests.unit.test_verl_keys import V091, cfg_with, error, load, plan, v06, v08
from verlprof.plan.render import render_plan


def groups(cfg):
    return [(g.name, g.roles, g.world_size) for g in load(cfg).topology.groups]


def test_global_pool_hosts_actor_rollout_and_what_verl_uses():
    assert groups(V091) == [("global_pool", ("actor", "rollout", "critic"), 4),
                            ("rollout_replicas", ("rollout",), 4)]  # served, 1 GPU each
    kl = cfg_with(V091, **{"algorithm.use_kl_in_reward": True})
    assert groups(kl)[0][1] == ("actor", "rollout", "ref", "critic")
    no_critic = cfg_with(V091, **{"algorithm.adv_estimator": "grpo"})
    assert groups(no_critic)[0][1] == ("actor", "rollout")
    forced = cfg_with(V091, **{"algorithm.adv_estimator": "grpo", "critic.enable": True})
    assert groups(forced)[0][1] == ("actor", "rollout", "critic")
    sized = cfg_with(V091, trainer={"nnodes": 2, "n_gpus_per_node": 8, "device": "cpu"})
    assert groups(sized)[0][2] == 16


def test_the_seed_layout_keeps_its_own_groups():
    seed = {"trainer": {"profile_steps": [1], "device": "cpu", "n_gpus_per_node": 2},
            "actor_rollout_ref": {"actor": {"profile_ranks": [0]}},
            "critic": {"profile_ranks": [0]}, "reward_model": {"enable": False}}
    assert groups(seed) == [("actor_rollout_ref", ("actor", "rollout", "ref"), 2),
                            ("critic", ("critic",), 2)]


def test_reward_model_in_global_pool_or_its_own_pool_before_080():
    rm = {"reward_model": {"enable": True}}
    assert groups(cfg_with(v06(), **rm))[0][1] == ("actor", "rollout", "critic", "rm")
    pool = cfg_with(v06(), reward_model={"enable": True, "enable_resource_pool": True,
                                         "nnodes": 1, "n_gpus_per_node": 2})
    assert groups(pool) == [("global_pool", ("actor", "rollout", "critic"), 4),
                            ("reward_pool", ("rm",), 2)]
    bad = cfg_with(v06(), reward_model={"enable": True, "enable_resource_pool": True,
                                        "nnodes": 1, "n_gpus_per_node": 0})
    assert error(bad) == ("reward_model.n_gpus_per_node: must be a positive int when "
                          "reward_model.enable_resource_pool is true (verl sizes reward_pool "
                          "with it), got 0")


def test_reward_model_from_reward_reward_model_when_the_legacy_block_is_null():
    legacy_nulls = {k: None for k in ("enable", "enable_resource_pool", "nnodes",
                                      "n_gpus_per_node")}
    cfg = cfg_with(V091, reward={"reward_model": {"enable": True, "enable_resource_pool": True,
                                                  "nnodes": 1, "n_gpus_per_node": 2}},
                   reward_model=legacy_nulls)
    assert groups(cfg)[2] == ("reward_replicas", ("rm",), 2)  # served on its own pool
    served = cfg_with(V091, reward={"reward_model": {"enable": True}}, reward_model=legacy_nulls)
    loaded = load(served)
    assert groups(served)[1:] == [("rollout_replicas", ("rollout",), 4),
                                  ("reward_replicas", ("rm",), 4)]  # on global_pool's GPUs
    assert loaded.topology.unprofiled == ()


def test_reward_model_from_the_legacy_block_when_it_is_set():
    cfg = cfg_with(V091, reward={"reward_model": {"enable": False}},
                   reward_model={"enable": True, "enable_resource_pool": True, "nnodes": 1,
                                 "n_gpus_per_node": 4})
    assert groups(cfg)[2] == ("reward_replicas", ("rm",), 4)


def test_both_reward_model_blocks_set_differently_is_one_error_naming_both():
    cfg = cfg_with(V091, reward={"reward_model": {"enable": True, "enable_resource_pool": True,
                                                  "nnodes": 2, "n_gpus_per_node": 2}},
                   reward_model={"nnodes": 1})
    assert error(cfg) == ("reward_model.nnodes: is 1 but reward.reward_model.nnodes is 2; set "
                          "only reward.reward_model.nnodes (the legacy reward_model block is "
                          "for old configs)")


def test_distillation_teacher_is_a_group_of_replicas_on_its_pool():
    inference = {"name": "vllm", "tensor_model_parallel_size": 2}
    cfg = cfg_with(v08(), distillation={"enabled": True, "nnodes": 1, "n_gpus_per_node": 8,
                                        "teacher_models": {"teacher_model": {
                                            "inference": inference}}})
    p = plan(cfg)
    teacher = next(g for g in p.groups if g.name == "teacher_replicas")
    assert (teacher.roles, teacher.world_size, teacher.rank_span, teacher.engine) == (
        ("teacher",), 4, 2, "vllm")
    assert p.unprofiled == () and not [x for x in p.processes if x.group == "teacher_replicas"]
    console = Console(file=io.StringIO(), width=300)
    render_plan(p, console)
    assert "teacher_replicas (vllm replicas of 2 GPU(s))" in console.file.getvalue()
    off = cfg_with(v08(), distillation={"enabled": False, "nnodes": 0})
    assert "teacher_replicas" not in [name for name, _, _ in groups(off)]
    bad = cfg_with(v08(), distillation={"enabled": True, "nnodes": 0, "n_gpus_per_node": 8})
    assert error(bad).startswith("distillation.nnodes: must be a positive int when "
                                 "distillation.enabled is true, got 0")


def test_several_teachers_are_one_group_each_named_by_key():
    """verl drops its default entry when others are added: each teacher takes num_replicas
    replicas of its own parallel size, keyed by ``key`` (the name verl gives its servers)."""
    def model(key, replicas, tp):
        return {"key": key, "num_replicas": replicas,
                "inference": {"name": "sglang", "tensor_model_parallel_size": tp}}

    default = {"inference": {"name": "vllm", "tensor_model_parallel_size": 2}}
    distillation = {"enabled": True, "nnodes": 1, "n_gpus_per_node": 8, "teacher_models": {
        "teacher_model": default, "math": model("openai/gsm8k", 2, 2), "geo": model("geo", 4, 1)}}
    teachers = [g for g in groups(cfg_with(v08(), distillation=distillation))
                if g[1] == ("teacher",)]
    assert teachers == [("teacher_replicas_openai_gsm8k", ("teacher",), 2),
                        ("teacher_replicas_geo", ("teacher",), 4)]
    clash = {**distillation, "teacher_models": {"a": model("x/y", 1, 1), "b": model("x_y", 1, 1)}}
    assert error(cfg_with(v08(), distillation=clash)) == (
        "distillation.teacher_models.b.key: 'x_y' names the same servers as another teacher's "
        "key (verl replaces / by _ in them)")
    keyless = {**distillation, "teacher_models": {"a": model(None, 1, 1), "b": model("b", 1, 1)}}
    assert error(cfg_with(v08(), distillation=keyless)) == (
        "distillation.teacher_models.a.key: must name the teacher when there are several "
        "(verl routes by it), got None")


@pytest.mark.parametrize("release_cfg, ok", [(v06, False), (v08, False),
                                             (lambda: V091, True)])
def test_hybrid_engine_false(release_cfg, ok):
    cfg = cfg_with(release_cfg(), **{"actor_rollout_ref.hybrid_engine": False})
    if ok:  # verl 0.9 runs separate_async without it
        assert groups(cfg)[0][0] == "global_pool"
    else:
        assert "its trainer asserts the hybrid engine" in error(cfg)


def test_required_scenario_of_verl_091_own_ppo_trainer_keys():
    """verl 0.9.1's composed ppo_trainer with the brief's overrides, as a dict: global_pool
    (actor, rollout, ref, critic), rank 0 for the critic, rank 1 for the actor."""
    cfg = cfg_with(V091, **{"actor_rollout_ref.actor.use_kl_loss": True,
                            "trainer.n_gpus_per_node": 8})
    p = plan(cfg)
    assert [(g.name, g.roles) for g in p.groups] == [
        ("global_pool", ("actor", "rollout", "ref", "critic")),
        ("rollout_replicas", ("rollout",))]
    assert [(proc.group, proc.rank, proc.selected_roles) for proc in p.processes] == [
        ("global_pool", 0, ("critic",)), ("global_pool", 1, ("actor", "rollout", "ref")),
        ("rollout_replicas", 1, ("rollout",))]  # the replica owning global rank 1
