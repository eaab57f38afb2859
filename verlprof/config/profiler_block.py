"""``trainer.profiler``: verlprof's own block (tool, output, nsys/torch/rocprof-sys details).

It is read the same way whatever the layout of the rest of the config, because none of verl's
layouts has a place for what it holds (filename template, nsys trigger, phases, timeouts). In
the ``global_profiler`` layout, ``tool`` and ``output_dir`` here may repeat
``global_profiler.tool`` / ``save_path``; :mod:`verlprof.config.global_profiler` resolves that.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

from verlprof.config import validate as v
from verlprof.config.draft import Draft
from verlprof.config.schema import DEFAULT_FILENAME_TEMPLATE, ON_RANK_FAILURE, TOOLS

PREFIX = "trainer.profiler"

KEYS: Tuple[str, ...] = ("tool", "enabled", "output_dir", "filename_template", "nsys", "torch",
                         "rocprof_sys", "phases", "rpc_timeout_s", "finalize_timeout_s",
                         "on_rank_failure")
"""Keys of ``trainer.profiler``."""

NSYS_KEYS: Tuple[str, ...] = ("trigger", "executable", "worker_flags", "controller_flags")
TORCH_KEYS: Tuple[str, ...] = ("record_shapes", "profile_memory", "with_stack", "cuda")
ROCPROF_KEYS: Tuple[str, ...] = ("args", "env", "executable")

_HINTS = {
    "worker_nsight_options": "nsys options are trainer.worker_nsight_options (one level up)",
    "controller_nsight_options": "nsys options are trainer.controller_nsight_options "
                                 "(one level up)",
    "steps": "steps are trainer.profile_steps (one level up)",
    "save_path": "the output directory is trainer.profiler.output_dir",
}


def read(value: Any, draft: Draft) -> Tuple[Optional[str], Optional[str]]:
    """Fill ``draft`` from ``trainer.profiler``; return (tool, output_dir) as given, or None.

    Both are returned rather than stored because the ``global_profiler`` layout has its own
    spelling of them and the caller decides which one applies.
    """
    block = v.mapping(value, PREFIX)
    v.known_keys(block, KEYS, PREFIX, _HINTS)
    tool = None
    if block.get("tool") is not None:
        tool = v.choice(block["tool"], f"{PREFIX}.tool", TOOLS)
        draft.tool, draft.tool_key = tool, f"{PREFIX}.tool"
    draft.enabled = v.boolean(block.get("enabled"), f"{PREFIX}.enabled", default=True)
    if not draft.enabled:
        draft.enabled_key = f"{PREFIX}.enabled"
        draft.disabled_reason = f"{PREFIX}.enabled is false"
    output_dir = None
    if block.get("output_dir") is not None:
        output_dir = v.text(block["output_dir"], f"{PREFIX}.output_dir")
    draft.filename_template = v.filename_template(
        block.get("filename_template"), f"{PREFIX}.filename_template", DEFAULT_FILENAME_TEMPLATE)
    draft.phases = v.phases(block.get("phases"), f"{PREFIX}.phases")
    draft.rpc_timeout_s = v.positive_number(block.get("rpc_timeout_s"),
                                            f"{PREFIX}.rpc_timeout_s", draft.rpc_timeout_s)
    draft.finalize_timeout_s = v.positive_number(
        block.get("finalize_timeout_s"), f"{PREFIX}.finalize_timeout_s", draft.finalize_timeout_s)
    if block.get("on_rank_failure") is not None:
        draft.on_rank_failure = v.choice(block["on_rank_failure"], f"{PREFIX}.on_rank_failure",
                                         ON_RANK_FAILURE)
    _read_nsys(block.get("nsys"), draft)
    draft.torch = _read_torch(block.get("torch"))
    draft.rocprof_sys = _read_rocprof(block.get("rocprof_sys"))
    return tool, output_dir


def _read_nsys(value: Any, draft: Draft) -> None:
    key = f"{PREFIX}.nsys"
    block = v.mapping(value, key)
    v.known_keys(block, NSYS_KEYS, key, {
        "worker_options": "worker options are trainer.worker_nsight_options",
        "controller_options": "controller options are trainer.controller_nsight_options"})
    draft.trigger = v.trigger(block.get("trigger"), f"{key}.trigger")
    draft.nsys_executable = v.text(block.get("executable"), f"{key}.executable", default="nsys")
    # Flags are only shape-checked here; whether they repeat an option is checked once the
    # options are known (they live outside this block).
    draft.worker_flags = v.flags(block.get("worker_flags"), f"{key}.worker_flags")
    draft.worker_flags_key = f"{key}.worker_flags"
    draft.controller_flags = v.flags(block.get("controller_flags"), f"{key}.controller_flags")
    draft.controller_flags_key = f"{key}.controller_flags"


def _read_torch(value: Any) -> dict:
    """Only the keys given: the ``global_profiler`` layout may fill the others."""
    key = f"{PREFIX}.torch"
    block = v.mapping(value, key)
    v.known_keys(block, TORCH_KEYS, key)
    out = {}
    for name in ("record_shapes", "profile_memory", "with_stack"):
        if block.get(name) is not None:
            out[name] = v.boolean(block[name], f"{key}.{name}")
    if block.get("cuda") is not None:
        out["cuda"] = v.optional_boolean(block["cuda"], f"{key}.cuda")
    return out


def _read_rocprof(value: Any) -> dict:
    key = f"{PREFIX}.rocprof_sys"
    block = v.mapping(value, key)
    v.known_keys(block, ROCPROF_KEYS, key)
    return {
        "args": v.options(block.get("args"), f"{key}.args"),
        "env": v.environment(block.get("env"), f"{key}.env"),
        "executable": v.text(block.get("executable"), f"{key}.executable",
                             default="rocprof-sys-python"),
    }


def check_options(draft: Draft) -> None:
    """Validate nsys options together with the flags that must not repeat them."""
    if draft.worker_options is not None:
        draft.worker_options = v.options(draft.worker_options, draft.worker_options_key,
                                         draft.worker_flags, draft.worker_flags_key)
    else:
        v.options({}, draft.worker_options_key, draft.worker_flags, draft.worker_flags_key)
    draft.controller_options = v.options(draft.controller_options, draft.controller_options_key,
                                         draft.controller_flags, draft.controller_flags_key)


def given_options(value: Any, key: str) -> Optional[Mapping[Any, Any]]:
    """Worker options as given, or None when the user gave none (``null``, ``{}``, missing)."""
    block = v.mapping(value, key)
    return block or None
