"""Every key of verl's ``global_profiler`` and role ``profiler`` blocks: honoured (its effect
checked) or refused (the message checked). Small hand-written configs, one release marker each
(the releases' real files are planned by tests/integration/test_verl_releases.py)."""

from __future__ import annotations

import copy
from typing import Any, Dict, List

import pytest

from verlprof.config import ConfigError, config_from_dict
from verlprof.plan import build_plan

A = "actor_rollout_ref.actor.profiler"
R = "actor_rollout_ref.rollout.profiler"
F = "actor_rollout_ref.ref.profiler"
G = "global_profiler"
GT = "global_profiler.global_tool_config"

V091: Dict[str, Any] = {
    "trainer": {"nnodes": 1, "n_gpus_per_node": 4, "device": "cpu"},
    "global_profiler": {"tool": "nsys", "steps": [1, 2], "save_path": "/tmp/verlprof-keys",
                        "relocate_results": False, "finish_hook_cmd": None,
                        "finish_hook_all_ranks": False, "finish_hook_ranks": [],
                        "global_tool_config": {"nsys": {"discrete": False}}},
    "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "ranks": [1]}}},
    "critic": {"profiler": {"enable": True, "ranks": [0]}},
}
"""verl 0.9.1 (recognised by ``global_profiler.relocate_results``): actor rank 1, critic 0."""


def cfg_with(base: Dict[str, Any], **changes: Any) -> Dict[str, Any]:
    """A copy of ``base``; ``a__b=v`` sets ``cfg[a][b] = v`` (``.`` in a name: nested)."""
    cfg = copy.deepcopy(base)
    for dotted, value in changes.items():
        parts = [p for chunk in dotted.split("__") for p in chunk.split(".")]
        node = cfg
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return cfg


def v06(**changes: Any) -> Dict[str, Any]:
    """verl 0.6.0: no key of a later release."""
    cfg = cfg_with(V091, **changes)
    for key in ("relocate_results", "finish_hook_cmd", "finish_hook_all_ranks",
                "finish_hook_ranks"):
        if cfg["global_profiler"].get(key) in (None, False, []):
            cfg["global_profiler"].pop(key, None)
    return cfg


def v08(**changes: Any) -> Dict[str, Any]:
    """verl 0.8.0: ``reward.reward_model`` (and no 0.9.x key)."""
    return cfg_with(v06(), reward={"reward_model": {"enable": False}}, **changes)


def load(cfg: Dict[str, Any]):
    return config_from_dict(cfg, env={})


def plan(cfg: Dict[str, Any]):
    loaded = load(cfg)
    return build_plan(loaded.profiling, loaded.topology)


def error(cfg: Dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        load(cfg)
    assert "\n" not in str(info.value)
    return str(info.value)


def warnings(cfg: Dict[str, Any]) -> List[str]:
    return list(load(cfg).warnings)


def role(name: str, **profiler: Any) -> Dict[str, Any]:
    """``{name: {"profiler": profiler}}`` for cfg_with (``actor``, ``critic`` ...)."""
    return {"profiler": profiler}


# ---------------------------------------------------------------- the release and its rules


def test_release_is_recognised_from_the_keys():
    assert load(V091).profiling.verl_release == "0.9.1"
    assert load(v08()).profiling.verl_release == "0.8.0"
    assert load(v06()).profiling.verl_release == "0.6.0"
    assert load(cfg_with(v06(), transfer_queue={"enable": False})).profiling.verl_release \
        == "0.7.0"
    assert load(cfg_with(v06(), trainer__use_v1=True)).profiling.verl_release == "0.9.0"


def test_enable_without_ranks_is_rank0_from_080_and_no_rank_before():
    cfg = cfg_with(V091, critic=role("critic", enable=True))
    assert load(cfg).profiling.components.critic.ranks == (0,)
    cfg = cfg_with(v06(), critic=role("critic", enable=True))
    loaded = load(cfg)
    assert loaded.profiling.components.critic.ranks == ()
    assert "critic.profiler.enable is true but critic.profiler.ranks is empty: verl 0.6.0 " \
           "profiles no rank then (verl 0.8.0+ picks rank 0); set critic.profiler.ranks: [0] " \
           "to profile rank 0" in loaded.warnings


def test_a_rollout_block_set_apart_selects_the_replicas_and_the_hybrid_worker_follows_the_actor():
    cfg = cfg_with(V091, **{"actor_rollout_ref.rollout": role("rollout", enable=True,
                                                               ranks=[3])})
    loaded = load(cfg)
    assert loaded.profiling.components.rollout.ranks == (1,)  # the hybrid worker: the actor's
    assert loaded.profiling.rollout_replicas.ranks == (3,)  # verl's servers read their own
    assert f"{R} (rank 3) selects the rollout replicas, as verl 0.9.1's rollout servers read " \
           f"it; the hybrid worker's rollout phases follow {A}" in loaded.warnings
    assert load(cfg_with(V091)).profiling.rollout_replicas is None  # not set apart
    # verl 0.6 has no replicas: the block is ignored, as its hybrid worker ignores it
    old = load(cfg_with(v06(), **{"actor_rollout_ref.rollout": role("rollout", enable=True,
                                                                     ranks=[3])}))
    assert old.profiling.rollout_replicas is None
    assert any(w.startswith(f"ignored {R} (rank 3)") for w in old.warnings)


def test_ref_follows_the_actor_in_080_but_has_its_own_block_in_060():
    ref = {"actor_rollout_ref.ref": role("ref", enable=True, ranks=[2]),
           "actor_rollout_ref.actor.use_kl_loss": True}
    loaded = load(cfg_with(V091, **ref))
    assert loaded.profiling.components.ref.ranks == (1,)
    assert any(w.startswith(f"ignored {F} (rank 2): verl 0.9.1 runs the reference policy "
                            "inside the actor's worker") for w in loaded.warnings)
    assert load(cfg_with(v06(), **ref)).profiling.components.ref.ranks == (2,)


def test_critic_block_ignored_by_verl_080_is_honoured_with_a_warning():
    loaded = load(v08())
    assert loaded.profiling.components.critic.ranks == (0,)
    assert ("critic.profiler: verl 0.8.0 never passes this block to its critic worker (fixed "
            "in verl 0.9.0), so verl itself would not profile the critic; verlprof profiles "
            "the ranks it selects") in loaded.warnings
    assert not any(w.startswith("critic.profiler:") for w in warnings(V091))


def test_a_served_reward_model_is_selected_as_replicas():
    """verl 0.7.0's reward loop and 0.8+ serve the reward model: selecting it profiles the
    replicas that own the selected ranks (it used to be refused)."""
    cfg = cfg_with(V091, reward_model={"profiler": {"enable": True, "ranks": [0]}})
    p = plan(cfg)  # verl 0.9.1 with its reward model off: nothing of it is deployed
    assert not [x for x in p.processes if x.group == "reward_replicas"]
    cfg = cfg_with(v06(), reward_model={"enable": True, "use_reward_loop": True,
                                        "profiler": {"enable": True, "ranks": [0]}})
    p = plan(cfg)
    assert [(x.group, x.rank, x.mode) for x in p.processes if x.group == "reward_replicas"] \
        == [("reward_replicas", 0, "whole")]
    cfg = cfg_with(v06(), reward_model={"enable": True,
                                        "profiler": {"enable": True, "ranks": [0]}})
    p = plan(cfg)
    assert p.process("global_pool", 0).selected_roles == ("critic", "rm")


def test_verl_041_fsdp_reads_only_the_rollout_block_verlprof_does_what_the_keys_ask():
    cfg = {"trainer": {"profile_steps": [1], "device": "cpu", "n_gpus_per_node": 2},
           "actor_rollout_ref": {"actor": {"strategy": "fsdp", "profiler": {"ranks": [0]}},
                                 "rollout": {"profiler": {"ranks": []}}}}
    loaded = load(cfg)
    assert loaded.profiling.verl_release == "0.4.1"
    assert loaded.profiling.components.actor.ranks == (0,)
    assert f"{A}: verl 0.4.1's FSDP hybrid worker reads only {R} (the last block it assigns " \
           "wins), so verl itself would not profile what this block selects; verlprof " \
           "profiles it" in loaded.warnings
    cfg["actor_rollout_ref"]["actor"]["strategy"] = "megatron"  # verl: union of the blocks
    assert not any("FSDP" in w for w in load(cfg).warnings)


def test_verl_050_one_block_selects_actor_rollout_and_ref():
    cfg = {"trainer": {"profile_steps": [1], "device": "cpu", "n_gpus_per_node": 2},
           "actor_rollout_ref": {"profiler": {"discrete": False, "all_ranks": False,
                                              "ranks": [1]},
                                 "actor": {"use_kl_loss": True}},
           "critic": {"profiler": {"discrete": False, "all_ranks": False, "ranks": []}}}
    loaded = load(cfg)
    comps = loaded.profiling.components
    assert loaded.profiling.verl_release == "0.5.0"
    assert comps.actor.ranks == comps.rollout.ranks == comps.ref.ranks == (1,)
    assert comps.actor.ranks_key == "actor_rollout_ref.profiler.ranks"
    cfg["actor_rollout_ref"]["actor"]["profiler"] = {"ranks": [0]}
    assert error(cfg).startswith("actor_rollout_ref.actor.profiler: next to "
                                 "actor_rollout_ref.profiler (verl 0.5.0's one block")


def test_megatron_profile_block_of_041_is_accepted_off_and_refused_on():
    cfg = {"trainer": {"profile_steps": [1], "device": "cpu"},
           "actor_rollout_ref": {"actor": {"profile": {"use_profile": False, "profile_ranks": None,
                                                       "step_start": -1, "step_end": -1,
                                                       "save_path": None},
                                           "profiler": {"ranks": [0]}}}}
    assert load(cfg).profiling.components.actor.ranks == (0,)
    cfg["actor_rollout_ref"]["actor"]["profile"]["use_profile"] = True
    assert error(cfg).startswith("actor_rollout_ref.actor.profile.use_profile: true is not "
                                 "supported: verl's Megatron actor runs this torch profiler")


# ---------------------------------------------------------------- global_profiler keys


@pytest.mark.parametrize("tool, reason", [
    ("torch_memory", "verlprof does not take CUDA memory snapshots"),
    ("npu", "verlprof does not drive Ascend's NPU profiler"),
    ("precision_debugger", "verlprof does not drive msprobe's precision debugger")])
def test_tools_verlprof_does_not_drive_are_refused(tool, reason):
    assert error(cfg_with(V091, **{f"{G}.tool": tool})).startswith(
        f"global_profiler.tool: {tool} is not supported by verlprof: {reason}")


def test_tool_null_steps_continuous_save_path_are_honoured():
    prof = load(cfg_with(V091, **{f"{G}.profile_continuous_steps": True})).profiling
    assert prof.steps == (1, 2) and prof.continuous_steps and prof.tool == "nsys"
    assert prof.output_dir == "/tmp/verlprof-keys"
    assert not load(cfg_with(V091, **{f"{G}.tool": None})).profiling.enabled


def test_relocate_results_is_accepted_everywhere():
    cfg = cfg_with(V091, **{f"{G}.relocate_results": True,
                            f"{A}.relocate_results": False})
    assert load(cfg).warnings == ()


def test_finish_hook_keys_are_honoured():
    p = plan(cfg_with(V091, **{f"{G}.finish_hook_cmd": "echo done"}))
    assert (p.finish_hook.cmd, p.finish_hook.targets) == ("echo done", ())
    assert p.finish_hook.key == "global_profiler.finish_hook_cmd"
    p = plan(cfg_with(V091, **{f"{G}.finish_hook_cmd": "echo done",
                               f"{G}.finish_hook_all_ranks": True}))
    assert p.finish_hook.targets == (("global_pool", 0), ("global_pool", 1))
    p = plan(cfg_with(V091, **{f"{G}.finish_hook_cmd": "echo done",
                               f"{G}.finish_hook_ranks": [1, 3]}))
    assert p.finish_hook.targets == (("global_pool", 1),)
    assert ("global_profiler.finish_hook_cmd: rank(s) [3] named for the finish hook have no "
            "profiled process; the hook runs where verlprof profiles") in p.warnings


def test_finish_hook_ranks_without_a_command_are_named():
    assert "ignored global_profiler.finish_hook_ranks: global_profiler.finish_hook_cmd is " \
           "null, so there is no hook to run" in warnings(cfg_with(V091, **{
               f"{G}.finish_hook_ranks": [0]}))


def test_a_role_finish_hook_other_than_the_global_one_is_refused():
    cfg = cfg_with(V091, **{f"{A}.finish_hook_cmd": "upload.sh"})
    assert error(cfg) == (
        "actor_rollout_ref.actor.profiler.finish_hook_cmd: is 'upload.sh' but "
        "global_profiler.finish_hook_cmd is null; verlprof runs one finish hook for the whole "
        "run, after it gathered every report: set global_profiler.finish_hook_cmd")
    same = cfg_with(V091, **{f"{G}.finish_hook_cmd": "u.sh", f"{A}.finish_hook_cmd": "u.sh",
                             f"{A}.finish_hook_ranks": []})
    assert plan(same).finish_hook.cmd == "u.sh"


def test_finish_hook_in_both_layouts_is_refused():
    cfg = cfg_with(V091, **{f"{G}.finish_hook_cmd": "a", "trainer.profiler.finish_hook.cmd": "b"})
    assert error(cfg).startswith("global_profiler.finish_hook_cmd: is set and so is "
                                 "trainer.profiler.finish_hook.cmd; set only one of them")


def test_nsys_block_keys_are_honoured():
    cfg = cfg_with(V091, **{f"{GT}.nsys.discrete": True,
                            f"{GT}.nsys.worker_nsight_options": {"trace": "nvtx,osrt"},
                            f"{GT}.nsys.controller_nsight_options": {"trace": "nvtx"}})
    p = plan(cfg)
    assert {proc.mode for proc in p.processes if proc.group == "global_pool"} == {"discrete"}
    # a rollout replica has no annotated phase of its own: its windows are steps
    assert {proc.mode for proc in p.processes if proc.group == "rollout_replicas"} == {"whole"}
    assert "--trace=nvtx,osrt" in p.processes[0].launch_argv
    assert "--trace=nvtx" in p.controller.launch_argv


@pytest.mark.parametrize("block, key, value", [
    ("torch_memory", "trace_alloc_max_entries", 500), ("torch_memory", "stack_depth", 8),
    ("torch_memory", "memory_snapshot_num_steps", 3), ("torch_memory", "context", "state"),
    ("torch_memory", "stacks", "python"), ("torch_memory", "kw_args", {"x": 1}),
    ("precision_debugger", "config_path", "/c.json"), ("precision_debugger", "steps", [1]),
    ("precision_debugger", "stages", ["update_actor"]), ("precision_debugger", "strict", True)])
def test_unused_tool_blocks_name_a_value_that_asks_for_something(block, key, value):
    for where in (f"{GT}.{block}", f"{A}.tool_config.{block}"):
        found = warnings(cfg_with(V091, **{f"{where}.{key}": value}))
        assert any(w.startswith(f"ignored {where}.{key} (") and "verlprof does not run that "
                   "tool" in w for w in found), found
    assert warnings(cfg_with(V091, **{f"{GT}.torch_memory.stack_depth": 32})) == []


def test_npu_block_values_that_ask_for_something_are_named():
    for key, value in (("contents", ["npu"]), ("level", "level2"), ("analysis", False),
                       ("discrete", True), ("profile_token_start", 5)):
        found = warnings(cfg_with(V091, **{f"{R}.tool_config.npu.{key}": value}))
        assert any(w.startswith(f"ignored {R}.tool_config.npu.{key} (") for w in found), key
    assert warnings(cfg_with(V091, **{f"{A}.tool_config.npu.level": "level1"})) == []


# ---------------------------------------------------------------- role keys


def test_role_tool_other_than_global_is_refused():
    assert error(cfg_with(V091, **{f"{A}.tool": "torch"})).startswith(
        f"{A}.tool: is 'torch' but global_profiler.tool is 'nsys'; verlprof runs one tool")


def test_role_enable_all_ranks_ranks_save_path():
    p = plan(cfg_with(V091, **{f"{A}.all_ranks": True, "critic.profiler.enable": False}))
    assert [(proc.group, proc.rank) for proc in p.processes] == [
        *[("global_pool", r) for r in range(4)], *[("rollout_replicas", r) for r in range(4)]]
    assert any(w.startswith(f"ignored {A}.save_path (/x)") for w in warnings(
        cfg_with(V091, **{f"{A}.save_path": "/x"})))


def test_role_nsys_discrete_other_than_global_is_named():
    assert any(w.startswith(f"ignored {A}.tool_config.nsys.discrete (true)") for w in
               warnings(cfg_with(V091, **{f"{A}.tool_config.nsys.discrete": True})))


def test_torch_contents_become_capture_options():
    cfg = cfg_with(V091, **{f"{G}.tool": "torch", "critic.profiler.enable": False,
                            f"{A}.tool_config.torch.contents": ["cpu", "cuda", "stack",
                                                                "shapes", "memory"]})
    options = plan(cfg).processes[0].capture_options
    assert options.record_shapes and options.with_stack and options.profile_memory
    assert options.cuda is True
    cfg["actor_rollout_ref"]["actor"]["profiler"]["tool_config"]["torch"]["contents"] = []
    assert plan(cfg).processes[0].capture_options.cuda is False  # verl: cpu only


def test_torch_discrete_is_per_role():
    cfg = cfg_with(V091, **{f"{G}.tool": "torch", "critic.profiler.enable": False,
                            f"{A}.tool_config.torch.discrete": True})
    proc = plan(cfg).processes[0]
    assert proc.mode == "discrete"
    assert [(w.role, w.phase) for w in proc.windows[:2]] == [("actor", "compute_log_prob"),
                                                             ("actor", "update_actor")]


def test_torch_schedule_is_refused_when_it_would_cut_windows():
    cfg = cfg_with(V091, **{f"{G}.tool": "torch", f"{A}.tool_config.torch.schedule":
                            {"skip_first": 0, "wait": 1, "warmup": 1, "active": 2,
                             "repeat": 1}})
    assert error(cfg).startswith(
        f"{A}.tool_config.torch.schedule.active: 2 is not supported: verl steps this "
        "torch.profiler schedule once per update mini-batch inside update_actor / train_batch")
    cfg["global_profiler"]["tool"] = "nsys"
    assert any(w.startswith(f"ignored {A}.tool_config.torch.schedule.active (2): it only "
                            "applies to the torch tool") for w in warnings(cfg))
    cfg = cfg_with(V091, **{f"{G}.tool": "torch", f"{A}.tool_config.torch.schedule.active": 0})
    assert load(cfg).profiling.tool == "torch"


def test_step_start_and_step_end_of_060_are_refused_with_torch():
    cfg = v06(**{f"{G}.tool": "torch", f"{A}.tool_config.torch.step_end": 3})
    assert error(cfg).startswith(f"{A}.tool_config.torch.step_end: 3 is not supported: verl "
                                 "0.6/0.7 count these in update_policy calls")
    assert load(v06(**{f"{G}.tool": "torch", f"{A}.tool_config.torch.step_start": 0,
                       f"{A}.tool_config.torch.step_end": None})).profiling.tool == "torch"


TOKENS = {f"{G}.tool": "torch", f"{R}.enable": True, f"{R}.tool_config.torch.discrete": True,
          f"{R}.tool_config.torch.profile_token_start": 10,
          f"{R}.tool_config.torch.profile_token_end": 20}


def test_profile_tokens_of_the_rollout_plan_verls_engine_window():
    from verlprof.plan_model import EngineRoute, TokenWindow

    route = plan(cfg_with(V091, **TOKENS)).engine_route
    assert route == EngineRoute(group="rollout_replicas", steps=(1, 2),
                                trace_dir="/tmp/verlprof-keys", tokens=TokenWindow(10, 20),
                                key=f"{R}.tool_config.torch")
    assert route.tokens.describe() == "engine iterations 10 to 20"
    whole = plan(cfg_with(V091, **{**TOKENS, f"{R}.tool_config.torch.profile_token_start": None,
                                   f"{R}.tool_config.torch.profile_token_end": None}))
    assert whole.engine_route.tokens == TokenWindow(0, None)
    # no engine route without discrete (verl's servers profile only then), nor with nsys
    assert plan(cfg_with(V091, **{f"{G}.tool": "torch", f"{R}.enable": True})).engine_route \
        is None
    cfg = cfg_with(V091, **{**TOKENS, f"{G}.tool": "nsys"})
    assert plan(cfg).engine_route is None
    assert any(w.startswith(f"ignored {R}.tool_config.torch.profile_token_start (10)")
               for w in warnings(cfg))


@pytest.mark.parametrize("start,end,expected", [
    (5, 5, "profile_token_end: must be greater than profile_token_start (5), got 5"),
    (6, 2, "profile_token_end: must be greater than profile_token_start (6), got 2"),
    (-1, None, "profile_token_start: must be a non-negative int, got -1"),
    (None, 1.5, "profile_token_end: must be a non-negative int, got 1.5"),
])
def test_bad_profile_tokens_name_the_key(start, end, expected):
    cfg = cfg_with(V091, **{**TOKENS, f"{R}.tool_config.torch.profile_token_start": start,
                            f"{R}.tool_config.torch.profile_token_end": end})
    assert error(cfg).startswith(f"{R}.tool_config.torch.{expected}")


def test_profile_tokens_without_discrete_are_refused():
    cfg = cfg_with(V091, **{**TOKENS, f"{R}.tool_config.torch.discrete": False})
    assert error(cfg).startswith(f"{R}.tool_config.torch.profile_token_start: is set but "
                                 f"{R}.tool_config.torch.discrete is false")


def test_profile_tokens_of_another_role_are_ignored_as_verl_does():
    cfg = cfg_with(V091, **{f"{G}.tool": "torch", f"{A}.tool_config.torch.profile_token_end": 9})
    assert any(w.startswith(f"ignored {A}.tool_config.torch.profile_token_end (9): verl reads "
                            f"it only in {R}.tool_config.torch") for w in warnings(cfg))


def test_manual_save_and_targets_are_accepted():
    cfg = cfg_with(V091, **{f"{A}._target_": "verl.utils.profiler.ProfilerConfig",
                            f"{A}.tool_config.torch.manual_save": True,
                            f"{GT}.nsys._target_": "verl.utils.profiler.config.NsightToolConfig"})
    assert load(cfg).warnings == ()


def test_unknown_keys_are_refused_with_the_full_key():
    assert error(cfg_with(V091, **{f"{G}.finish_hook_cmnd": "x"})).startswith(
        "global_profiler.finish_hook_cmnd: unknown key")
    assert error(cfg_with(V091, **{f"{A}.tool_config.torch.schedule.activ": 1})).startswith(
        f"{A}.tool_config.torch.schedule.activ: unknown key")
    assert error(cfg_with(V091, **{f"{GT}.torch_memory.depth": 1})).startswith(
        f"{GT}.torch_memory.depth: unknown key")


def test_verlprof_plan_prints_the_release_and_the_finish_hook():
    import io

    from rich.console import Console

    from verlprof.plan.render import render_plan

    console = Console(file=io.StringIO(), width=300)
    render_plan(plan(cfg_with(V091, **{f"{G}.finish_hook_cmd": "upload.sh out",
                                       f"{G}.finish_hook_ranks": [1]})), console)
    text = console.file.getvalue()
    assert "source=verl_global_profiler verl=0.9.1" in text
    assert ("finish hook (global_profiler.finish_hook_cmd), after every report is gathered, on "
            "the nodes of global_pool rank 1: /bin/sh -c 'upload.sh out' (timeout 600s)") in text


def test_the_role_of_a_method_verl_annotates_without_a_label():
    from verlprof.config.verl_release import role_of_method

    assert [role_of_method(m) for m in ("generate_sequences", "compute_log_prob",
                                        "compute_ref_log_prob", "compute_values", "train_batch",
                                        "compute_rm_score", "other")] == [
        "rollout", "actor", "ref", "critic", "critic", "rm", None]


def test_the_legacy_reward_model_block_in_090_is_read_with_a_warning():
    cfg = cfg_with(V091, reward={"reward_model": {"enable": False}},
                   reward_model={"enable": True, "enable_resource_pool": True, "nnodes": 1,
                                 "n_gpus_per_node": 2})
    loaded = load(cfg)
    assert loaded.topology.groups[2].name == "reward_replicas"
    assert ("reward_model.enable: verl 0.9.1's main_ppo no longer reads the legacy "
            "reward_model block (only its fully_async entry point migrates it); verlprof reads "
            "it as verl 0.8.0 did: move it to reward.reward_model.enable") in loaded.warnings
    assert not any("legacy" in w for w in warnings(cfg_with(v08(), reward_model={
        "enable": True})))
