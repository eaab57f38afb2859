"""The two shipped trainer configs load cleanly, are documented, and plan."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from verlprof.config import load_config
from verlprof.errors import ConfigError
from verlprof.plan import build_plan

ROOT = Path(__file__).resolve().parents[2]
PPO = ROOT / "trainer_configs" / "ppo_trainer.yaml"
DAPO = ROOT / "trainer_configs" / "dapo_trainer.yaml"

PROFILING_KEY = re.compile(r"^\s*(profile_\w+|profiler|tool|enabled|output_dir|"
                           r"filename_template|controller_nsight_options|worker_nsight_options|"
                           r"hybrid_engine|device):")


@pytest.mark.parametrize("path", [PPO, DAPO], ids=["ppo", "dapo"])
def test_shipped_config_loads_without_warnings_and_plans(path):
    loaded = load_config(str(path), env={})
    assert loaded.warnings == ()
    assert loaded.profiling.active and loaded.profiling.source == "seed"
    assert not loaded.topology.cuda
    plan = build_plan(loaded.profiling, loaded.topology)
    assert plan.warnings == ()


@pytest.mark.parametrize("path", [PPO, DAPO], ids=["ppo", "dapo"])
def test_every_profiling_key_is_commented(path):
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if PROFILING_KEY.match(line):
            above = lines[i - 1].strip() if i else ""
            assert "#" in line or above.startswith("#"), f"{path.name}:{i + 1}: {line}"


def test_ppo_values():
    loaded = load_config(str(PPO), env={})
    prof, trainer = loaded.profiling, loaded.raw["trainer"]
    assert trainer["experiment_name"] == "ppo_demo" and trainer["total_training_steps"] == 3
    assert prof.steps == (1, 2) and not prof.continuous_steps and prof.tool == "nsys"
    assert prof.output_dir.endswith("outputs/ppo_demo/profiling")
    assert prof.components.actor.ranks == (0, 1)
    assert prof.components.rollout.ranks == (0,)
    assert prof.components.ref.ranks == ()
    assert prof.components.critic.ranks == (0,)
    assert prof.components.rm.ranks == ()
    expected = {"trace": "nvtx,osrt", "sample": "none", "cpuctxsw": "none"}
    assert prof.nsys.controller_options == expected == prof.nsys.worker_options
    sizes = {g.name: g.world_size for g in loaded.topology.groups}
    assert sizes == {"actor_rollout_ref": 2, "critic": 2, "rm": 1}


def test_dapo_values():
    loaded = load_config(str(DAPO), env={})
    prof = loaded.profiling
    assert loaded.raw["critic"]["enable"] is False
    assert [g.name for g in loaded.topology.groups] == ["actor_rollout_ref", "rm"]
    assert prof.components.rollout.discrete and prof.components.actor.discrete
    assert prof.components.rm.ranks == (0,)


def test_demo_overrides():
    loaded = load_config(str(PPO), ["trainer.profile_steps=[2,3]"], env={})
    assert loaded.profiling.steps == (2, 3)


def test_loaded_config_is_frozen():
    loaded = load_config(str(PPO), env={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.warnings = ("x",)  # type: ignore[misc]


def test_steps_after_the_last_training_step_warn():
    loaded = load_config(str(PPO), ["trainer.profile_steps=[2,7]"])
    assert any(w.startswith("trainer.profile_steps: step(s) [7] come after "
                            "trainer.total_training_steps (3)") for w in loaded.warnings)


@pytest.mark.parametrize("value", ["abc", "0", "-3", "true"])
def test_a_run_length_that_is_not_a_positive_integer_names_its_key(value):
    """Before, ``trainer.total_training_steps=abc`` planned without a word and the demo then
    failed inside Ray; 0 or -3 planned a run that captures nothing. null (verl's default: the
    length follows from the epochs) stays allowed."""
    with pytest.raises(ConfigError, match=r"^trainer\.total_training_steps: a positive "
                                          r"integer or null expected, not "):
        load_config(str(PPO), [f"trainer.total_training_steps={value}"])
    assert load_config(str(PPO), ["trainer.total_training_steps=null"]).profiling.steps


# every role's block in the seed layout (the YAML path) and the keys each one reads
SEED_COMPONENTS = ("actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref",
                   "critic", "reward_model")


def test_every_component_carries_every_per_component_key():
    from verlprof.config.layouts import SEED_ROLE_FIELDS

    raw = load_config(str(PPO), env={}).raw
    lines = PPO.read_text().splitlines()
    for component in SEED_COMPONENTS:
        block = raw
        for part in component.split("."):
            block = block[part]
        assert set(SEED_ROLE_FIELDS) <= set(block), (component, sorted(block))
    # each one with its comment (test_every_profiling_key_is_commented checks the line above)
    assert sum(1 for ln in lines if re.match(r"^\s*profile_(ranks|ranks_all|discrete):", ln)
               ) == len(SEED_COMPONENTS) * len(SEED_ROLE_FIELDS)


@pytest.mark.parametrize("component", SEED_COMPONENTS)
@pytest.mark.parametrize("key, value", [("profile_ranks", "[0]"), ("profile_ranks_all", "true"),
                                        ("profile_discrete", "false")])
def test_per_component_overrides_need_no_plus(component, key, value):
    # profile_discrete=false: roles sharing a process (hybrid engine) must keep agreeing
    loaded = load_config(str(PPO), [f"{component}.{key}={value}"], env={})
    block = loaded.raw
    for part in component.split("."):
        block = block[part]
    assert block[key] == {"[0]": [0], "true": True, "false": False}[value]


def test_critic_profile_ranks_all_as_the_docs_write_it():
    loaded = load_config(str(PPO), ["critic.profile_ranks_all=true"], env={})
    assert loaded.profiling.components.critic.all_ranks
