"""verl's 2025-08+ layout: ``global_profiler`` plus a ``profiler`` block per role.

::

    global_profiler:
      tool: nsys                 # nsys | torch (torch_memory and npu are not supported)
      steps: [1, 2]
      profile_continuous_steps: false
      save_path: outputs/profile
      global_tool_config:
        nsys: {discrete: false, controller_nsight_options: {...}, worker_nsight_options: {...}}
        torch: {contents: [cuda, cpu, shapes], discrete: false}
    actor_rollout_ref:
      actor:
        profiler: {tool: nsys, enable: true, all_ranks: false, ranks: [0], save_path: ...,
                   tool_config: {nsys: {discrete: ...}, torch: {...}}}

Semantics kept from verl: ``tool: null`` disables profiling; a role with ``enable: false``
is not profiled; nsys ``discrete`` is global (verl interpolates every role's copy from
``global_tool_config.nsys.discrete``), so it applies to every role; the torch profiler's
``discrete`` is per role. Differences, all reported: a role ``tool`` other than the global one
is an error (one tool per run); a role ``save_path`` other than the output directory is
ignored with a warning (all reports end up under one directory); per-role torch ``contents``
are merged into the one torch configuration.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from verlprof.config import validate as v
from verlprof.config import verl_keys
from verlprof.config.draft import Draft, RoleDraft
from verlprof.config.schema import TOOLS, EngineTorchConfig
from verlprof.config.verl_release import FINISH_HOOK_KEYS
from verlprof.errors import ConfigError

PREFIX = "global_profiler"

GLOBAL_KEYS: Tuple[str, ...] = ("_target_", "tool", "steps", "profile_continuous_steps",
                                "save_path", "global_tool_config") + FINISH_HOOK_KEYS
"""Keys of ``global_profiler``."""

TOOL_SECTIONS: Tuple[str, ...] = ("nsys", "torch", "torch_memory", "npu", "precision_debugger")
"""Sub-blocks of ``global_tool_config`` / a role's ``tool_config`` (verl's tool names; ``nsys``
and ``torch`` are read, the others checked by :mod:`verlprof.config.verl_keys`)."""

NSYS_GLOBAL_KEYS: Tuple[str, ...] = ("_target_", "name", "discrete", "controller_nsight_options",
                                     "worker_nsight_options")
NSYS_ROLE_KEYS: Tuple[str, ...] = ("_target_", "name", "discrete")
TORCH_TOOL_KEYS: Tuple[str, ...] = ("_target_", "name", "contents", "discrete", "step_start",
                                    "step_end", "manual_save", "schedule",
                                    "profile_token_start", "profile_token_end")
"""``manual_save`` (0.7.0: save the trace at stop) asks for what verlprof always does."""
TORCH_CONTENTS: Tuple[str, ...] = ("cuda", "cpu", "memory", "shapes", "stack")
"""verl's torch ``contents`` items (``cpu`` is always traced)."""

ROLE_KEYS: Tuple[str, ...] = ("_target_", "tool", "enable", "all_ranks", "ranks", "save_path",
                              "tool_config") + FINISH_HOOK_KEYS
"""Keys of a per-role ``profiler`` block in this layout."""

_UNSUPPORTED_TOOLS = {
    "torch_memory": "verlprof does not take CUDA memory snapshots; use tool torch with a "
                    "torch contents list holding memory",
    "npu": "verlprof does not drive Ascend's NPU profiler",
    "precision_debugger": "verlprof does not drive msprobe's precision debugger"}

VERL_SAVE_PATH = "outputs/profile"
"""verl's ``ProfilerConfig.save_path`` when the config leaves it null."""

_DISCRETE_HINT = ("in verl's global_profiler layout nsys discrete is global: set "
                  "global_profiler.global_tool_config.nsys.discrete")


@dataclass
class GlobalSettings:
    """What the role reader needs from ``global_profiler``."""

    tool: Optional[str]
    """The resolved tool; None when profiling is disabled by ``tool: null``."""
    save_path: Optional[str] = None
    nsys_discrete: bool = False
    torch_discrete: bool = False
    hook: Dict[str, Any] = field(default_factory=dict)
    """The finish-hook keys as read from ``global_profiler`` (roles must repeat them)."""


def check_no_trainer_keys(trainer: Mapping[Any, Any]) -> None:
    """The older layouts' trainer keys next to ``global_profiler`` would be ignored: refuse."""
    moved = {"profile_steps": "global_profiler.steps",
             "profile_continuous_steps": "global_profiler.profile_continuous_steps",
             "controller_nsight_options":
                 "global_profiler.global_tool_config.nsys.controller_nsight_options",
             "worker_nsight_options":
                 "global_profiler.global_tool_config.nsys.worker_nsight_options"}
    for name, new in moved.items():
        value = trainer.get(name)
        if value is None or (name == "profile_continuous_steps" and value is False):
            continue
        raise ConfigError(f"trainer.{name}", f"this config uses global_profiler (verl 2025-08+); "
                                             f"use one layout: set {new} instead")


def read_global(value: Any, draft: Draft, trainer_tool: Optional[str]) -> GlobalSettings:
    """Fill the run-wide fields of ``draft`` from ``global_profiler``."""
    gp = v.mapping(value, PREFIX)
    v.known_keys(gp, GLOBAL_KEYS, PREFIX)
    tool = _tool(gp.get("tool"), draft, trainer_tool)
    settings = GlobalSettings(tool=tool)
    draft.set(steps=v.steps(gp.get("steps"), f"{PREFIX}.steps"))
    draft.steps_key, draft.steps_given = f"{PREFIX}.steps", gp.get("steps") is not None
    draft.set(continuous_steps=v.boolean(gp.get("profile_continuous_steps"),
                                         f"{PREFIX}.profile_continuous_steps"))
    draft.continuous_key = f"{PREFIX}.profile_continuous_steps"
    if gp.get("save_path") is not None:
        settings.save_path = v.text(gp["save_path"], f"{PREFIX}.save_path")

    settings.hook = verl_keys.read_global_hook(gp, draft)
    key = f"{PREFIX}.global_tool_config"
    tools = _tool_sections(gp.get("global_tool_config"), key, draft)
    nsys = v.mapping(tools.get("nsys"), f"{key}.nsys")
    v.known_keys(nsys, NSYS_GLOBAL_KEYS, f"{key}.nsys")
    settings.nsys_discrete = v.boolean(nsys.get("discrete"), f"{key}.nsys.discrete")
    draft.set_nsys(controller_options=v.mapping(nsys.get("controller_nsight_options"),
                                                f"{key}.nsys.controller_nsight_options"),
                   controller_options_key=f"{key}.nsys.controller_nsight_options",
                   worker_options_key=f"{key}.nsys.worker_nsight_options")
    worker = v.mapping(nsys.get("worker_nsight_options"), f"{key}.nsys.worker_nsight_options")
    draft.worker_options = dict(worker) or None
    torch = _torch_block(tools.get("torch"), f"{key}.torch")
    settings.torch_discrete = v.boolean(torch.get("discrete"), f"{key}.torch.discrete")
    draft.torch_contents = _contents(torch.get("contents"), f"{key}.torch.contents")
    return settings


def _tool_sections(value: Any, key: str, draft: Draft) -> Mapping[str, Any]:
    """A ``global_tool_config`` or ``tool_config`` mapping: only known tool sections, and the
    sections of tools verlprof does not run checked for settings that would be lost."""
    tools = v.mapping(value, key)
    v.known_keys(tools, TOOL_SECTIONS, key)
    for name in TOOL_SECTIONS:
        if name in verl_keys.DEFAULTS:
            verl_keys.check_unused_tool(v.mapping(tools.get(name), f"{key}.{name}"),
                                        f"{key}.{name}", name, draft)
    return tools


def read_role(main_key: str, section: Any, draft: Draft, gp: GlobalSettings) -> RoleDraft:
    """One role's ``profiler`` block (``section`` None: the role sets nothing)."""
    key = f"{section.key if section is not None else main_key}.profiler"
    block = v.mapping(section.block.get("profiler") if section is not None else None, key)
    v.known_keys(block, ROLE_KEYS, key, {"discrete": _DISCRETE_HINT})
    if block.get("tool") is not None and block["tool"] != gp.tool:
        raise ConfigError(f"{key}.tool", f"is {v.show(block['tool'])} but global_profiler.tool "
                                         f"is {v.show(gp.tool)}; verlprof runs one tool for the "
                                         "whole run: set global_profiler.tool")
    verl_keys.check_role_hook(block, key, gp.hook)
    enable = v.boolean(block.get("enable"), f"{key}.enable", default=True)
    ranks = v.ranks(block.get("ranks"), f"{key}.ranks")
    all_ranks = v.boolean(block.get("all_ranks"), f"{key}.all_ranks")
    output_dir = draft.config.output_dir
    if block.get("save_path") is not None:
        save_path = v.text(block["save_path"], f"{key}.save_path")
        if _norm(save_path) != _norm(output_dir) and gp.save_path != save_path:
            draft.warn(f"ignored {key}.save_path ({save_path}); every report goes to the "
                       f"output directory {output_dir}")
    tool_config = _tool_sections(block.get("tool_config"), f"{key}.tool_config", draft)
    nsys = v.mapping(tool_config.get("nsys"), f"{key}.tool_config.nsys")
    v.known_keys(nsys, NSYS_ROLE_KEYS, f"{key}.tool_config.nsys")
    role_nsys = v.optional_boolean(nsys.get("discrete"), f"{key}.tool_config.nsys.discrete")
    torch = _torch_block(tool_config.get("torch"), f"{key}.tool_config.torch")
    role_torch = v.optional_boolean(torch.get("discrete"), f"{key}.tool_config.torch.discrete")
    contents = _contents(torch.get("contents"), f"{key}.tool_config.torch.contents")
    verl_keys.check_torch_extras(torch, f"{key}.tool_config.torch", gp.tool, enable, draft)

    if draft.config.tool == "torch":
        if key == verl_keys.ROLLOUT_BLOCK and enable:
            _rollout_engine(torch, bool(role_torch), block.get("save_path") or gp.save_path,
                            draft)
        discrete = gp.torch_discrete if role_torch is None else role_torch
        discrete_key = (f"{PREFIX}.global_tool_config.torch.discrete" if role_torch is None
                        else f"{key}.tool_config.torch.discrete")
    else:
        discrete = gp.nsys_discrete
        discrete_key = f"{PREFIX}.global_tool_config.nsys.discrete"
        if role_nsys is not None and role_nsys != gp.nsys_discrete:
            draft.warn(f"ignored {key}.tool_config.nsys.discrete ({str(role_nsys).lower()}); "
                       f"{discrete_key} ({str(gp.nsys_discrete).lower()}) applies to every "
                       "role")
    out = RoleDraft(ranks=ranks, all_ranks=all_ranks, discrete=discrete, ranks_key=f"{key}.ranks",
                    all_ranks_key=f"{key}.all_ranks", discrete_key=discrete_key,
                    given=bool(block))
    if not enable:
        if out.selects_any:
            draft.warn(f"{out.selection_key} is set but {key}.enable is false, so this role is "
                       "not profiled")
        return dataclasses.replace(out, ranks=(), all_ranks=False)
    if block.get("enable") is not None and not out.selects_any:
        out = _enabled_without_ranks(out, key, draft)
    if contents is not None:
        # rebind, not +=: an ignored alias section is read into a shallow copy of the draft
        draft.torch_contents = (draft.torch_contents or []) + contents
        draft.torch_contents_seen = {**draft.torch_contents_seen,
                                     f"{key}.tool_config.torch.contents": tuple(contents)}
    return out


def _rollout_engine(torch: Mapping[Any, Any], discrete: bool, save_path: Optional[str],
                    draft: Draft) -> None:
    """The rollout's torch block (tool torch, enabled): verl's servers run their engine's
    profiler in discrete mode, with the token window (verl 0.8.0+; 0.9.0+ for the window)."""
    key = verl_keys.ROLLOUT_TORCH
    start, end = verl_keys.token_window(torch, key)
    if not discrete:
        if start is not None or end is not None:
            name = "profile_token_start" if start is not None else "profile_token_end"
            raise ConfigError(f"{key}.{name}", f"is set but {key}.discrete is false: verl's "
                                               "rollout servers run their engine profiler, and "
                                               "its token window, only in discrete mode; set "
                                               f"{key}.discrete: true")
        return
    if draft.verl is None or not draft.verl.at_least("0.8.0"):
        return
    draft.set(rollout_engine=EngineTorchConfig(trace_dir=save_path or VERL_SAVE_PATH,
                                               token_start=start, token_end=end, key=key))


def _enabled_without_ranks(out: RoleDraft, key: str, draft: Draft) -> RoleDraft:
    """``enable: true`` and no ranks: rank 0 from verl 0.8.0 on, no rank before (verl 0.6/0.7's
    nsys profiler ignores the rank-0 default its DistProfiler computes)."""
    traits = draft.verl
    if traits is not None and traits.enable_picks_rank0:
        return dataclasses.replace(out, ranks=(0,))
    release = traits.release if traits is not None else "0.6.0"
    draft.warn(f"{key}.enable is true but {key}.ranks is empty: verl {release} profiles no rank "
               f"then (verl 0.8.0+ picks rank 0); set {key}.ranks: [0] to profile rank 0")
    return out


def finish(draft: Draft) -> None:
    """After all roles: turn the collected torch ``contents`` into torch options (explicit
    ``trainer.profiler.torch`` keys win)."""
    contents = draft.torch_contents
    if contents is None:
        return
    if len(set(map(frozenset, draft.torch_contents_seen.values()))) > 1:
        keys = ", ".join(draft.torch_contents_seen)
        draft.warn(f"torch contents differ between roles ({keys}); verlprof runs one torch "
                   f"configuration, their union [{', '.join(sorted(set(contents)))}], in every "
                   "profiled process")
    derived = {"record_shapes": "shapes" in contents, "profile_memory": "memory" in contents,
               "with_stack": "stack" in contents, "cuda": "cuda" in contents}
    draft.torch = {**derived, **draft.torch}


def _tool(value: Any, draft: Draft, trainer_tool: Optional[str]) -> Optional[str]:
    key = f"{PREFIX}.tool"
    if value is None:
        if trainer_tool is not None:
            return trainer_tool
        draft.set(enabled=False)
        draft.disabled_reason = f"{key} is null (verl: profiling off)"
        return None
    if isinstance(value, str) and value in _UNSUPPORTED_TOOLS:
        raise ConfigError(key, f"{value} is not supported by verlprof: "
                               f"{_UNSUPPORTED_TOOLS[value]}; valid values: {', '.join(TOOLS)}")
    tool = v.choice(value, key, TOOLS)
    if trainer_tool is not None and trainer_tool != tool:
        raise ConfigError("trainer.profiler.tool", f"is {trainer_tool} but {key} is {tool}; "
                                                   "set only one of them")
    draft.set(tool=tool)
    return tool


def _torch_block(value: Any, key: str) -> Dict[Any, Any]:
    block = v.mapping(value, key)
    v.known_keys(block, TORCH_TOOL_KEYS, key)
    return block


def _contents(value: Any, key: str) -> Optional[List[str]]:
    """verl's torch ``contents`` (None when not given: verl 0.6/0.7 have no such key)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise ConfigError(key, f"must be a list of {', '.join(TORCH_CONTENTS)}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or item not in TORCH_CONTENTS:
            raise ConfigError(f"{key}[{i}]", f"must be one of {', '.join(TORCH_CONTENTS)}; "
                                             f"got {v.show(item)}")
    return list(value)


def _norm(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))
