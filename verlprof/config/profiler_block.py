"""``trainer.profiler``: verlprof's own block (tool, output, nsys/torch/rocprof-sys details).

It is read the same way whatever the layout of the rest of the config, because none of verl's
layouts has a place for what it holds (filename template, nsys trigger, phases, timeouts). In
the ``global_profiler`` layout, ``tool`` and ``output_dir`` here may repeat
``global_profiler.tool`` / ``save_path``; :mod:`verlprof.config.global_profiler` resolves that.

Its keys are the schema's own field names, so its key lists are read from the schema
(:func:`block_keys`) and a key left out keeps the schema's default: nothing here restates one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional, Tuple, Type, get_type_hints

from verlprof import paths
from verlprof.config import size_budget
from verlprof.config import validate as v
from verlprof.config.draft import Draft
from verlprof.config.options import TIME_WINDOW_KEYS, canonical_key
from verlprof.config.schema import (
    EXISTING_RUN,
    ON_RANK_FAILURE,
    PLACE,
    SUMMARISE,
    TOOLS,
    TRIGGERS,
    ProfilingConfig,
    set_by_loader,
)
from verlprof.errors import ConfigError

PREFIX = "trainer.profiler"

LAYOUT_FIELDS: Tuple[str, ...] = ("steps", "continuous_steps", "components",
                                  "nsys.worker_options", "nsys.controller_options")
"""Schema fields that every layout spells in a place of its own (``trainer.profile_steps``,
``global_profiler.steps``, ``<role>.profile_ranks``, ...): the layout readers map them; this
block holds every other setting, under the schema's own names."""


def _blocks() -> Dict[str, Type[Any]]:
    """Schema path → dataclass, for this block and its sub-blocks (``nsys``, ``torch``, ...)."""
    types = get_type_hints(ProfilingConfig)
    return {"": ProfilingConfig, **{
        f.name: types[f.name] for f in dataclasses.fields(ProfilingConfig)
        if dataclasses.is_dataclass(types[f.name]) and f.name not in LAYOUT_FIELDS}}


def _path(block: str, name: str) -> str:
    return f"{block}.{name}" if block else name


def block_keys(block: str) -> Tuple[str, ...]:
    """Keys of ``trainer.profiler`` (``block`` "") or of its sub-block ``block``: the schema's
    fields there, in schema order, less those the loader sets and those the layouts spell."""
    return tuple(f.name for f in dataclasses.fields(_blocks()[block])
                 if not set_by_loader(f) and _path(block, f.name) not in LAYOUT_FIELDS)


KEYS: Tuple[str, ...] = block_keys("")
"""Keys of ``trainer.profiler``."""

NSYS_KEYS: Tuple[str, ...] = block_keys("nsys")
TORCH_KEYS: Tuple[str, ...] = block_keys("torch")
ROCPROF_KEYS: Tuple[str, ...] = block_keys("rocprof_sys")
FINISH_HOOK_KEYS: Tuple[str, ...] = block_keys("finish_hook")
ON_DEMAND_KEYS: Tuple[str, ...] = block_keys("on_demand")


def field_keys() -> Dict[str, str]:
    """Schema path → full key, for every setting this block holds (``nsys.trigger`` →
    ``trainer.profiler.nsys.trigger``); sub-blocks themselves are not settings."""
    blocks = _blocks()
    return {_path(block, name): f"{PREFIX}.{_path(block, name)}"
            for block in blocks for name in block_keys(block)
            if not (block == "" and name in blocks)}


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
    spelling of them and the caller decides which one applies. A key left out or ``null``
    keeps the draft's value, which is still the schema's default here.
    """
    block = v.mapping(value, PREFIX)
    v.known_keys(block, KEYS, PREFIX, _HINTS)
    cfg = draft.config
    tool = None
    if block.get("tool") is not None:
        tool = v.choice(block["tool"], f"{PREFIX}.tool", TOOLS)
        draft.set(tool=tool)
    draft.set(enabled=v.boolean(block.get("enabled"), f"{PREFIX}.enabled", default=cfg.enabled))
    if not draft.config.enabled:
        draft.disabled_reason = f"{PREFIX}.enabled is false"
    output_dir = None
    if block.get("output_dir") is not None:
        output_dir = v.text(block["output_dir"], f"{PREFIX}.output_dir")
    # one argument per key, evaluated in this order: the first bad key is the one reported
    draft.set(
        filename_template=v.filename_template(block.get("filename_template"),
                                              f"{PREFIX}.filename_template",
                                              cfg.filename_template),
        phases=v.phases(block.get("phases"), f"{PREFIX}.phases"),
        rpc_timeout_s=v.positive_number(block.get("rpc_timeout_s"), f"{PREFIX}.rpc_timeout_s",
                                        cfg.rpc_timeout_s),
        finalize_timeout_s=v.positive_number(block.get("finalize_timeout_s"),
                                             f"{PREFIX}.finalize_timeout_s",
                                             cfg.finalize_timeout_s),
        on_rank_failure=v.choice(block.get("on_rank_failure"), f"{PREFIX}.on_rank_failure",
                                 ON_RANK_FAILURE, default=cfg.on_rank_failure),
        existing_run=v.choice(block.get("existing_run"), f"{PREFIX}.existing_run",
                              EXISTING_RUN, default=cfg.existing_run),
        summarise=v.choice(block.get("summarise"), f"{PREFIX}.summarise", SUMMARISE,
                           default=cfg.summarise),
        place=v.choice(block.get("place"), f"{PREFIX}.place", PLACE, default=cfg.place),
        window_delay_s=v.seconds_at_least_zero(block.get("window_delay_s"),
                                               f"{PREFIX}.window_delay_s",
                                               cfg.window_delay_s),
        window_duration_s=(v.positive_number(block["window_duration_s"],
                                             f"{PREFIX}.window_duration_s", 0.0)
                           if block.get("window_duration_s") is not None
                           else cfg.window_duration_s))
    if "max_total_bytes" in block:  # null is a choice here (no budget), not "left out"
        draft.set(max_total_bytes=size_budget.parse_setting(block["max_total_bytes"],
                                                            f"{PREFIX}.max_total_bytes"))
    _read_nsys(block.get("nsys"), draft)
    draft.torch = _read_torch(block.get("torch"))
    _read_rocprof(block.get("rocprof_sys"), draft)
    _read_finish_hook(block.get("finish_hook"), draft)
    _read_on_demand(block.get("on_demand"), draft)
    return tool, output_dir


def _read_nsys(value: Any, draft: Draft) -> None:
    key = f"{PREFIX}.nsys"
    block = v.mapping(value, key)
    v.known_keys(block, NSYS_KEYS, key, {
        "worker_options": "worker options are trainer.worker_nsight_options",
        "controller_options": "controller options are trainer.controller_nsight_options"})
    nsys = draft.config.nsys
    # Flags are only shape-checked here; whether they repeat an option is checked once the
    # options are known (they live outside this block).
    draft.set_nsys(
        trigger=v.choice(block.get("trigger"), f"{key}.trigger", TRIGGERS, default=nsys.trigger),
        executable=v.text(block.get("executable"), f"{key}.executable", default=nsys.executable),
        worker_flags=v.flags(block.get("worker_flags"), f"{key}.worker_flags"),
        controller_flags=v.flags(block.get("controller_flags"), f"{key}.controller_flags"))
    draft.worker_flags_key = f"{key}.worker_flags"
    draft.controller_flags_key = f"{key}.controller_flags"


def _read_torch(value: Any) -> Dict[str, Any]:
    """Only the keys given: the ``global_profiler`` layout may fill the others. Every torch
    setting is a switch (``cuda`` may also be null: "decide at run time", its default)."""
    key = f"{PREFIX}.torch"
    block = v.mapping(value, key)
    v.known_keys(block, TORCH_KEYS, key)
    return {name: v.boolean(block[name], f"{key}.{name}")
            for name in TORCH_KEYS if block.get(name) is not None}


def _read_rocprof(value: Any, draft: Draft) -> None:
    key = f"{PREFIX}.rocprof_sys"
    block = v.mapping(value, key)
    v.known_keys(block, ROCPROF_KEYS, key)
    rocprof = draft.config.rocprof_sys
    draft.set(rocprof_sys=dataclasses.replace(
        rocprof,
        args=v.options(block.get("args"), f"{key}.args"),
        env=v.environment(block.get("env"), f"{key}.env"),
        executable=v.text(block.get("executable"), f"{key}.executable",
                          default=rocprof.executable)))


def _read_finish_hook(value: Any, draft: Draft) -> None:
    key = f"{PREFIX}.finish_hook"
    block = v.mapping(value, key)
    v.known_keys(block, FINISH_HOOK_KEYS, key)
    hook = draft.config.finish_hook
    cmd = v.text(block["cmd"], f"{key}.cmd") if block.get("cmd") is not None else None
    draft.set(finish_hook=dataclasses.replace(
        hook, cmd=cmd,
        all_ranks=v.boolean(block.get("all_ranks"), f"{key}.all_ranks"),
        ranks=v.ranks(block.get("ranks"), f"{key}.ranks"),
        timeout_s=v.positive_number(block.get("timeout_s"), f"{key}.timeout_s",
                                    hook.timeout_s),
        key=f"{key}.cmd" if cmd is not None else ""))


def _read_on_demand(value: Any, draft: Draft) -> None:
    key = f"{PREFIX}.on_demand"
    block = v.mapping(value, key)
    v.known_keys(block, ON_DEMAND_KEYS, key)
    given = draft.config.on_demand
    caps: Dict[str, Any] = {}
    for name in ON_DEMAND_KEYS[1:-1]:  # the caps, between "enabled" and "nsys_ranks"
        cap = block.get(name, getattr(given, name))
        if not v.is_int(cap) or cap < 1:
            raise ConfigError(f"{key}.{name}", f"must be a whole number, 1 or more, got "
                                               f"{v.show(cap)}")
        caps[name] = int(cap)
    draft.set(on_demand=dataclasses.replace(
        given, enabled=v.boolean(block.get("enabled"), f"{key}.enabled", given.enabled), **caps,
        nsys_ranks=_armed_ranks(block.get("nsys_ranks"), f"{key}.nsys_ranks")))


def _armed_ranks(value: Any, key: str) -> Dict[str, Tuple[int, ...]]:
    """``{group: [ranks]}``: group names as they become paths, ranks like every rank key;
    whether the group and ranks exist is the plan's check (it knows the topology)."""
    out = {}
    for group, ranks in v.mapping(value, key).items():
        if not isinstance(group, str) or not group or paths.sanitize(group) != group:
            raise ConfigError(key, f"keys are worker group names ([A-Za-z0-9._-]), got "
                                   f"{v.show(group)}")
        armed = v.ranks(ranks, f"{key}.{group}")
        if armed:
            out[group] = armed
    return out


def check_options(draft: Draft) -> None:
    """Validate nsys options together with the flags that must not repeat them; nsys' own
    time-window options become verlprof's window keys (see :func:`_time_window_options`)."""
    nsys = draft.config.nsys
    if draft.worker_options is not None:
        draft.worker_options = _time_window_options(
            v.options(draft.worker_options, nsys.worker_options_key, nsys.worker_flags,
                      draft.worker_flags_key), nsys.worker_options_key, draft)
    else:
        v.options({}, nsys.worker_options_key, nsys.worker_flags, draft.worker_flags_key)
    controller = v.options(nsys.controller_options, nsys.controller_options_key,
                           nsys.controller_flags, draft.controller_flags_key)
    for name in TIME_WINDOW_KEYS:
        if controller and controller.get(name) is not None:
            raise ConfigError(f"{nsys.controller_options_key}.{name}",
                              f"nsys' {canonical_key(name)} counts from process start and "
                              "conflicts with the capture ranges the controller's windows use; "
                              f"set {PREFIX}.window_{canonical_key(name)}_s (it bounds the "
                              "workers' windows) or leave it out")
    draft.set_nsys(controller_options=controller)


def _time_window_options(options: Dict[str, Any], key: str, draft: Draft) -> Dict[str, Any]:
    """nsys' ``delay``/``duration`` (``y``/``d``) count from process start and would fight the
    capture ranges every window is: read them as ``window_delay_s``/``window_duration_s`` (per
    window, from its step's start), dropped from the argv, with a note. Both spellings with
    different values are an error naming both keys."""
    out = dict(options)
    for name in TIME_WINDOW_KEYS:
        value = out.pop(name, None)
        if value is None:
            continue
        long_name = canonical_key(name)
        field_name = f"window_{long_name}_s"
        given = getattr(draft.config, field_name)
        default = getattr(ProfilingConfig, field_name)
        if given != default and given != float(value):
            raise ConfigError(f"{key}.{name}", f"is {value} but {PREFIX}.{field_name} is "
                                               f"{given}; set only {PREFIX}.{field_name}")
        draft.set(**{field_name: float(value) if value or long_name == "delay" else given})
        draft.warn(f"{key}.{name}={value} is applied per window as {PREFIX}.{field_name} "
                   f"(nsys' --{long_name} would count from process start and conflict with "
                   "the capture range of each window)")
    return out


def given_options(value: Any, key: str) -> Optional[Mapping[Any, Any]]:
    """Worker options as given, or None when the user gave none (``null``, ``{}``, missing)."""
    block = v.mapping(value, key)
    return block or None
