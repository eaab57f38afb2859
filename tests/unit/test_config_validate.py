# ruff: noqa: E501  (the corpus is a table: one case per line reads better than wrapped)
"""Validation: a corpus of malformed configs, each error starting with the exact full key.

Each case is a valid base config plus one change; the assertion is that ``str(err)`` starts
with the expected ``key: message`` prefix and is one line.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Tuple

import pytest

from verlprof.config import ConfigError, config_from_dict
from verlprof.config import validate as v

DELETE = object()

SEED: Dict[str, Any] = {
    "trainer": {"nnodes": 1, "n_gpus_per_node": 2, "device": "cpu", "profile_steps": [1, 2, 5],
                "profile_continuous_steps": False,
                "profiler": {"tool": "nsys", "enabled": True, "output_dir": "/tmp/out",
                             "filename_template": "{component}_step{step}_rank{rank}_{pid}",
                             "nsys": {"trigger": "auto", "worker_flags": [],
                                      "controller_flags": []},
                             "torch": {"record_shapes": False},
                             "rocprof_sys": {"args": {}, "env": {}},
                             "phases": {"actor": ["update_actor"]},
                             "rpc_timeout_s": 60, "finalize_timeout_s": 120},
                "controller_nsight_options": {"trace": "nvtx,osrt"},
                "worker_nsight_options": {"trace": "nvtx,osrt"}},
    "actor_rollout_ref": {"hybrid_engine": True,
                          "actor": {"profile_ranks": [0, 1], "profile_ranks_all": False,
                                    "profile_discrete": False},
                          "rollout": {"profile_ranks": [0], "profile_discrete": False},
                          "ref": {"profile_ranks": []}},
    "critic": {"profile_ranks": [0], "profile_discrete": False},
    "reward_model": {"enable": True, "profile_ranks": [], "profile_discrete": False},
}

V2: Dict[str, Any] = {
    "trainer": {"profile_steps": [1], "device": "cuda"},
    "actor_rollout_ref": {"actor": {"profiler": {"discrete": False, "all_ranks": False,
                                                 "ranks": [0]}}},
    "critic": {"profiler": {"discrete": False, "all_ranks": True, "ranks": []}},
}

V3: Dict[str, Any] = {
    "trainer": {"device": "cuda"},
    "global_profiler": {"_target_": "verl.utils.profiler.ProfilerConfig", "tool": "nsys",
                        "steps": [1, 2], "profile_continuous_steps": False,
                        "save_path": "outputs/profile",
                        "global_tool_config": {"nsys": {
                            "discrete": False,
                            "controller_nsight_options": {"trace": "cuda,nvtx"},
                            "worker_nsight_options": {"trace": "cuda,nvtx"}}}},
    "actor_rollout_ref": {"actor": {"profiler": {
        "tool": "nsys", "enable": True, "all_ranks": False, "ranks": [0],
        "save_path": "outputs/profile", "tool_config": {"nsys": {"discrete": False}}}}},
    "critic": {"profiler": {"enable": False, "ranks": []}},
}

T = "trainer"
P = "trainer.profiler"
A = "actor_rollout_ref.actor"

# (id, base, [(dotted path, value)], expected prefix)
CASES: List[Tuple[str, Dict[str, Any], List[Tuple[str, Any]], str]] = [
    # --- steps
    ("steps-zero", SEED, [("trainer.profile_steps", [1, 0])], "trainer.profile_steps[1]: steps are 1-indexed"),
    ("steps-negative", SEED, [("trainer.profile_steps", [-3])], "trainer.profile_steps[0]: steps are 1-indexed"),
    ("steps-float", SEED, [("trainer.profile_steps", [1, 2.0])], "trainer.profile_steps[1]: steps are positive integers"),
    ("steps-string-item", SEED, [("trainer.profile_steps", [1, 2, "5"])], "trainer.profile_steps[2]: steps are positive integers"),
    ("steps-bool", SEED, [("trainer.profile_steps", [True])], "trainer.profile_steps[0]: steps are positive integers"),
    ("steps-duplicate", SEED, [("trainer.profile_steps", [1, 2, 1])], "trainer.profile_steps[2]: step 1 listed twice"),
    ("steps-scalar", SEED, [("trainer.profile_steps", 5)], "trainer.profile_steps: must be a list"),
    ("steps-string", SEED, [("trainer.profile_steps", "1,2")], "trainer.profile_steps: must be a list"),
    ("steps-mapping", SEED, [("trainer.profile_steps", {"a": 1})], "trainer.profile_steps: must be a list"),
    ("steps-nested-list", SEED, [("trainer.profile_steps", [[1]])], "trainer.profile_steps[0]: "),
    ("steps-null-item", SEED, [("trainer.profile_steps", [1, None])], "trainer.profile_steps[1]: "),
    ("v3-steps-zero", V3, [("global_profiler.steps", [0])], "global_profiler.steps[0]: steps are 1-indexed"),
    ("v3-steps-string", V3, [("global_profiler.steps", "all")], "global_profiler.steps: must be a list"),
    # --- ranks
    ("ranks-duplicate", SEED, [(f"{A}.profile_ranks", [0, 0])], f"{A}.profile_ranks[1]: rank 0 listed twice"),
    ("ranks-negative", SEED, [("critic.profile_ranks", [-1])], "critic.profile_ranks[0]: ranks are non-negative"),
    ("ranks-float", SEED, [("critic.profile_ranks", [0.5])], "critic.profile_ranks[0]: ranks are non-negative integers"),
    ("ranks-bool", SEED, [("actor_rollout_ref.rollout.profile_ranks", [False])], "actor_rollout_ref.rollout.profile_ranks[0]: "),
    ("ranks-string", SEED, [("reward_model.profile_ranks", "0")], "reward_model.profile_ranks: must be a list"),
    ("ranks-scalar", SEED, [("critic.profile_ranks", 0)], "critic.profile_ranks: must be a list"),
    ("ranks-alias", SEED, [("actor_rollout_ref.critic", {"profile_ranks": [1, 1]})], "actor_rollout_ref.critic.profile_ranks[1]: rank 1 listed twice"),
    ("ranks-rm-alias", SEED, [("rm", {"profile_ranks": ["x"]})], "rm.profile_ranks[0]: "),
    ("v2-ranks-dup", V2, [("critic.profiler.ranks", [2, 2])], "critic.profiler.ranks[1]: rank 2 listed twice"),
    ("v3-ranks-negative", V3, [(f"{A}.profiler.ranks", [-2])], f"{A}.profiler.ranks[0]: ranks are non-negative"),
    # --- booleans
    ("bool-ranks-all", SEED, [(f"{A}.profile_ranks_all", "yes")], f"{A}.profile_ranks_all: must be true or false"),
    ("bool-discrete", SEED, [("critic.profile_discrete", 1)], "critic.profile_discrete: must be true or false"),
    ("bool-continuous", SEED, [("trainer.profile_continuous_steps", "false")], "trainer.profile_continuous_steps: must be true or false"),
    ("bool-enabled", SEED, [(f"{P}.enabled", "on")], f"{P}.enabled: must be true or false"),
    ("bool-torch", SEED, [(f"{P}.torch.with_stack", 0)], f"{P}.torch.with_stack: must be true or false"),
    ("bool-torch-cuda", SEED, [(f"{P}.torch.cuda", "auto")], f"{P}.torch.cuda: must be true or false"),
    ("v2-bool-discrete", V2, [("critic.profiler.discrete", "no")], "critic.profiler.discrete: must be true or false"),
    ("v3-bool-enable", V3, [(f"{A}.profiler.enable", "True")], f"{A}.profiler.enable: must be true or false"),
    ("v3-bool-discrete", V3, [("global_profiler.global_tool_config.nsys.discrete", 1)], "global_profiler.global_tool_config.nsys.discrete: must be true"),
    # --- unknown keys, did-you-mean
    ("unknown-role-key", SEED, [(f"{A}.profile_rank", [0])], f"{A}.profile_rank: unknown key; did you mean profile_ranks?"),
    ("unknown-role-key-2", SEED, [("critic.profile_discret", True)], "critic.profile_discret: unknown key; did you mean profile_discrete?"),
    ("unknown-role-key-3", SEED, [("reward_model.profiling", True)], "reward_model.profiling: unknown key; did you mean "),
    ("unknown-trainer-key", SEED, [("trainer.profile_step", [1])], "trainer.profile_step: unknown key; did you mean profile_steps?"),
    ("unknown-trainer-nsight", SEED, [("trainer.worker_nsight_option", {})], "trainer.worker_nsight_option: unknown key; did you mean worker_nsight_options?"),
    ("unknown-profiler-key", SEED, [(f"{P}.outputdir", "x")], f"{P}.outputdir: unknown key; did you mean output_dir?"),
    ("unknown-profiler-key-2", SEED, [(f"{P}.tools", "nsys")], f"{P}.tools: unknown key; did you mean tool?"),
    ("unknown-profiler-misplaced", SEED, [(f"{P}.steps", [1])], f"{P}.steps: unknown key here; steps are trainer.profile_steps"),
    ("unknown-nsys-key", SEED, [(f"{P}.nsys.triger", "cuda")], f"{P}.nsys.triger: unknown key; did you mean trigger?"),
    ("unknown-torch-key", SEED, [(f"{P}.torch.record_shape", True)], f"{P}.torch.record_shape: unknown key; did you mean record_shapes?"),
    ("unknown-rocprof-key", SEED, [(f"{P}.rocprof_sys.arg", {})], f"{P}.rocprof_sys.arg: unknown key; did you mean args?"),
    ("unknown-v2-key", V2, [("critic.profiler.rank", [0])], "critic.profiler.rank: unknown key; did you mean ranks?"),
    ("unknown-v2-v3-key", V2, [("critic.profiler.enable", True)], "critic.profiler.enable: unknown key here; needs a global_profiler section"),
    ("unknown-global-key", V3, [("global_profiler.step", [1])], "global_profiler.step: unknown key; did you mean steps?"),
    ("unknown-global-tool-section", V3, [("global_profiler.global_tool_config.nsyss", {})], "global_profiler.global_tool_config.nsyss: unknown key; did you mean nsys?"),
    ("unknown-global-tool-section-2", V3, [("global_profiler.global_tool_config.nsight", {})], "global_profiler.global_tool_config.nsight: unknown key; valid keys: nsys, torch"),
    ("unknown-global-nsys-key", V3, [("global_profiler.global_tool_config.nsys.worker_options", {})], "global_profiler.global_tool_config.nsys.worker_options: unknown key"),
    ("unknown-v3-role-key", V3, [(f"{A}.profiler.rank", [0])], f"{A}.profiler.rank: unknown key; did you mean ranks?"),
    ("unknown-v3-role-discrete", V3, [(f"{A}.profiler.discrete", True)], f"{A}.profiler.discrete: unknown key here; in verl's global_profiler layout nsys discrete is global"),
    ("unknown-top-level-profile", SEED, [("profile_steps", [1])], "profile_steps: unknown key here; profiling keys live in trainer"),
    ("unknown-arr-profile", SEED, [("actor_rollout_ref.profile_ranks", [0])], "actor_rollout_ref.profile_ranks: unknown key here; set it per role"),
    ("unknown-top-level", V3, [("global_profile", {})], "global_profile: unknown key; did you mean global_profiler?"),
    # --- tool
    ("tool-unknown", SEED, [(f"{P}.tool", "nsight")], f"{P}.tool: must be one of nsys, torch, rocprof_sys"),
    ("tool-type", SEED, [(f"{P}.tool", 3)], f"{P}.tool: must be one of"),
    ("v3-tool-npu", V3, [("global_profiler.tool", "npu")], "global_profiler.tool: npu is not supported by verlprof: verlprof does not drive Ascend's NPU profiler; valid values: nsys, torch, rocprof_sys"),
    ("v3-tool-torch-memory", V3, [("global_profiler.tool", "torch_memory")], "global_profiler.tool: torch_memory is not supported"),
    ("v3-tool-unknown", V3, [("global_profiler.tool", "perf")], "global_profiler.tool: must be one of nsys, torch, rocprof_sys"),
    ("v3-role-tool-differs", V3, [(f"{A}.profiler.tool", "torch")], f"{A}.profiler.tool: is 'torch' but global_profiler.tool is 'nsys'"),
    ("v3-trainer-tool-differs", V3, [(f"{P}", {"tool": "torch"})], f"{P}.tool: is torch but global_profiler.tool is nsys"),
    # --- layout mixing
    ("mix-seed-and-v2", SEED, [("critic.profiler", {"ranks": [0]})], "critic.profile_ranks: seed-layout key next to critic.profiler"),
    ("mix-seed-in-v3", V3, [("critic.profile_ranks", [0])], "critic.profile_ranks: seed-layout key next to critic.profiler"),
    ("mix-seed-in-v3-no-block", V3, [("reward_model", {"profile_ranks": [0]})], "reward_model.profile_ranks: seed-layout key, but this config uses global_profiler"),
    ("mix-trainer-steps-in-v3", V3, [("trainer.profile_steps", [1])], "trainer.profile_steps: this config uses global_profiler"),
    ("mix-trainer-options-in-v3", V3, [("trainer.worker_nsight_options", {"t": "cuda"})], "trainer.worker_nsight_options: this config uses global_profiler"),
    ("mix-trainer-continuous-in-v3", V3, [("trainer.profile_continuous_steps", True)], "trainer.profile_continuous_steps: this config uses global_profiler"),
    # --- continuous + discrete
    ("continuous-discrete", SEED, [("trainer.profile_continuous_steps", True), ("critic.profile_discrete", True)], "trainer.profile_continuous_steps: cannot be true while critic.profile_discrete is true"),
    ("v2-continuous-discrete", V2, [("trainer.profile_continuous_steps", True), (f"{A}.profiler.discrete", True)], f"trainer.profile_continuous_steps: cannot be true while {A}.profiler.discrete is true"),
    ("v3-continuous-discrete", V3, [("global_profiler.profile_continuous_steps", True), ("global_profiler.global_tool_config.nsys.discrete", True)], "global_profiler.profile_continuous_steps: cannot be true while global_profiler.global_tool_config.nsys.discrete is true"),
    # --- options and flags
    ("options-o-and-output", SEED, [("trainer.worker_nsight_options", {"o": "a", "output": "b"})], "trainer.worker_nsight_options.output: given twice"),
    ("options-t-and-trace", SEED, [("trainer.controller_nsight_options", {"trace": "a", "t": "b"})], "trainer.controller_nsight_options.t: given twice"),
    ("options-bad-name", SEED, [("trainer.worker_nsight_options", {"bad name": 1})], "trainer.worker_nsight_options.bad name: option names"),
    ("options-newline-name", SEED, [("trainer.worker_nsight_options", {"trace\n": 1})], "trainer.worker_nsight_options.'trace\\n': option names"),
    ("options-list-value", SEED, [("trainer.worker_nsight_options", {"trace": ["cuda"]})], "trainer.worker_nsight_options.trace: must be a string, number or boolean"),
    ("options-nan", SEED, [("trainer.worker_nsight_options", {"delay": float("nan")})], "trainer.worker_nsight_options.delay: must be a finite number"),
    ("options-negative-delay", SEED, [("trainer.worker_nsight_options", {"delay": -1})], "trainer.worker_nsight_options.delay: must be a non-negative number"),
    ("options-not-mapping", SEED, [("trainer.worker_nsight_options", ["trace"])], "trainer.worker_nsight_options: must be a mapping"),
    ("options-controller-not-mapping", SEED, [("trainer.controller_nsight_options", "cuda")], "trainer.controller_nsight_options: must be a mapping"),
    ("flags-overlap", SEED, [(f"{P}.nsys.worker_flags", ["trace"])], f"{P}.nsys.worker_flags[0]: --trace is also set as option trainer.worker_nsight_options.trace"),
    ("flags-overlap-short", SEED, [(f"{P}.nsys.controller_flags", ["--t"])], f"{P}.nsys.controller_flags[0]: --t is also set as option trainer.controller_nsight_options.trace"),
    ("flags-not-list", SEED, [(f"{P}.nsys.worker_flags", "stats")], f"{P}.nsys.worker_flags: must be a list"),
    ("flags-bad-item", SEED, [(f"{P}.nsys.worker_flags", ["a b"])], f"{P}.nsys.worker_flags[0]: not a flag name"),
    ("flags-overlap-default", SEED, [("trainer.worker_nsight_options", None), (f"{P}.nsys.worker_flags", ["trace"])], f"{P}.nsys.worker_flags[0]: --trace is also set"),
    ("v3-options-o-output", V3, [("global_profiler.global_tool_config.nsys.worker_nsight_options", {"o": "x", "output": "y"})], "global_profiler.global_tool_config.nsys.worker_nsight_options.output: given twice"),
    ("rocprof-args-bad", SEED, [(f"{P}.rocprof_sys.args", {"x": [1]})], f"{P}.rocprof_sys.args.x: must be a string, number or boolean"),
    ("rocprof-env-name", SEED, [(f"{P}.rocprof_sys.env", {"1BAD": "x"})], f"{P}.rocprof_sys.env.1BAD: not an environment variable name"),
    ("rocprof-env-value", SEED, [(f"{P}.rocprof_sys.env", {"ROCPROFSYS_X": None})], f"{P}.rocprof_sys.env.ROCPROFSYS_X: must be a string or number"),
    ("rocprof-executable", SEED, [(f"{P}.rocprof_sys.executable", "")], f"{P}.rocprof_sys.executable: must be a non-empty string"),
    # --- filename template
    ("template-no-rank", SEED, [(f"{P}.filename_template", "{component}_{step}")], f"{P}.filename_template: must contain {{rank}}"),
    ("template-no-step", SEED, [(f"{P}.filename_template", "{component}_{rank}_{pid}")], f"{P}.filename_template: must contain {{step}}"),
    ("template-unknown-field", SEED, [(f"{P}.filename_template", "{component}{step}{rank}{node}")], f"{P}.filename_template: unknown field {{node}}"),
    ("template-slash", SEED, [(f"{P}.filename_template", "{component}/{step}_{rank}")], f"{P}.filename_template: is a file name"),
    ("template-dotdot", SEED, [(f"{P}.filename_template", "..{component}{step}{rank}")], f"{P}.filename_template: is a file name"),
    ("template-braces", SEED, [(f"{P}.filename_template", "{component}{step}{rank")], f"{P}.filename_template: not a valid template"),
    ("template-spec", SEED, [(f"{P}.filename_template", "{component}{step}{rank:03d}")], f"{P}.filename_template: field {{rank}} takes no format spec"),
    ("template-positional", SEED, [(f"{P}.filename_template", "{}{component}{step}{rank}")], f"{P}.filename_template: unknown field {{}}"),
    ("template-type", SEED, [(f"{P}.filename_template", 5)], f"{P}.filename_template: must be a non-empty string"),
    # --- trigger, timeouts, executable, output_dir
    ("trigger-bad", SEED, [(f"{P}.nsys.trigger", "cudaProfilerApi")], f"{P}.nsys.trigger: must be one of auto, cuda, nvtx"),
    ("timeout-zero", SEED, [(f"{P}.rpc_timeout_s", 0)], f"{P}.rpc_timeout_s: must be a positive number"),
    ("timeout-negative", SEED, [(f"{P}.finalize_timeout_s", -5)], f"{P}.finalize_timeout_s: must be a positive number"),
    ("timeout-string", SEED, [(f"{P}.rpc_timeout_s", "60")], f"{P}.rpc_timeout_s: must be a positive number"),
    ("timeout-bool", SEED, [(f"{P}.rpc_timeout_s", True)], f"{P}.rpc_timeout_s: must be a positive number"),
    ("rank-failure-policy", SEED, [(f"{P}.on_rank_failure", "stop")], f"{P}.on_rank_failure: must be one of continue, raise"),
    ("timeout-inf", SEED, [(f"{P}.finalize_timeout_s", float("inf"))], f"{P}.finalize_timeout_s: must be a positive number"),
    ("executable-empty", SEED, [(f"{P}.nsys.executable", " ")], f"{P}.nsys.executable: must be a non-empty string"),
    ("output-dir-type", SEED, [(f"{P}.output_dir", ["a"])], f"{P}.output_dir: must be a non-empty string"),
    ("output-dir-nul", SEED, [(f"{P}.output_dir", "a\x00b")], f"{P}.output_dir: must be one line"),
    ("output-dir-surrogate", SEED, [(f"{P}.output_dir", "~\ud800/x")], f"{P}.output_dir: must be valid text"),
    ("options-value-nul", SEED, [("trainer.worker_nsight_options", {"trace": "a\x00"})], "trainer.worker_nsight_options.trace: must not contain NUL"),
    ("default-local-dir-type", SEED, [(f"{P}.output_dir", None), ("trainer.default_local_dir", 3)], "trainer.default_local_dir: must be a non-empty string"),
    ("experiment-name-type", SEED, [(f"{P}.output_dir", None), ("trainer.experiment_name", [1])], "trainer.experiment_name: must be a non-empty string"),
    ("v3-save-path-type", V3, [("global_profiler.save_path", 5)], "global_profiler.save_path: must be a non-empty string"),
    # --- phases
    ("phases-role", SEED, [(f"{P}.phases", {"trainer": ["fit"]})], f"{P}.phases.trainer: unknown role; roles: actor, rollout, ref, critic, rm"),
    ("phases-method", SEED, [(f"{P}.phases", {"actor": ["update-actor"]})], f"{P}.phases.actor[0]: not a method name"),
    ("phases-keyword", SEED, [(f"{P}.phases", {"critic": ["class"]})], f"{P}.phases.critic[0]: not a method name"),
    ("phases-duplicate", SEED, [(f"{P}.phases", {"actor": ["a", "a"]})], f"{P}.phases.actor[1]: phase a listed twice"),
    ("phases-not-list", SEED, [(f"{P}.phases", {"actor": "update_actor"})], f"{P}.phases.actor: must be a list"),
    ("phases-not-mapping", SEED, [(f"{P}.phases", ["actor"])], f"{P}.phases: must be a mapping"),
    # --- section shapes
    ("trainer-not-mapping", SEED, [("trainer", [1])], "trainer: must be a mapping"),
    ("profiler-not-mapping", SEED, [(P, "nsys")], f"{P}: must be a mapping"),
    ("arr-not-mapping", SEED, [("actor_rollout_ref", 3)], "actor_rollout_ref: must be a mapping"),
    ("role-not-mapping", SEED, [("critic", "yes")], "critic: must be a mapping"),
    ("alias-not-mapping", SEED, [("actor_rollout_ref.rm", [0])], "actor_rollout_ref.rm: must be a mapping"),
    ("v2-block-not-mapping", V2, [("critic.profiler", [0])], "critic.profiler: must be a mapping"),
    ("global-not-mapping", V3, [("global_profiler", "nsys")], "global_profiler: must be a mapping"),
    ("global-tool-config-not-mapping", V3, [("global_profiler.global_tool_config", [1])], "global_profiler.global_tool_config: must be a mapping"),
    ("v3-tool-config-section", V3, [(f"{A}.profiler.tool_config", {"nsys": 1})], f"{A}.profiler.tool_config.nsys: must be a mapping"),
    ("v3-torch-contents", V3, [("global_profiler.global_tool_config.torch", {"contents": ["gpu"]})], "global_profiler.global_tool_config.torch.contents[0]: must be one of cuda, cpu, memory, shapes, stack"),
    ("v3-torch-contents-type", V3, [(f"{A}.profiler.tool_config", {"torch": {"contents": "cuda"}})], f"{A}.profiler.tool_config.torch.contents: must be a list"),
    # --- verl releases' other profiler keys (tests/unit/test_verl_keys.py: one test per key)
    ("v3-tool-precision-debugger", V3, [("global_profiler.tool", "precision_debugger")], "global_profiler.tool: precision_debugger is not supported by verlprof: verlprof does not drive msprobe's precision debugger"),
    ("v091-hook-cmd-type", V3, [("global_profiler.finish_hook_cmd", 3)], "global_profiler.finish_hook_cmd: must be a non-empty string"),
    ("v091-hook-ranks", V3, [("global_profiler.finish_hook_ranks", [-1])], "global_profiler.finish_hook_ranks[0]: ranks are non-negative"),
    ("v091-hook-all-ranks", V3, [("global_profiler.finish_hook_all_ranks", "yes")], "global_profiler.finish_hook_all_ranks: must be true or false"),
    ("v091-relocate-type", V3, [("global_profiler.relocate_results", "yes")], "global_profiler.relocate_results: must be true or false"),
    ("v091-role-hook-differs", V3, [("global_profiler.finish_hook_cmd", "a.sh"), (f"{A}.profiler.finish_hook_cmd", "b.sh")], f"{A}.profiler.finish_hook_cmd: is 'b.sh' but global_profiler.finish_hook_cmd is 'a.sh'; verlprof runs one finish hook"),
    ("v091-hook-both-layouts", V3, [("global_profiler.finish_hook_cmd", "a.sh"), (f"{P}.finish_hook", {"cmd": "b.sh"})], "global_profiler.finish_hook_cmd: is set and so is trainer.profiler.finish_hook.cmd"),
    ("hook-timeout", SEED, [(f"{P}.finish_hook", {"cmd": "x", "timeout_s": 0})], f"{P}.finish_hook.timeout_s: must be a positive number"),
    ("hook-unknown-key", SEED, [(f"{P}.finish_hook", {"command": "x"})], f"{P}.finish_hook.command: unknown key"),
    ("v090-schedule-torch", V3, [("global_profiler.tool", "torch"), (f"{A}.profiler.tool", "torch"), (f"{A}.profiler.tool_config", {"torch": {"schedule": {"active": 1}}})], f"{A}.profiler.tool_config.torch.schedule.active: 1 is not supported: verl steps this torch.profiler schedule once per update mini-batch"),
    ("v090-schedule-negative", V3, [(f"{A}.profiler.tool_config", {"torch": {"schedule": {"wait": -1}}})], f"{A}.profiler.tool_config.torch.schedule.wait: must be a non-negative int"),
    ("v090-profile-token-order", V3, [("global_profiler.tool", "torch"), (f"{A}.profiler.tool", "torch"), ("actor_rollout_ref.rollout.profiler", {"tool_config": {"torch": {"discrete": True, "profile_token_start": 9, "profile_token_end": 3}}})], "actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_end: must be greater than profile_token_start (9), got 3"),
    ("v060-step-end-torch", V3, [("global_profiler.tool", "torch"), (f"{A}.profiler.tool", "torch"), (f"{A}.profiler.tool_config", {"torch": {"step_end": 4}})], f"{A}.profiler.tool_config.torch.step_end: 4 is not supported: verl 0.6/0.7 count these"),
    ("v3-torch-memory-key", V3, [("global_profiler.global_tool_config.torch_memory", {"depth": 1})], "global_profiler.global_tool_config.torch_memory.depth: unknown key"),
    ("v080-rm-legacy-conflict", V3, [("reward", {"reward_model": {"enable": True, "enable_resource_pool": True, "nnodes": 1, "n_gpus_per_node": 4}}), ("reward_model.n_gpus_per_node", 2)], "reward_model.n_gpus_per_node: is 2 but reward.reward_model.n_gpus_per_node is 4; set only reward.reward_model.n_gpus_per_node"),
    ("v080-rm-pool-size", V3, [("reward", {"reward_model": {"enable": True, "enable_resource_pool": True, "nnodes": 0}})], "reward.reward_model.nnodes: must be a positive int when reward.reward_model.enable_resource_pool is true"),
    ("v060-rm-pool-size", V3, [("reward_model.enable", True), ("reward_model.enable_resource_pool", True), ("reward_model.nnodes", None)], "reward_model.nnodes: must be a positive int when reward_model.enable_resource_pool is true"),
    ("v080-distillation-size", V3, [("distillation", {"enabled": True, "nnodes": 1, "n_gpus_per_node": 0})], "distillation.n_gpus_per_node: must be a positive int when distillation.enabled is true"),
    ("v080-hybrid-engine-off", V3, [("distillation", {"enabled": False}), ("actor_rollout_ref.hybrid_engine", False)], "actor_rollout_ref.hybrid_engine: false is not supported by verl 0.8.0: its trainer asserts the hybrid engine"),
    ("v050-block-in-v3", V3, [("actor_rollout_ref.profiler", {"ranks": [0]})], "actor_rollout_ref.profiler: verl 0.5.0's block next to global_profiler (verl 0.6.0+)"),
    ("v050-block-next-to-role", V2, [("actor_rollout_ref.profiler", {"ranks": [0]})], f"{A}.profiler: next to actor_rollout_ref.profiler (verl 0.5.0's one block"),
    ("v050-block-key", V2, [("actor_rollout_ref.actor", DELETE), ("actor_rollout_ref.profiler", {"rank": [0]})], "actor_rollout_ref.profiler.rank: unknown key; did you mean ranks?"),
    ("v041-megatron-profile", V2, [(f"{A}.profiler", DELETE), ("actor_rollout_ref.actor.profile", {"use_profile": True})], "actor_rollout_ref.actor.profile.use_profile: true is not supported"),
    ("v3-critic-enable-type", V3, [("critic.enable", "maybe")], "critic.enable: must be true or false"),
    # --- topology keys read from the trainer config
    ("device-bad", SEED, [("trainer.device", "tpu")], "trainer.device: must be cuda, cpu or npu"),
    ("nnodes-bad", SEED, [("trainer.nnodes", 0)], "trainer.nnodes: must be a positive int"),
    ("hybrid-bad", SEED, [("actor_rollout_ref.hybrid_engine", "yes")], "actor_rollout_ref.hybrid_engine: must be true or false"),
    # --- shared references expanded by copying: measured first, refused unexpanded
    ("shared-reference-bomb", SEED, [("critic.extra", "BOMB")], "config: the config expands to more than 10000 values"),
    ("huge-flow-list", SEED, [("critic.extra", list(range(20_000)))], "config: the config expands to"),
]


def _bomb(levels: int = 7, width: int = 9) -> Any:
    """The dict twin of a YAML alias bomb: each level lists the one below ``width`` times."""
    node: Any = ["x"]
    for _ in range(levels):
        node = [node] * width
    return node


def build(base: Dict[str, Any], changes: List[Tuple[str, Any]]) -> Dict[str, Any]:
    cfg = copy.deepcopy(base)
    for dotted, value in changes:
        parts = dotted.split(".")
        node = cfg
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        if value is DELETE:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = _bomb() if value == "BOMB" else value
    return cfg


def test_corpus_is_large_enough():
    assert len(CASES) >= 60
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("base", [SEED, V2, V3], ids=["seed", "v2", "v3"])
def test_bases_are_valid(base):
    loaded = config_from_dict(base, env={})
    assert loaded.profiling.active


@pytest.mark.parametrize("name, base, changes, expected", CASES, ids=[c[0] for c in CASES])
def test_malformed(name, base, changes, expected):
    with pytest.raises(ConfigError) as info:
        config_from_dict(build(base, changes), env={})
    text = str(info.value)
    assert "\n" not in text and "\r" not in text
    assert text.startswith(expected), text
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------- validators directly


def test_steps_and_ranks_validators():
    assert v.steps(None, "k") == () and v.steps([], "k") == ()
    assert v.steps([3, 1], "k") == (1, 3)
    assert v.ranks((2, 0), "k") == (2, 0)
    with pytest.raises(ConfigError, match=r"^k\[1\]: rank 0 listed twice$"):
        v.ranks([0, 0], "k")


def test_template_validator_accepts_all_fields():
    template = "{component}_step{step}_rank{rank}_{host}_{pid}"
    assert v.filename_template(template, "k", "d") == template
    assert v.filename_template(None, "k", "d") == "d"


def test_did_you_mean_falls_back_to_the_list():
    with pytest.raises(ConfigError, match=r"^p.zzz: unknown key; valid keys: a_b, c_d$"):
        v.known_keys({"zzz": 1}, ("a_b", "c_d"), "p")


def test_non_string_keys_are_named():
    with pytest.raises(ConfigError, match=r"^trainer.profiler.3: unknown key"):
        config_from_dict({"trainer": {"profiler": {3: 1}}}, env={})
