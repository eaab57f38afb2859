"""The three layouts, their detection, aliases, defaults and warnings."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from verlprof.config import ConfigError, config_from_dict, load_config
from verlprof.config.build import DEFAULT_CPU_WORKER_OPTIONS, DEFAULT_CUDA_WORKER_OPTIONS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "configs"

SEED = {
    "trainer": {"nnodes": 1, "n_gpus_per_node": 2, "device": "cpu", "profile_steps": [1, 2, 5],
                "profile_continuous_steps": False,
                "profiler": {"tool": "nsys", "enabled": True, "output_dir": "/tmp/vp"},
                "controller_nsight_options": {"trace": "cuda,nvtx,osrt"},
                "worker_nsight_options": {"trace": "cuda,nvtx,cublas"}},
    "actor_rollout_ref": {
        "hybrid_engine": True,
        "actor": {"profile_ranks": [0, 1], "profile_ranks_all": False,
                  "profile_discrete": False},
        "rollout": {"profile_ranks": [], "profile_discrete": False},
        "ref": {"profile_discrete": False}},
    "critic": {"profile_ranks": [0], "profile_discrete": False},
    "reward_model": {"profile_ranks": [], "profile_discrete": False},
}


def load(cfg, env=None):
    return config_from_dict(cfg, env={} if env is None else env)


def with_changes(base, **changes):
    """A deep copy of ``base`` with changes; ``a__b=v`` sets ``cfg["a"]["b"] = v``."""
    cfg = copy.deepcopy(base)
    for dotted, value in changes.items():
        parts = dotted.split("__")
        node = cfg
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return cfg


def error(cfg, env=None) -> str:
    with pytest.raises(ConfigError) as info:
        load(cfg, env)
    assert "\n" not in str(info.value)
    return str(info.value)


# ---------------------------------------------------------------- seed layout


def test_seed_layout_reads_every_key():
    loaded = load(SEED)
    prof = loaded.profiling
    assert prof.source == "seed"
    assert prof.steps == (1, 2, 5) and not prof.continuous_steps
    assert prof.tool == "nsys" and prof.enabled and prof.output_dir == "/tmp/vp"
    assert prof.components.actor.ranks == (0, 1)
    assert prof.components.actor.ranks_key == "actor_rollout_ref.actor.profile_ranks"
    assert prof.components.actor.discrete_key == "actor_rollout_ref.actor.profile_discrete"
    assert prof.components.rollout.ranks == ()
    assert prof.components.critic.ranks == (0,)
    assert prof.components.critic.ranks_key == "critic.profile_ranks"
    assert prof.components.rm.ranks_key == "reward_model.profile_ranks"
    assert prof.nsys.controller_options == {"trace": "cuda,nvtx,osrt"}
    assert prof.nsys.worker_options == {"trace": "cuda,nvtx,cublas"}
    assert loaded.warnings == ()


def test_seed_profiler_block_details():
    cfg = with_changes(SEED, trainer__profiler={
        "tool": "torch", "enabled": True, "output_dir": "rel/dir",
        "filename_template": "{component}-{step}-{rank}",
        "nsys": {"trigger": "nvtx", "executable": "/opt/nsys/bin/nsys",
                 "worker_flags": ["stats"], "controller_flags": ["--force-overwrite"]},
        "torch": {"record_shapes": True, "profile_memory": True, "with_stack": False,
                  "cuda": None},
        "rocprof_sys": {"args": {"trace": True}, "env": {"ROCPROFSYS_X": 3},
                        "executable": "rocprof-sys-python"},
        "phases": {"actor": ["update_actor"], "critic": ["update_critic", "compute_values"]},
        "rpc_timeout_s": 5, "finalize_timeout_s": 7.5, "on_rank_failure": "raise"})
    prof = load(cfg).profiling
    assert prof.tool == "torch"
    assert prof.output_dir == os.path.abspath("rel/dir")
    assert prof.filename_template == "{component}-{step}-{rank}"
    assert prof.nsys.trigger == "nvtx" and prof.nsys.executable == "/opt/nsys/bin/nsys"
    assert prof.nsys.worker_flags == ("stats",)
    assert prof.nsys.controller_flags == ("--force-overwrite",)
    assert prof.torch.record_shapes and prof.torch.profile_memory and prof.torch.cuda is None
    assert prof.rocprof_sys.args == {"trace": True}
    assert prof.rocprof_sys.env == {"ROCPROFSYS_X": "3"}
    assert prof.phases == {"actor": ("update_actor",),
                           "critic": ("update_critic", "compute_values")}
    assert prof.rpc_timeout_s == 5.0 and prof.finalize_timeout_s == 7.5
    assert prof.on_rank_failure == "raise"


def test_profiling_off_by_default():
    prof = load({}).profiling
    assert prof.steps == () and not prof.active and prof.source == "seed"
    assert prof.components.actor.ranks_key == "actor_rollout_ref.actor.profile_ranks"


def test_steps_are_sorted():
    assert load(with_changes(SEED, trainer__profile_steps=[5, 1, 2])).profiling.steps == (1, 2, 5)


def test_null_and_empty_ranks_select_nothing_all_ranks_selects_all():
    cfg = with_changes(SEED, critic={"profile_ranks": None},
                       reward_model={"profile_ranks": [], "profile_ranks_all": True})
    prof = load(cfg).profiling
    assert not prof.components.critic.selects_any
    assert prof.components.rm.all_ranks and prof.components.rm.selects_any


def test_hybrid_engine_false_topology():
    cfg = with_changes(SEED, actor_rollout_ref__hybrid_engine=False)
    loaded = load(cfg)
    assert [g.name for g in loaded.topology.groups] == ["actor", "rollout", "ref", "critic", "rm"]


# ---------------------------------------------------------------- aliases


def test_alias_sections_are_read():
    loaded = load_config(str(FIXTURES / "seed_aliases.yaml"), env={})
    prof = loaded.profiling
    assert prof.components.critic.ranks == (1,)
    assert prof.components.critic.ranks_key == "actor_rollout_ref.critic.profile_ranks"
    assert prof.components.rm.all_ranks
    assert loaded.warnings == ()


def test_top_level_rm_alias():
    cfg = with_changes(SEED, rm={"profile_ranks": [0]})
    del cfg["reward_model"]
    prof = load(cfg).profiling
    assert prof.components.rm.ranks == (0,) and prof.components.rm.ranks_key == "rm.profile_ranks"


def test_main_section_wins_over_alias_with_warning():
    cfg = with_changes(SEED, actor_rollout_ref__critic={"profile_ranks": [1]})
    loaded = load(cfg)
    assert loaded.profiling.components.critic.ranks == (0,)
    assert ("read critic.profile_ranks, critic.profile_discrete; ignored "
            "actor_rollout_ref.critic.profile_ranks") in loaded.warnings


def test_alias_warning_exact_text_single_keys():
    cfg = with_changes(SEED, critic={"profile_ranks": [0]},
                       actor_rollout_ref__critic={"profile_ranks": [1]})
    assert load(cfg).warnings == (
        "read critic.profile_ranks; ignored actor_rollout_ref.critic.profile_ranks",)


def test_rm_aliases_priority():
    cfg = with_changes(SEED, rm={"profile_ranks": [1]},
                       actor_rollout_ref__rm={"profile_ranks": [2]})
    del cfg["reward_model"]
    loaded = load(cfg)
    assert loaded.profiling.components.rm.ranks == (1,)
    assert loaded.warnings == ("read rm.profile_ranks; ignored actor_rollout_ref.rm.profile_ranks",)


def test_sections_without_profile_keys_do_not_count():
    cfg = with_changes(SEED, critic={"strategy": "fsdp"},
                       actor_rollout_ref__critic={"profile_ranks": [1]})
    loaded = load(cfg)
    assert loaded.profiling.components.critic.ranks == (1,) and loaded.warnings == ()


# ---------------------------------------------------------------- verl 2025-06/07


def test_verl_profiler_layout_fixture():
    loaded = load_config(str(FIXTURES / "verl_profiler_2025_07.yaml"), env={})
    prof = loaded.profiling
    assert prof.source == "verl_profiler"
    assert prof.steps == (1, 2, 5) and prof.continuous_steps
    assert prof.components.actor.ranks == (0, 1)
    assert prof.components.actor.ranks_key == "actor_rollout_ref.actor.profiler.ranks"
    assert prof.components.critic.all_ranks
    assert prof.components.critic.discrete_key == "critic.profiler.discrete"
    assert prof.nsys.worker_options["capture-range-end"] is None
    assert prof.output_dir == os.path.abspath("checkpoints/verl_examples/gsm8k/profiling")
    assert loaded.warnings == ()


def test_verl_profiler_discrete_per_role():
    cfg = {"trainer": {"profile_steps": [1]},
           "critic": {"profiler": {"discrete": True, "all_ranks": False, "ranks": [0]}}}
    prof = load(cfg).profiling
    assert prof.source == "verl_profiler" and prof.components.critic.discrete
    assert not prof.components.actor.discrete
    assert prof.components.actor.ranks_key == "actor_rollout_ref.actor.profiler.ranks"


def test_empty_profiler_block_is_seed_layout():
    cfg = with_changes(SEED, critic={"profiler": {}})
    prof = load(cfg).profiling
    assert prof.source == "seed" and not prof.components.critic.selects_any


# ---------------------------------------------------------------- verl 2025-08+


def test_global_profiler_flat_fixture():
    loaded = load_config(str(FIXTURES / "verl_global_profiler_flat.yaml"), env={})
    prof = loaded.profiling
    assert prof.source == "verl_global_profiler"
    assert prof.tool == "nsys" and prof.steps == (2, 3)
    assert prof.output_dir == os.path.abspath("outputs/profile")
    # nsys discrete is global in verl: every role gets it
    for role in ("actor", "rollout", "ref", "critic", "rm"):
        comp = prof.components.get(role)
        assert comp.discrete
        assert comp.discrete_key == "global_profiler.global_tool_config.nsys.discrete"
    assert prof.components.actor.ranks == (0,) and prof.components.rollout.ranks == (0,)
    assert prof.components.ref.ranks == ()
    assert prof.components.critic.ranks == (1,)
    assert prof.components.critic.ranks_key == "critic.profiler.ranks"
    assert prof.nsys.controller_options["trace"] == "cuda,nvtx,cublas,ucx"
    assert loaded.warnings == ()


GLOBAL = {
    "trainer": {"device": "cuda", "n_gpus_per_node": 4},
    "global_profiler": {"tool": "nsys", "steps": [1], "save_path": "/tmp/gp",
                        "global_tool_config": {"nsys": {"discrete": False}}},
    "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "ranks": [0]}}},
}


def test_global_profiler_enable_false_means_not_profiled():
    cfg = with_changes(GLOBAL, critic={"profiler": {"enable": False, "ranks": [0]}})
    loaded = load(cfg)
    assert not loaded.profiling.components.critic.selects_any
    assert ("critic.profiler.ranks is set but critic.profiler.enable is false, so this role is "
            "not profiled") in loaded.warnings


def test_global_profiler_tool_null_disables_with_warning():
    cfg = with_changes(GLOBAL, global_profiler__tool=None)
    loaded = load(cfg)
    assert not loaded.profiling.enabled and not loaded.profiling.active
    assert any(w.startswith("global_profiler.tool is null") for w in loaded.warnings)


def test_global_profiler_torch_contents_and_per_role_discrete():
    cfg = with_changes(GLOBAL, global_profiler__tool="torch",
                       global_profiler__global_tool_config={
                           "torch": {"contents": ["cuda", "shapes"], "discrete": False}},
                       critic={"profiler": {"enable": True, "ranks": [0], "tool_config": {
                           "torch": {"discrete": True, "contents": ["stack"]}}}})
    prof = load(cfg).profiling
    assert prof.tool == "torch"
    assert prof.torch.record_shapes and prof.torch.with_stack and prof.torch.cuda is True
    assert not prof.torch.profile_memory
    assert prof.components.critic.discrete
    assert prof.components.critic.discrete_key == "critic.profiler.tool_config.torch.discrete"
    assert not prof.components.actor.discrete
    assert prof.components.actor.discrete_key == "global_profiler.global_tool_config.torch.discrete"


def test_global_profiler_trainer_profiler_block_still_read():
    cfg = with_changes(GLOBAL, trainer__profiler={"tool": "nsys", "output_dir": "/tmp/own",
                                                  "filename_template": "{component}{step}{rank}"})
    loaded = load(cfg)
    assert loaded.profiling.output_dir == "/tmp/own"
    assert loaded.profiling.filename_template == "{component}{step}{rank}"
    assert "read trainer.profiler.output_dir; ignored global_profiler.save_path" in loaded.warnings


def test_global_profiler_role_save_path_and_nsys_discrete_warnings():
    cfg = with_changes(GLOBAL, critic={"profiler": {
        "enable": True, "ranks": [0], "save_path": "/elsewhere",
        "tool_config": {"nsys": {"discrete": True}}}})
    loaded = load(cfg)
    assert not loaded.profiling.components.critic.discrete
    assert any(w.startswith("ignored critic.profiler.save_path (/elsewhere)")
               for w in loaded.warnings)
    assert any(w.startswith("ignored critic.profiler.tool_config.nsys.discrete (true)")
               for w in loaded.warnings)


def test_global_profiler_enable_missing_defaults_to_true():
    prof = load(GLOBAL).profiling
    assert prof.components.actor.ranks == (0,)


# ---------------------------------------------------------------- detection and mixing


@pytest.mark.parametrize("cfg, layout", [
    ({}, "seed"),
    ({"critic": {"profile_ranks": [0]}}, "seed"),
    ({"critic": {"profiler": {"ranks": [0]}}}, "verl_profiler"),
    ({"actor_rollout_ref": {"ref": {"profiler": {"discrete": True}}}}, "verl_profiler"),
    ({"actor_rollout_ref": {"critic": {"profiler": {"all_ranks": True}}}}, "verl_profiler"),
    ({"global_profiler": {}}, "verl_global_profiler"),
    ({"global_profiler": {"tool": "nsys"}, "critic": {"profiler": {"ranks": [0]}}},
     "verl_global_profiler"),
])
def test_detection(cfg, layout):
    assert load(cfg).profiling.source == layout


def test_roles_may_use_either_old_layout():
    cfg = {"trainer": {"profile_steps": [1]}, "critic": {"profiler": {"ranks": [0]}},
           "actor_rollout_ref": {"actor": {"profile_ranks": [1]}}}
    prof = load(cfg).profiling
    assert prof.components.critic.ranks == (0,) and prof.components.actor.ranks == (1,)


# ---------------------------------------------------------------- defaults


def test_default_worker_options_cuda_and_cpu():
    base = {"trainer": {"profile_steps": [1]}, "critic": {"profile_ranks": [0]}}
    assert load(base).profiling.nsys.worker_options == DEFAULT_CUDA_WORKER_OPTIONS
    assert DEFAULT_CUDA_WORKER_OPTIONS == {"trace": "cuda,nvtx,cublas",
                                           "cuda-memory-usage": "true",
                                           "cuda-graph-trace": "node"}
    cpu = with_changes(base, trainer__device="cpu")
    assert load(cpu).profiling.nsys.worker_options == DEFAULT_CPU_WORKER_OPTIONS == {
        "trace": "nvtx,osrt"}
    empty = with_changes(cpu, trainer__worker_nsight_options={})
    assert load(empty).profiling.nsys.worker_options == DEFAULT_CPU_WORKER_OPTIONS


def test_controller_not_profiled_when_options_null_or_empty():
    for value in (None, {}):
        cfg = with_changes(SEED, trainer__controller_nsight_options=value)
        assert load(cfg).profiling.nsys.controller_options == {}


@pytest.mark.parametrize("trainer, expected", [
    ({}, "outputs/profiling"),
    ({"experiment_name": "exp"}, "outputs/exp/profiling"),
    ({"experiment_name": 7}, "outputs/7/profiling"),
    ({"default_local_dir": "ckpt", "experiment_name": "exp"}, "ckpt/exp/profiling"),
    ({"default_local_dir": "ckpt/proj/exp", "experiment_name": "exp"},
     "ckpt/proj/exp/profiling"),
    ({"default_local_dir": "/abs/ckpt"}, "/abs/ckpt/profiling"),
])
def test_default_output_dir(trainer, expected):
    prof = load({"trainer": trainer}).profiling
    assert prof.output_dir == os.path.abspath(expected)
    assert os.path.isabs(prof.output_dir)


def test_output_dir_expands_user():
    prof = load({"trainer": {"profiler": {"output_dir": "~/prof"}}}).profiling
    assert prof.output_dir == os.path.expanduser("~/prof")


def test_output_dir_from_global_save_path():
    prof = load({"global_profiler": {"tool": "nsys", "save_path": "gp/out"}}).profiling
    assert prof.output_dir == os.path.abspath("gp/out")


# ---------------------------------------------------------------- warnings


def test_warning_ranks_without_steps():
    cfg = with_changes(SEED, trainer__profile_steps=None)
    warnings = load(cfg).warnings
    assert ("trainer.profile_steps is null, so actor_rollout_ref.actor.profile_ranks selects "
            "nothing") in warnings
    assert "trainer.profile_steps is null, so critic.profile_ranks selects nothing" in warnings
    assert len(warnings) == 2


def test_warning_ranks_with_empty_steps_and_all_ranks_key():
    cfg = {"trainer": {"profile_steps": []}, "critic": {"profile_ranks_all": True}}
    assert load(cfg).warnings == (
        "trainer.profile_steps is empty, so critic.profile_ranks_all selects nothing",)


def test_warning_null_ranks_with_other_keys():
    cfg = with_changes(SEED, actor_rollout_ref__rollout={"profile_ranks": None,
                                                          "profile_discrete": False})
    assert ("actor_rollout_ref.rollout.profile_ranks is null (no ranks); to profile all ranks "
            "set actor_rollout_ref.rollout.profile_ranks_all: true") in load(cfg).warnings


def test_no_null_ranks_warning_when_alone_or_all_ranks():
    for block in ({"profile_ranks": None}, {"profile_ranks": None, "profile_ranks_all": True}):
        cfg = with_changes(SEED, actor_rollout_ref__ref=block)
        assert not any("is null (no ranks)" in w for w in load(cfg).warnings)


def test_warning_steps_without_ranks():
    cfg = {"trainer": {"profile_steps": [1]}}
    assert load(cfg).warnings == (
        "trainer.profile_steps is set but no role selects a rank (e.g. set "
        "actor_rollout_ref.actor.profile_ranks: [0]), so no worker is profiled",)


def test_warning_disabled_with_steps():
    cfg = with_changes(SEED, trainer__profiler={"enabled": False})
    loaded = load(cfg)
    assert not loaded.profiling.active
    assert loaded.warnings == ("trainer.profiler.enabled is false, so trainer.profile_steps "
                               "profiles nothing",)


def test_warnings_are_unique():
    cfg = with_changes(SEED, trainer__profile_steps=None,
                       actor_rollout_ref__critic={"profile_ranks": [1]})
    warnings = load(cfg).warnings
    assert len(warnings) == len(set(warnings))
