"""verl's profiler keys beyond tool, steps and rank selection: each honoured or refused by name.

verl's ``global_tool_config`` and each role's ``tool_config`` hold one block per verl tool
(``nsys``, ``torch``, ``torch_memory``, ``npu``, ``precision_debugger``), and verl 0.9.1 adds a
finish hook. verlprof drives nsys and the torch profiler; for every other key it either does
what the key asks, or says in one line, naming the key, why it does not:

* ``relocate_results``: accepted; verlprof always gathers every report into one directory.
* ``finish_hook_cmd`` / ``finish_hook_all_ranks`` / ``finish_hook_ranks``: one hook for the
  run (:class:`~verlprof.config.schema.FinishHookConfig`); a role block that says otherwise is
  an error, since verlprof runs the hook once, after gathering.
* torch ``schedule`` (``active > 0``) and 0.6/0.7's ``step_start`` / ``step_end``: refused
  with the torch tool (they cut windows inside one phase call); with another tool verl ignores
  them too, and verlprof says so.
* the rollout's ``profile_token_start`` / ``end`` (0.9.0+): the token window of verl's own
  engine profiling (:func:`token_window`), honoured; in another role's block verl ignores
  them, and verlprof says so.
* ``torch_memory``, ``npu``, ``precision_debugger`` blocks: tools verlprof does not drive
  (``tool:`` naming one is refused); a non-default value under them has no effect, as in verl,
  and is named in a warning.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Tuple

from verlprof.config import validate as v
from verlprof.config.draft import Draft
from verlprof.errors import ConfigError

PREFIX = "global_profiler"

SCHEDULE_KEYS: Tuple[str, ...] = ("_target_", "skip_first", "wait", "warmup", "active", "repeat")
"""verl 0.9.0+'s ``tool_config.torch.schedule`` (a ``torch.profiler.schedule``)."""

DEFAULTS: Dict[str, Dict[str, Tuple[Any, ...]]] = {
    "torch_memory": {"trace_alloc_max_entries": (100000,), "stack_depth": (32,),
                     "memory_snapshot_num_steps": (1,), "context": ("all",),
                     "stacks": ("all",), "kw_args": ({},)},
    "npu": {"contents": ([],), "level": ("level0", "level1"), "analysis": (True,),
            "discrete": (False,), "profile_token_start": (None,), "profile_token_end": (None,)},
    "precision_debugger": {"config_path": (None,), "steps": (None,), "stages": (None,),
                           "strict": (False,)},
}
"""Keys of the blocks of tools verlprof does not drive, with the values that ask for nothing
(verl's defaults in every release; ``null`` always asks for nothing)."""

_TOOL_USE = {"torch_memory": "verl's torch_memory tool (CUDA memory snapshots)",
             "npu": "verl's npu tool (Ascend NPU profiler)",
             "precision_debugger": "verl's precision_debugger tool (msprobe)"}

ROLLOUT_BLOCK = "actor_rollout_ref.rollout.profiler"
"""The rollout's profiler block (verl's rollout servers read it)."""
ROLLOUT_TORCH = f"{ROLLOUT_BLOCK}.tool_config.torch"
"""The block verl's rollout servers read their engine profiler's settings from."""

_WINDOWS = ("verlprof's windows are whole steps or whole phase calls: one report per window, "
            "with nsys' repeat count exact")


def check_unused_tool(block: Mapping[Any, Any], key: str, tool: str, draft: Draft) -> None:
    """A ``torch_memory`` / ``npu`` / ``precision_debugger`` block: known keys; a value other
    than verl's default is named in a warning (it has no effect: that tool is not run)."""
    allowed = ("_target_",) + tuple(DEFAULTS[tool])
    v.known_keys(block, allowed, key)
    for name, defaults in DEFAULTS[tool].items():
        value = block.get(name)
        if value is not None and not any(value == d for d in defaults):
            draft.warn(f"ignored {key}.{name} ({v.show(value)}): only {_TOOL_USE[tool]} reads "
                       "it, and verlprof does not run that tool (as in verl, it has no effect "
                       "with another tool)")


def check_torch_extras(torch: Mapping[Any, Any], key: str, run_tool: Optional[str],
                       enabled: bool, draft: Draft) -> None:
    """A role's torch ``schedule``, ``step_start``/``step_end`` and ``profile_token_*``."""
    schedule = v.mapping(torch.get("schedule"), f"{key}.schedule")
    v.known_keys(schedule, SCHEDULE_KEYS, f"{key}.schedule")
    counts = {name: _count(schedule.get(name), f"{key}.schedule.{name}")
              for name in SCHEDULE_KEYS[1:]}
    asks: List[Tuple[str, Any, str, str]] = []
    if counts["active"] > 0:
        asks.append((f"{key}.schedule.active", counts["active"],
                     "verl steps this torch.profiler schedule once per update mini-batch inside "
                     "update_actor / train_batch, so one phase call would hold several windows",
                     "set it to 0 (discrete: true gives one trace per phase call)"))
    start, end = torch.get("step_start"), torch.get("step_end")
    if end is not None or (start is not None and start != 0):
        name, value = ("step_end", end) if end is not None else ("step_start", start)
        asks.append((f"{key}.{name}", value,
                     "verl 0.6/0.7 count these in update_policy calls of its Megatron actor, "
                     "inside one step", "leave step_start: 0, step_end: null"))
    for name in ("profile_token_start", "profile_token_end"):
        if torch.get(name) is None:
            continue
        if key != ROLLOUT_TORCH:
            draft.warn(f"ignored {key}.{name} ({v.show(torch[name])}): verl reads it only "
                       f"in {ROLLOUT_TORCH} (its rollout servers' engine profiler)")
        elif run_tool != "torch":
            draft.warn(f"ignored {key}.{name} ({v.show(torch[name])}): it only applies to the "
                       "torch tool (as in verl)")
    for full, value, why, fix in asks:
        if run_tool == "torch" and enabled:
            raise ConfigError(full, f"{v.show(value)} is not supported: {why}; {_WINDOWS}; "
                                    f"{fix}")
        draft.warn(f"ignored {full} ({v.show(value)}): it only applies to the torch tool "
                   f"{'of an enabled role ' if run_tool == 'torch' else ''}(as in verl)")


def token_window(torch: Mapping[Any, Any], key: str) -> Tuple[Optional[int], Optional[int]]:
    """The rollout's ``profile_token_start`` / ``profile_token_end``, checked as verl's
    ``TorchProfilerToolConfig`` checks them: ints >= 0, end > start (None: not set)."""
    start, end = (None if torch.get(n) is None else _count(torch[n], f"{key}.{n}")
                  for n in ("profile_token_start", "profile_token_end"))
    if start is not None and end is not None and end <= start:
        raise ConfigError(f"{key}.profile_token_end", f"must be greater than "
                                                      f"profile_token_start ({start}), got {end}")
    return start, end


def _count(value: Any, key: str) -> int:
    if value is None:
        return 0
    if not v.is_int(value) or value < 0:
        raise ConfigError(key, f"must be a non-negative int, got {v.show(value)}")
    return value


def read_global_hook(gp: Mapping[Any, Any], draft: Draft) -> Dict[str, Any]:
    """``global_profiler.{relocate_results, finish_hook_*}`` → the run's finish hook; returns
    the four values as read (each role's copy must repeat them)."""
    v.boolean(gp.get("relocate_results"), f"{PREFIX}.relocate_results")  # always gathered
    cmd_key = f"{PREFIX}.finish_hook_cmd"
    cmd = v.text(gp["finish_hook_cmd"], cmd_key) if gp.get("finish_hook_cmd") is not None \
        else None
    all_ranks = v.boolean(gp.get("finish_hook_all_ranks"), f"{PREFIX}.finish_hook_all_ranks")
    ranks = v.ranks(gp.get("finish_hook_ranks"), f"{PREFIX}.finish_hook_ranks")
    values = {"relocate_results": gp.get("relocate_results") or False, "finish_hook_cmd": cmd,
              "finish_hook_all_ranks": all_ranks, "finish_hook_ranks": ranks}
    if cmd is not None:
        if draft.config.finish_hook.cmd is not None:
            raise ConfigError(cmd_key, f"is set and so is {draft.config.finish_hook.key}; set "
                                       "only one of them")
        draft.set(finish_hook=dataclasses.replace(draft.config.finish_hook, cmd=cmd,
                                                  all_ranks=all_ranks, ranks=ranks,
                                                  key=cmd_key))
    elif all_ranks or ranks:
        name = "finish_hook_all_ranks" if all_ranks else "finish_hook_ranks"
        draft.warn(f"ignored {PREFIX}.{name}: {cmd_key} is null, so there is no hook to run")
    return values


def check_role_hook(block: Mapping[Any, Any], key: str, hook: Mapping[str, Any]) -> None:
    """A role's copy of the finish-hook keys must be the global one (verl interpolates it):
    verlprof runs one hook for the run, after gathering every report."""
    for name, global_value in hook.items():
        if name not in block:
            continue
        value = block[name]
        if name == "finish_hook_ranks":
            value = v.ranks(value, f"{key}.{name}")
        elif name != "finish_hook_cmd":
            value = v.boolean(value, f"{key}.{name}")
        if name == "relocate_results":
            continue  # every value is fine: verlprof always gathers
        if value != global_value:
            raise ConfigError(f"{key}.{name}", f"is {_yaml(value)} but {PREFIX}.{name} is "
                                               f"{_yaml(global_value)}; verlprof runs one "
                                               "finish hook for the whole run, after it "
                                               f"gathered every report: set {PREFIX}.{name}")


def _yaml(value: Any) -> str:
    """``null`` for None (the user wrote YAML), else :func:`validate.show`."""
    return "null" if value is None else v.show(value)


def check_megatron_profile(block: Mapping[Any, Any], key: str) -> None:
    """verl 0.4.1/0.5.0 Megatron ``actor_rollout_ref.{actor,ref}.profile``: a torch profiler
    verl runs inside its own update loop; refused when switched on."""
    v.known_keys(block, ("use_profile", "profile_ranks", "step_start", "step_end", "save_path"),
                 key)
    if v.boolean(block.get("use_profile"), f"{key}.use_profile"):
        raise ConfigError(f"{key}.use_profile", "true is not supported: verl's Megatron actor "
                                                "runs this torch profiler itself, inside "
                                                f"update_policy; {_WINDOWS}; set it to false "
                                                "and set trainer.profiler.tool: torch")
