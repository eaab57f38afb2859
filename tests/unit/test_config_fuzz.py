"""Property: whatever tree a YAML file could hold, the config layer raises only ConfigError.

Trees use the real vocabulary (every section and key of every layout) mixed with junk keys,
and values of every YAML type, including valid-looking ones so the readers get deep. Configs
that load are also fed to :func:`verlprof.plan.build.build_plan` under the same property.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verlprof.config import ConfigError, LoadedConfig, config_from_dict, load_config
from verlprof.config.global_profiler import GLOBAL_KEYS, ROLE_KEYS, TOOL_SECTIONS, TORCH_TOOL_KEYS
from verlprof.config.layouts import PROFILER_KEYS, SEED_ROLE_KEYS, TRAINER_PROFILE_KEYS
from verlprof.config.nemo_env import NSYS_VARS, TORCH_VARS
from verlprof.config.profiler_block import KEYS, NSYS_KEYS, ROCPROF_KEYS, TORCH_KEYS
from verlprof.plan import build_plan

from .test_config_validate import SEED, V2, V3

PPO_RAW = load_config(str(Path(__file__).resolve().parents[2] / "trainer_configs" /
                          "ppo_trainer.yaml"), env={}).raw

SECTIONS = ["trainer", "actor_rollout_ref", "actor", "rollout", "ref", "critic", "rm",
            "reward_model", "global_profiler", "global_tool_config", "tool_config", "profiler",
            "nsys", "torch", "rocprof_sys", "phases", "data"]
TOPOLOGY_KEYS = ["nnodes", "n_gpus_per_node", "device", "hybrid_engine", "enable",
                 "default_local_dir", "experiment_name", "project_name"]
VOCAB = sorted(set(SECTIONS + TOPOLOGY_KEYS + list(SEED_ROLE_KEYS) + list(PROFILER_KEYS)
                   + list(TRAINER_PROFILE_KEYS) + list(GLOBAL_KEYS) + list(ROLE_KEYS)
                   + list(TOOL_SECTIONS) + list(TORCH_TOOL_KEYS) + list(KEYS) + list(NSYS_KEYS)
                   + list(TORCH_KEYS) + list(ROCPROF_KEYS)
                   + ["trace", "t", "o", "output", "delay", "sample", "capture-range",
                      "profile_rank", "global_profile", "discret", "_target_"]))
STRINGS = ["nsys", "torch", "rocprof_sys", "torch_memory", "npu", "cuda", "cpu", "auto", "nvtx",
           "{component}_step{step}_rank{rank}", "{component}{step}{rank}{host}{pid}", "{rank",
           "/tmp/vp", "~/x", "..", "a/b", "", " ", "3:5", "update_actor", "actor", "critic",
           "true", "null", "\x00", "line\nbreak", "${x}", "é", "cuda,nvtx", "\ud800", "~\udc80/x"]

keys = st.one_of(st.sampled_from(VOCAB), st.text(max_size=6), st.integers(-2, 3))
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 8), st.integers(), st.floats(allow_nan=True),
    st.sampled_from(STRINGS), st.text(max_size=10))
small_lists = st.lists(st.one_of(st.integers(-1, 6), scalars), max_size=4)
values = st.recursive(
    st.one_of(scalars, small_lists),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(keys, inner, max_size=5)),
    max_leaves=12)


def section(names):
    """A dict keyed mostly by ``names`` (the keys a reader looks for), with random values."""
    return st.dictionaries(st.one_of(st.sampled_from(list(names)), keys), values, max_size=6)


def role():
    return st.one_of(values, st.dictionaries(
        st.sampled_from(list(SEED_ROLE_KEYS) + ["profiler", "enable", "nnodes"]),
        st.one_of(values, section(PROFILER_KEYS + ROLE_KEYS)), max_size=4))


structured = st.fixed_dictionaries({}, optional={
    "trainer": st.dictionaries(
        st.sampled_from(list(TRAINER_PROFILE_KEYS) + TOPOLOGY_KEYS),
        st.one_of(values, section(KEYS + NSYS_KEYS + TORCH_KEYS)), max_size=8),
    "actor_rollout_ref": st.dictionaries(
        st.sampled_from(["actor", "rollout", "ref", "critic", "rm", "hybrid_engine"]),
        st.one_of(role(), st.booleans()), max_size=5),
    "critic": role(), "reward_model": role(), "rm": role(),
    "global_profiler": st.one_of(values, st.dictionaries(
        st.sampled_from(list(GLOBAL_KEYS)),
        st.one_of(values, section(TOOL_SECTIONS + ("discrete", "contents"))), max_size=6)),
})

trees = st.one_of(st.dictionaries(keys, values, max_size=6), structured)


def _paths(tree, prefix=()):
    """Every key path of a nested dict (where a mutation can land)."""
    for key, value in tree.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from _paths(value, prefix + (key,))


@st.composite
def mutated(draw):
    """A valid config of some layout with 1-3 random changes: reaches the deep checks."""
    tree = copy.deepcopy(draw(st.sampled_from([SEED, V2, V3, PPO_RAW])))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(sorted(_paths(tree), key=repr)))
        parent = tree
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["set", "set", "delete", "add"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent.get(path[-1]), dict):
            parent[path[-1]][draw(keys)] = draw(values)
        else:
            parent[path[-1]] = draw(values)
    return tree


envs = st.dictionaries(
    st.sampled_from(list(NSYS_VARS + TORCH_VARS)),
    st.one_of(st.sampled_from(["3:5", "1:2", "0:3", "*", "critic", "*_worker, actor", "",
                               '{"t": "cuda"}', '{"o": 1, "output": 2}', "x"]),
              st.text(max_size=8)),
    max_size=3)

FUZZ = settings(max_examples=400, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _check(tree, env) -> None:
    try:
        loaded = config_from_dict(tree, env=env)
    except ConfigError as err:
        assert "\n" not in str(err)
        return
    assert isinstance(loaded, LoadedConfig)
    for warning in loaded.warnings:
        assert "\n" not in warning
    prof = loaded.profiling
    assert all(isinstance(s, int) and s >= 1 for s in prof.steps)
    assert not (prof.continuous_steps and any(
        prof.components.get(r).discrete for r in ("actor", "rollout", "ref", "critic", "rm")))
    assert all(math.isfinite(t) and t > 0 for t in (prof.rpc_timeout_s, prof.finalize_timeout_s))
    try:
        build_plan(prof, loaded.topology)
    except ConfigError as err:
        assert "\n" not in str(err)


@settings(FUZZ, max_examples=100)
@given(tree=trees, env=st.one_of(st.just({}), envs))
def test_random_trees_raise_only_config_error(tree, env):
    _check(tree, env)


@settings(FUZZ, max_examples=250)
@given(tree=mutated(), env=st.one_of(st.just({}), st.just({}), envs))
def test_mutated_valid_configs_raise_only_config_error(tree, env):
    _check(tree, env)


@settings(FUZZ, max_examples=30)
@given(tree=st.one_of(values, st.lists(values, max_size=3)))
def test_non_mapping_roots(tree):
    _check(tree, {})
