"""Loading YAML, dotlist overrides (Hydra syntax), Hydra composition, interpolation."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verlprof.config import ConfigError, LoadedConfig, config_from_dict, load_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
ROOT = Path(__file__).resolve().parents[2]
PPO = str(ROOT / "trainer_configs" / "ppo_trainer.yaml")
COMPOSED = str(FIXTURES / "verl_composed" / "ppo_trainer.yaml")


def error(fn, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    text = str(info.value)
    assert "\n" not in text
    return text


# ---------------------------------------------------------------- files


def test_load_returns_loaded_config_with_plain_raw():
    loaded = load_config(PPO, env={})
    assert isinstance(loaded, LoadedConfig)
    assert isinstance(loaded.raw, dict) and isinstance(loaded.raw["trainer"], dict)
    assert loaded.raw["trainer"]["experiment_name"] == "ppo_demo"
    assert loaded.profiling.steps == (1, 2)


def test_missing_file():
    assert error(load_config, str(FIXTURES / "nope.yaml"), env={}).startswith(
        "config: no such file")


def test_directory_is_not_a_file():
    assert error(load_config, str(FIXTURES), env={}).startswith("config: no such file")


def test_non_mapping_yaml():
    assert error(load_config, str(FIXTURES / "list_top_level.yaml"), env={}).startswith(
        "config: ")


def test_scalar_yaml(tmp_path):
    path = tmp_path / "scalar.yaml"
    path.write_text("42\n")
    assert error(load_config, str(path), env={}).startswith("config: cannot read")


def test_broken_yaml_is_one_line():
    text = error(load_config, str(FIXTURES / "broken_yaml.yaml"), env={})
    assert text.startswith("config: cannot read") and "line 1" in text


def test_empty_yaml_is_an_empty_config(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    loaded = load_config(str(path), env={})
    assert loaded.profiling.steps == () and not loaded.profiling.active


def test_no_path_starts_from_overrides_only():
    loaded = load_config(None, ["+trainer.profile_steps=[3]", "+trainer.device=cpu",
                                "+critic.profile_ranks=[0]"], env={})
    assert loaded.profiling.steps == (3,)
    assert loaded.profiling.components.critic.ranks == (0,)


def test_interpolation_error_names_the_key():
    text = error(load_config, str(FIXTURES / "interpolation_error.yaml"), env={})
    assert text.startswith("trainer.experiment_name: ")


def test_interpolations_are_resolved_in_raw():
    loaded = load_config(str(FIXTURES / "verl_profiler_2025_07.yaml"), env={})
    assert loaded.raw["trainer"]["default_local_dir"] == "checkpoints/verl_examples/gsm8k"
    assert loaded.profiling.components.rollout.ranks == (0, 1)


# ---------------------------------------------------------------- overrides


def test_overrides_as_verl_users_type_them():
    loaded = load_config(PPO, ["trainer.profile_steps=[1,2,5]", "critic.profile_ranks=[0]",
                               "actor_rollout_ref.actor.profile_discrete=true",
                               "actor_rollout_ref.rollout.profile_discrete=true"], env={})
    assert loaded.profiling.steps == (1, 2, 5)
    assert loaded.profiling.components.critic.ranks == (0,)
    assert loaded.profiling.components.actor.discrete is True


def test_override_add_and_delete():
    loaded = load_config(PPO, ["+new.key=value", "~data.shuffle"], env={})
    assert loaded.raw["new"] == {"key": "value"}
    assert "shuffle" not in loaded.raw["data"]


def test_override_force_add_and_delete_with_value():
    loaded = load_config(PPO, ["++trainer.profile_steps=[3]", "++brand.new=1",
                               "~data.batch_size=8"], env={})
    assert loaded.profiling.steps == (3,)
    assert loaded.raw["brand"] == {"new": 1}
    assert "batch_size" not in loaded.raw["data"]


def test_override_null_turns_profiling_off():
    loaded = load_config(PPO, ["trainer.profile_steps=null"], env={})
    assert loaded.profiling.steps == () and not loaded.profiling.active


def test_override_interpolation_value_is_resolved():
    loaded = load_config(PPO, ["trainer.profiler.output_dir=${trainer.default_local_dir}/x"],
                         env={})
    assert loaded.profiling.output_dir.endswith("outputs/x")


@pytest.mark.parametrize("override, prefix", [
    ("trainer.profile_steps", "trainer.profile_steps: 'trainer.profile_steps' is not key=value"),
    ("=3", "overrides: "),
    ("not a key", "overrides: 'not a key' is not key=value"),
    ("a b=3", "overrides: "),
    ("trainer.profile_steps=[1,", "trainer.profile_steps: cannot parse"),
    ("trainer.profile_steps=[1,2]]", "trainer.profile_steps: cannot parse"),
    ("trainer.profile_steps=1,2", "trainer.profile_steps: "),
    ("trainer.no_such=1", "trainer.no_such: no such key"),
    ("+trainer.profile_steps=[1]", "trainer.profile_steps: already set"),
    ("~trainer.no_such", "trainer.no_such: cannot delete"),
    ("~data.batch_size=9", "data.batch_size: cannot delete"),
    ("actor@actor_rollout_ref.actor=dp_actor", "actor: config-group overrides"),
    ("trainer.profile_steps.x=1", "trainer.profile_steps.x: "),
])
def test_malformed_overrides_name_the_key(override, prefix):
    assert error(load_config, PPO, [override], env={}).startswith(prefix)


MINIMAL = {"trainer": {"profile_steps": [1], "nnodes": 1, "n_gpus_per_node": 2},
           "actor_rollout_ref": {"actor": {"profile_ranks": [0]}}}


@pytest.mark.parametrize("config, override, message", [
    # a close key beside it comes first: a typo is likelier than a key to add
    ("ppo", "actor_rollout_ref.actor.profile_rank=[0]", "actor_rollout_ref.actor.profile_rank: "
     "no such key in the config; did you mean actor_rollout_ref.actor.profile_ranks?"),
    ("ppo", "trainer.profiler.too=torch", "did you mean trainer.profiler.tool?"),
    # none beside it: `+` only for a key verlprof accepts there, else the schema's answer
    ("minimal", "actor_rollout_ref.actor.profile_discret=true", "actor_rollout_ref.actor."
     "profile_discret: unknown key; did you mean profile_discrete?"),
    ("minimal", "actor_rollout_ref.actor.profile_discrete=true", "to add it write "
     "+actor_rollout_ref.actor.profile_discrete=true"),
    ("minimal", "trainer.profiler.xyz=1", "trainer.profiler.xyz: unknown key; valid keys:"),
])
def test_an_unknown_key_gets_did_you_mean_before_any_plus(tmp_path, config, override, message):
    path = PPO
    if config == "minimal":
        path = str(tmp_path / "minimal.yaml")
        OmegaConf.save(OmegaConf.create(MINIMAL), path)
    text = error(load_config, path, [override], env={})
    assert message in text and "\n" not in text
    if "to add it" not in message:
        assert "+" not in text


def test_override_value_error_still_validated():
    text = error(load_config, PPO, ["trainer.profile_steps=[1,0]"], env={})
    assert text.startswith("trainer.profile_steps[1]: ")


def test_overrides_must_be_a_list():
    assert error(load_config, PPO, "trainer.profile_steps=[1]", env={}).startswith("overrides")


# ---------------------------------------------------------------- hydra composition


def test_composed_config_with_defaults_list():
    loaded = load_config(COMPOSED, [
        "global_profiler.tool=nsys", "global_profiler.steps=[1,2]",
        "actor_rollout_ref.actor.profiler.enable=true",
        "actor_rollout_ref.actor.profiler.ranks=[0,1]",
        "critic.profiler.enable=true", "critic.profiler.all_ranks=true"], env={})
    prof = loaded.profiling
    assert prof.source == "verl_global_profiler"
    assert prof.tool == "nsys" and prof.steps == (1, 2)
    assert prof.components.actor.ranks == (0, 1)
    # as in verl, the rollout's selection follows the actor's through interpolation
    assert prof.components.rollout.ranks == (0, 1)
    assert prof.components.critic.all_ranks
    assert prof.components.rm.ranks == () and not prof.components.rm.all_ranks
    assert prof.output_dir == str(ROOT / "outputs" / "profile") or prof.output_dir.endswith(
        "outputs/profile")
    assert prof.nsys.worker_options["capture-range"] == "cudaProfilerApi"
    assert loaded.raw["actor_rollout_ref"]["actor"]["strategy"] == "fsdp"
    assert loaded.raw["actor_rollout_ref"]["ref"]["strategy"] == "fsdp"
    # a verl config runs as verl runs it: every role of global_pool fused in one process per
    # GPU (no KL, so no ref; GAE, so a critic; the reward model is off)
    assert [(g.name, g.roles, g.world_size) for g in loaded.topology.groups] == [
        ("global_pool", ("actor", "rollout", "critic"), 8)]
    assert prof.verl_release == "0.6.0"
    assert loaded.warnings == ()


def test_composed_config_defaults_are_off():
    loaded = load_config(COMPOSED, env={})
    assert not loaded.profiling.enabled and not loaded.profiling.active


def test_composed_config_bad_override_names_the_key():
    text = error(load_config, COMPOSED, ["global_profiler.no_such=1"], env={})
    assert text.startswith("global_profiler.no_such: cannot compose")


def test_composed_config_group_override_and_bad_group():
    loaded = load_config(COMPOSED, ["actor@actor_rollout_ref.actor=dp_actor"], env={})
    assert loaded.raw["actor_rollout_ref"]["actor"]["grad_clip"] == 1.0
    text = error(load_config, COMPOSED, ["actor@actor_rollout_ref.actor=megatron_actor"],
                 env={})
    assert text.startswith("actor: cannot compose")


def test_composed_config_validation_names_the_key():
    text = error(load_config, COMPOSED, ["global_profiler.tool=npu"], env={})
    assert text.startswith("global_profiler.tool: npu is not supported")


def test_compose_keeps_an_existing_global_hydra():
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    with initialize_config_dir(config_dir=str(FIXTURES / "verl_composed"), version_base=None):
        before = GlobalHydra.instance().hydra
        load_config(COMPOSED, env={})
        assert GlobalHydra.instance().hydra is before
        assert compose(config_name="ppo_trainer")["trainer"]["n_gpus_per_node"] == 8


# ---------------------------------------------------------------- config_from_dict


def test_config_from_dictconfig_resolves():
    cfg = OmegaConf.create({"trainer": {"steps": [2], "profile_steps": "${trainer.steps}",
                                        "device": "cpu"},
                            "critic": {"profile_ranks": [0]}})
    loaded = config_from_dict(cfg, env={})
    assert loaded.profiling.steps == (2,)
    assert loaded.raw["trainer"]["profile_steps"] == [2]


def test_config_from_dict_rejects_non_mappings():
    for value in ([1], "trainer", None, 3, OmegaConf.create([1])):
        assert error(config_from_dict, value, env={}).startswith("config: ")


def test_config_from_dict_does_not_mutate_input():
    cfg = {"trainer": {"profile_steps": (2, 1), "device": "cpu"},
           "critic": {"profile_ranks": (0,)}}
    loaded = config_from_dict(cfg, env={})
    assert loaded.profiling.steps == (1, 2)
    assert cfg["trainer"]["profile_steps"] == (2, 1)
    assert loaded.raw["trainer"]["profile_steps"] == [2, 1]


def test_env_none_means_os_environ(monkeypatch):
    monkeypatch.setenv("NRL_NSYS_WORKER_PATTERNS", "critic_worker")
    monkeypatch.setenv("NRL_NSYS_PROFILE_STEP_RANGE", "2:3")
    loaded = config_from_dict({"trainer": {"device": "cpu"}})
    assert loaded.profiling.source == "nemo_env" and loaded.profiling.steps == (2,)


def test_warnings_are_logged_once(caplog):
    cfg = {"trainer": {"device": "cpu"}, "critic": {"profile_ranks": [0]}}
    with caplog.at_level(logging.WARNING, logger="verlprof"):
        loaded = config_from_dict(cfg, env={})
    assert loaded.warnings == ("trainer.profile_steps is null, so critic.profile_ranks "
                               "selects nothing",)
    logged = [r.getMessage() for r in caplog.records if r.name == "verlprof"]
    assert logged == list(loaded.warnings)


def test_a_torch_profiled_rank_starts_with_kineto_quiet_and_others_do_not():
    """PyTorch's profiler prints `USDT: ... profiler_start/stop` for every window into the
    trainer's console unless KINETO_LOG_LEVEL is 6 in the profiled process (checked by hand
    with a torch demo: 4 such lines before, none after)."""
    from verlprof.plan import build_plan
    from verlprof.runtime.ray_options import worker_options

    loaded = load_config(PPO, ["trainer.profiler.tool=torch",
                               "actor_rollout_ref.actor.profile_ranks=[0]"], env={})
    plan = build_plan(loaded.profiling, loaded.topology)
    profiled = worker_options(plan, "actor_rollout_ref", 0)["runtime_env"]
    assert profiled["env_vars"]["KINETO_LOG_LEVEL"] == "6"
    assert "env_vars" not in worker_options(plan, "actor_rollout_ref", 1)["runtime_env"]
