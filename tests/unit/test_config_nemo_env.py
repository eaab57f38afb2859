"""NeMo RL's NRL_* variables: exact validation rules and precedence over the YAML."""

from __future__ import annotations

import os

import pytest

from verlprof.config import ConfigError, config_from_dict
from verlprof.config import nemo_env as ne

BASE = {
    "trainer": {"nnodes": 1, "n_gpus_per_node": 2, "device": "cpu", "profile_steps": [1],
                "profiler": {"output_dir": "/tmp/yaml_out", "filename_template":
                             "{component}_{step}_{rank}_{pid}"},
                "worker_nsight_options": {"trace": "nvtx,osrt", "sample": "none"},
                "controller_nsight_options": {"trace": "nvtx"}},
    "actor_rollout_ref": {"hybrid_engine": True, "actor": {"profile_ranks": [0],
                                                           "profile_discrete": True}},
    "critic": {"profile_ranks": [1]},
}


def load(env, cfg=None):
    return config_from_dict(BASE if cfg is None else cfg, env=env)


def error(env, cfg=None) -> str:
    with pytest.raises(ConfigError) as info:
        load(env, cfg)
    assert "\n" not in str(info.value)
    return str(info.value)


NSYS = {"NRL_NSYS_WORKER_PATTERNS": "critic_worker", "NRL_NSYS_PROFILE_STEP_RANGE": "3:5"}


# ---------------------------------------------------------------- parsers


@pytest.mark.parametrize("value, steps", [
    ("3:5", (3, 4)), ("1:2", (1,)), (" 2 : 4 ", (2, 3)), ("10:13", (10, 11, 12)),
])
def test_step_range(value, steps):
    assert ne.parse_step_range(value, "V") == steps


@pytest.mark.parametrize("value, fragment", [
    ("0:3", "0 is not a step"),
    ("1:0", "0 is not a step"),
    ("-1:3", "-1 is not a step"),
    ("3", "must be START:STOP"),
    ("3-5", "must be START:STOP"),
    ("1:2:3", "must be START:STOP"),
    ("a:5", "must be integers"),
    ("1.5:3", "must be integers"),
    ("1:", "must be integers"),
    (":4", "must be integers"),
    ("5:5", "empty range"),
    ("5:3", "empty range"),
    ("1:1000000", "spans more than"),
])
def test_step_range_errors(value, fragment):
    with pytest.raises(ConfigError) as info:
        ne.parse_step_range(value, "NRL_NSYS_PROFILE_STEP_RANGE")
    assert str(info.value).startswith("NRL_NSYS_PROFILE_STEP_RANGE: ")
    assert fragment in str(info.value)


def test_patterns_strip_and_ignore_empty():
    assert ne.parse_patterns(" *policy*, *vllm* ,, ", "V") == ("*policy*", "*vllm*")
    with pytest.raises(ConfigError, match="^V: contains no pattern"):
        ne.parse_patterns(" , ,", "V")


def test_extra_options_json():
    assert ne.parse_extra_options('{"trace": "cuda", "delay": 2}', "X") == {
        "trace": "cuda", "delay": 2}
    for bad, fragment in [("{trace: cuda}", "not valid JSON"), ("[1]", "JSON object"),
                          ('"x"', "JSON object"), ('{"bad key": 1}', "X.bad key: ")]:
        with pytest.raises(ConfigError) as info:
            ne.parse_extra_options(bad, "X")
        assert str(info.value).startswith("X") and fragment in str(info.value)


# ---------------------------------------------------------------- applying nsys variables


def test_nsys_env_wins_over_yaml():
    loaded = load(NSYS)
    prof = loaded.profiling
    assert prof.source == "nemo_env" and prof.tool == "nsys"
    assert prof.steps == (3, 4) and prof.continuous_steps
    assert prof.components.critic.all_ranks
    assert prof.components.critic.ranks_key == "NRL_NSYS_WORKER_PATTERNS"
    assert not prof.components.actor.selects_any and not prof.components.actor.discrete
    # what the variables do not say still comes from the YAML
    assert prof.output_dir == "/tmp/yaml_out"
    assert prof.filename_template == "{component}_{step}_{rank}_{pid}"
    assert prof.nsys.worker_options == {"trace": "nvtx,osrt", "sample": "none"}
    assert prof.nsys.controller_options == {"trace": "nvtx"}
    assert ("NRL_NSYS_PROFILE_STEP_RANGE and NRL_NSYS_WORKER_PATTERNS replace "
            "trainer.profile_steps and the per-role rank selection of the config (the "
            "environment wins over the YAML)") in loaded.warnings


@pytest.mark.parametrize("patterns, roles", [
    ("actor_rollout_ref_worker", {"actor", "rollout", "ref"}),
    ("*rollout*", {"actor", "rollout", "ref"}),
    ("rollout", {"rollout"}),
    ("actor, critic", {"actor", "critic"}),
    ("rm_worker", {"rm"}),
    ("*_worker", {"actor", "rollout", "ref", "critic", "rm"}),
    ("*", {"actor", "rollout", "ref", "critic", "rm"}),
])
def test_patterns_match_worker_and_role_names(patterns, roles):
    env = dict(NSYS, NRL_NSYS_WORKER_PATTERNS=patterns)
    comps = load(env).profiling.components
    assert {r for r in ("actor", "rollout", "ref", "critic", "rm")
            if comps.get(r).all_ranks} == roles


def test_patterns_without_hybrid_engine():
    cfg = dict(BASE, actor_rollout_ref={"hybrid_engine": False})
    env = dict(NSYS, NRL_NSYS_WORKER_PATTERNS="rollout_worker")
    comps = load(env, cfg).profiling.components
    assert comps.rollout.all_ranks and not comps.actor.all_ranks
    env = dict(NSYS, NRL_NSYS_WORKER_PATTERNS="actor_rollout_ref_worker")
    assert any("'actor_rollout_ref_worker' matches no worker" in w
               for w in load(env, cfg).warnings)


def test_pattern_matching_nothing_warns():
    env = dict(NSYS, NRL_NSYS_WORKER_PATTERNS="*policy*, *vllm*, critic")
    loaded = load(env)
    assert any(w.startswith("NRL_NSYS_WORKER_PATTERNS: pattern '*policy*' matches no worker")
               for w in loaded.warnings)
    assert any("'*vllm*' matches no worker" in w for w in loaded.warnings)
    assert loaded.profiling.components.critic.all_ranks


def test_patterns_are_case_sensitive():
    env = dict(NSYS, NRL_NSYS_WORKER_PATTERNS="CRITIC")
    assert not load(env).profiling.components.critic.all_ranks


def test_disabled_critic_is_not_a_worker():
    cfg = dict(BASE, critic={"enable": False})
    loaded = load(dict(NSYS), cfg)
    assert not loaded.profiling.components.critic.all_ranks
    assert any("matches no worker" in w for w in loaded.warnings)


def test_extra_options_merge_over_worker_options():
    env = dict(NSYS, NRL_NSYS_EXTRA_OPTIONS='{"t": "cuda,nvtx", "stop-on-exit": true}')
    opts = load(env).profiling.nsys.worker_options
    assert opts == {"sample": "none", "t": "cuda,nvtx", "stop-on-exit": True}


def test_extra_options_merge_over_defaults():
    cfg = {"trainer": {"device": "cuda"}}
    env = dict(NSYS, NRL_NSYS_EXTRA_OPTIONS='{"cuda-graph-trace": "graph"}')
    opts = load(env, cfg).profiling.nsys.worker_options
    assert opts["cuda-graph-trace"] == "graph" and opts["trace"] == "cuda,nvtx,cublas"


def test_extra_option_clashing_with_a_flag_names_the_variable():
    cfg = dict(BASE, trainer=dict(BASE["trainer"], profiler={"nsys": {"worker_flags": ["trace"]}}))
    cfg["trainer"]["worker_nsight_options"] = {"sample": "none"}
    env = dict(NSYS, NRL_NSYS_EXTRA_OPTIONS='{"t": "cuda"}')
    assert error(env, cfg).startswith("trainer.profiler.nsys.worker_flags[0]: --trace is also "
                                      "set as option NRL_NSYS_EXTRA_OPTIONS.t")


def test_env_clears_yaml_discrete_so_continuous_is_fine():
    prof = load(NSYS).profiling
    assert prof.continuous_steps
    assert not any(prof.components.get(r).discrete for r in ("actor", "rollout", "ref"))


# ---------------------------------------------------------------- torch variables


def test_torch_env():
    env = {"NRL_TORCH_PROFILE_STEP_RANGE": "2:4", "NRL_TORCH_PROFILE_WORKER_PATTERNS": "actor",
           "NRL_TORCH_PROFILE_DIR": "torch_traces"}
    prof = load(env).profiling
    assert prof.tool == "torch" and prof.source == "nemo_env" and prof.steps == (2, 3)
    assert prof.output_dir == os.path.abspath("torch_traces")
    assert prof.components.actor.all_ranks
    assert prof.components.actor.ranks_key == "NRL_TORCH_PROFILE_WORKER_PATTERNS"


def test_torch_env_without_dir_keeps_yaml_dir():
    env = {"NRL_TORCH_PROFILE_STEP_RANGE": "2:4", "NRL_TORCH_PROFILE_WORKER_PATTERNS": "actor"}
    assert load(env).profiling.output_dir == "/tmp/yaml_out"


# ---------------------------------------------------------------- pairing and conflicts


@pytest.mark.parametrize("env, prefix", [
    ({"NRL_NSYS_WORKER_PATTERNS": "critic"},
     "NRL_NSYS_PROFILE_STEP_RANGE: must be set together with NRL_NSYS_WORKER_PATTERNS"),
    ({"NRL_NSYS_PROFILE_STEP_RANGE": "1:2"},
     "NRL_NSYS_WORKER_PATTERNS: must be set together with NRL_NSYS_PROFILE_STEP_RANGE"),
    ({"NRL_TORCH_PROFILE_WORKER_PATTERNS": "critic"},
     "NRL_TORCH_PROFILE_STEP_RANGE: must be set together"),
    ({"NRL_TORCH_PROFILE_STEP_RANGE": "1:2", "NRL_TORCH_PROFILE_DIR": "/x"},
     "NRL_TORCH_PROFILE_WORKER_PATTERNS: must be set together"),
    (dict(NSYS, NRL_TORCH_PROFILE_STEP_RANGE="1:2"),
     "NRL_NSYS_WORKER_PATTERNS: set together with NRL_TORCH_PROFILE_STEP_RANGE"),
    ({"NRL_NSYS_EXTRA_OPTIONS": "{}", "NRL_TORCH_PROFILE_DIR": "/x"},
     "NRL_NSYS_EXTRA_OPTIONS: set together with NRL_TORCH_PROFILE_DIR"),
    (dict(NSYS, NRL_NSYS_PROFILE_STEP_RANGE="0:2"), "NRL_NSYS_PROFILE_STEP_RANGE: steps are"),
    (dict(NSYS, NRL_NSYS_EXTRA_OPTIONS="not json"), "NRL_NSYS_EXTRA_OPTIONS: not valid JSON"),
    (dict(NSYS, NRL_NSYS_EXTRA_OPTIONS="[1, 2]"), "NRL_NSYS_EXTRA_OPTIONS: must be a JSON obj"),
    (dict(NSYS, NRL_NSYS_EXTRA_OPTIONS='{"o": "a", "output": "b"}'),
     "NRL_NSYS_EXTRA_OPTIONS.output: given twice"),
    (dict(NSYS, NRL_NSYS_WORKER_PATTERNS=","), "NRL_NSYS_WORKER_PATTERNS: contains no pattern"),
])
def test_env_errors(env, prefix):
    assert error(env).startswith(prefix)


def test_blank_variables_count_as_unset():
    env = {"NRL_NSYS_WORKER_PATTERNS": "  ", "NRL_NSYS_PROFILE_STEP_RANGE": ""}
    assert load(env).profiling.source == "seed"


def test_extra_options_alone_are_ignored_with_warning():
    loaded = load({"NRL_NSYS_EXTRA_OPTIONS": '{"t": "cuda"}'})
    assert loaded.profiling.source == "seed"
    assert ("NRL_NSYS_EXTRA_OPTIONS is set but NRL_NSYS_WORKER_PATTERNS and "
            "NRL_NSYS_PROFILE_STEP_RANGE are not, so it is ignored") in loaded.warnings


def test_yaml_is_still_validated_when_env_is_set():
    cfg = dict(BASE, critic={"profile_ranks": [-1]})
    assert error(NSYS, cfg).startswith("critic.profile_ranks[0]: ")


def test_no_override_warning_when_yaml_selects_nothing():
    loaded = load(NSYS, {"trainer": {"device": "cpu"}})
    assert not any("replace" in w for w in loaded.warnings)


def test_worker_names():
    from verlprof.config.topology import Topology

    topo = Topology.of({"actor_rollout_ref": 2, "critic": 1})
    assert ne.worker_names(topo) == {
        "actor_rollout_ref_worker": ("actor", "rollout", "ref"), "critic_worker": ("critic",),
        "actor": ("actor",), "rollout": ("rollout",), "ref": ("ref",), "critic": ("critic",)}


def test_torch_dir_alone_is_ignored_with_warning():
    loaded = load({"NRL_TORCH_PROFILE_DIR": "/x"})
    assert loaded.profiling.output_dir == "/tmp/yaml_out"
    assert ("NRL_TORCH_PROFILE_DIR is set but NRL_TORCH_PROFILE_WORKER_PATTERNS and "
            "NRL_TORCH_PROFILE_STEP_RANGE are not, so it is ignored") in loaded.warnings


def test_undecodable_torch_dir_is_a_config_error():
    env = {"NRL_TORCH_PROFILE_STEP_RANGE": "2:4", "NRL_TORCH_PROFILE_WORKER_PATTERNS": "actor",
           "NRL_TORCH_PROFILE_DIR": "/tmp/\udcff"}
    assert error(env).startswith("NRL_TORCH_PROFILE_DIR: must be valid text")


def test_patterns_matching_nothing_warn_about_the_variable():
    env = dict(NSYS, NRL_NSYS_WORKER_PATTERNS="*policy*")
    assert ("NRL_NSYS_PROFILE_STEP_RANGE is set but no role selects a rank (no worker matches "
            "NRL_NSYS_WORKER_PATTERNS), so no worker is profiled") in load(env).warnings
