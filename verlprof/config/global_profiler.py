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
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from verlprof.config import validate as v
from verlprof.config.draft import Draft, RoleDraft
from verlprof.config.schema import TOOLS
from verlprof.errors import ConfigError

PREFIX = "global_profiler"

GLOBAL_KEYS: Tuple[str, ...] = ("_target_", "tool", "steps", "profile_continuous_steps",
                                "save_path", "global_tool_config")
"""Keys of ``global_profiler``."""

TOOL_SECTIONS: Tuple[str, ...] = ("nsys", "torch", "torch_memory", "npu", "precision_debugger")
"""Sub-blocks of ``global_tool_config`` / a role's ``tool_config`` (verl's tool names; only
``nsys`` and ``torch`` are read, the others are accepted and ignored)."""

NSYS_GLOBAL_KEYS: Tuple[str, ...] = ("_target_", "name", "discrete", "controller_nsight_options",
                                     "worker_nsight_options")
NSYS_ROLE_KEYS: Tuple[str, ...] = ("_target_", "name", "discrete")
TORCH_TOOL_KEYS: Tuple[str, ...] = ("_target_", "name", "contents", "discrete", "step_start",
                                    "step_end", "manual_save")
TORCH_CONTENTS: Tuple[str, ...] = ("cuda", "cpu", "memory", "shapes", "stack")
"""verl's torch ``contents`` items (``cpu`` is always traced)."""

ROLE_KEYS: Tuple[str, ...] = ("_target_", "tool", "enable", "all_ranks", "ranks", "save_path",
                              "tool_config")
"""Keys of a per-role ``profiler`` block in this layout."""

_UNSUPPORTED_TOOLS = ("torch_memory", "npu")

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

    key = f"{PREFIX}.global_tool_config"
    tools = v.mapping(gp.get("global_tool_config"), key)
    v.known_keys(tools, TOOL_SECTIONS, key)
    for name in TOOL_SECTIONS:
        v.mapping(tools.get(name), f"{key}.{name}")
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


def read_role(main_key: str, section: Any, draft: Draft, gp: GlobalSettings) -> RoleDraft:
    """One role's ``profiler`` block (``section`` None: the role sets nothing)."""
    key = f"{section.key if section is not None else main_key}.profiler"
    block = v.mapping(section.block.get("profiler") if section is not None else None, key)
    v.known_keys(block, ROLE_KEYS, key, {"discrete": _DISCRETE_HINT})
    if block.get("tool") is not None and block["tool"] != gp.tool:
        raise ConfigError(f"{key}.tool", f"is {v.show(block['tool'])} but global_profiler.tool "
                                         f"is {v.show(gp.tool)}; verlprof runs one tool for the "
                                         "whole run: set global_profiler.tool")
    enable = v.boolean(block.get("enable"), f"{key}.enable", default=True)
    ranks = v.ranks(block.get("ranks"), f"{key}.ranks")
    all_ranks = v.boolean(block.get("all_ranks"), f"{key}.all_ranks")
    output_dir = draft.config.output_dir
    if block.get("save_path") is not None:
        save_path = v.text(block["save_path"], f"{key}.save_path")
        if _norm(save_path) != _norm(output_dir) and gp.save_path != save_path:
            draft.warn(f"ignored {key}.save_path ({save_path}); every report goes to the "
                       f"output directory {output_dir}")
    tool_config = v.mapping(block.get("tool_config"), f"{key}.tool_config")
    v.known_keys(tool_config, TOOL_SECTIONS, f"{key}.tool_config")
    for name in TOOL_SECTIONS:
        v.mapping(tool_config.get(name), f"{key}.tool_config.{name}")
    nsys = v.mapping(tool_config.get("nsys"), f"{key}.tool_config.nsys")
    v.known_keys(nsys, NSYS_ROLE_KEYS, f"{key}.tool_config.nsys")
    role_nsys = v.optional_boolean(nsys.get("discrete"), f"{key}.tool_config.nsys.discrete")
    torch = _torch_block(tool_config.get("torch"), f"{key}.tool_config.torch")
    role_torch = v.optional_boolean(torch.get("discrete"), f"{key}.tool_config.torch.discrete")
    contents = _contents(torch.get("contents"), f"{key}.tool_config.torch.contents")

    if draft.config.tool == "torch":
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
                    all_ranks_key=f"{key}.all_ranks", discrete_key=discrete_key)
    if not enable:
        if out.selects_any:
            draft.warn(f"{out.selection_key} is set but {key}.enable is false, so this role is "
                       "not profiled")
        out = dataclasses.replace(out, ranks=(), all_ranks=False)
    else:
        # rebind, not +=: an ignored alias section is read into a shallow copy of the draft
        draft.torch_contents = draft.torch_contents + contents
    return out


def finish(draft: Draft) -> None:
    """After all roles: turn the collected torch ``contents`` into torch options (explicit
    ``trainer.profiler.torch`` keys win)."""
    contents = draft.torch_contents
    if not contents:
        return
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
        raise ConfigError(key, f"{value} is not supported by verlprof; valid values: "
                               f"{', '.join(TOOLS)}")
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


def _contents(value: Any, key: str) -> List[str]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ConfigError(key, f"must be a list of {', '.join(TORCH_CONTENTS)}")
    for i, item in enumerate(value):
        if not isinstance(item, str) or item not in TORCH_CONTENTS:
            raise ConfigError(f"{key}[{i}]", f"must be one of {', '.join(TORCH_CONTENTS)}; "
                                             f"got {v.show(item)}")
    return list(value)


def _norm(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))
