"""Each config key is defined once, by its schema field: the readers take their key lists and
defaults from the schema, and every documented key really sets the field it documents."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Dict, Optional

import pytest

from tests.helpers import load_script
from verlprof.config import config_from_dict, profiler_block, schema
from verlprof.config.draft import Draft, to_profiling

reference = load_script("config_reference")

SPECIAL: Dict[str, Any] = {
    "ProfilingConfig.filename_template": "{component}-{step}-{rank}",
    "ProfilingConfig.output_dir": "/tmp/verlprof-schema-test",
    "ProfilingConfig.phases": {"actor": ["update_actor"]},
    "ProfilingConfig.steps": [2],
    "ComponentConfig.ranks": [1],
    "RocprofSysConfig.env": {"ROCPROFSYS_X": "1"},
    "FinishHookConfig.cmd": "ls > /dev/null",
    "FinishHookConfig.ranks": [1],
    "OnDemandConfig.nsys_ranks": {"actor_rollout_ref": [1]},
    "ProfilingConfig.max_total_bytes": 3 << 30,
}
"""Values whose field takes more than its type says (a template, an absolute path...)."""


def _sample(name: str, hint: Any, default: Any) -> Any:
    """A valid value other than the default, as YAML would give it."""
    if name in SPECIAL:
        return SPECIAL[name]
    if typing.get_origin(hint) is typing.Literal:
        return next(arg for arg in typing.get_args(hint) if arg != default)
    if hint in (bool, Optional[bool]):
        return not default
    if hint is float:
        return default + 7.0
    if hint is int:
        return default + 3
    if hint == Optional[float]:
        return 7.0
    if hint is str:
        return "/opt/bin/profiler"
    if typing.get_origin(hint) is tuple:
        return ["stats"]
    return {"trace": "nvtx"}


def _settings():
    for name, keys in reference.keys().items():
        if not keys.internal:
            yield pytest.param(name, keys.seed, id=keys.seed)


@pytest.mark.parametrize(("name", "seed"), list(_settings()))
def test_every_documented_key_sets_its_schema_field(name, seed):
    owner, _, field_name = name.partition(".")
    cls = getattr(schema, owner)
    spec = next(f for f in dataclasses.fields(cls) if f.name == field_name)
    default = spec.default if spec.default is not dataclasses.MISSING else spec.default_factory()
    value = _sample(name, typing.get_type_hints(cls)[field_name], default)
    cfg: Dict[str, Any] = {"trainer": {"nnodes": 1, "n_gpus_per_node": 2, "device": "cpu"}}
    node = cfg
    *parents, leaf = seed.replace("<role>", "critic").split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    profiling = config_from_dict(cfg, env={}).profiling
    block = profiling.components.critic if cls is schema.ComponentConfig else {
        schema.ProfilingConfig: profiling, schema.NsysConfig: profiling.nsys,
        schema.TorchProfilerConfig: profiling.torch,
        schema.RocprofSysConfig: profiling.rocprof_sys,
        schema.FinishHookConfig: profiling.finish_hook,
        schema.OnDemandConfig: profiling.on_demand}[cls]
    got = getattr(block, field_name)
    expected = tuple(value) if isinstance(value, list) else value
    if field_name == "phases":
        expected = {"actor": ("update_actor",)}
    if field_name == "nsys_ranks":
        expected = {"actor_rollout_ref": (1,)}
    assert got == expected != default


def test_the_draft_adds_no_default_of_its_own():
    assert to_profiling(Draft()) == schema.ProfilingConfig()


def test_the_profiler_block_lists_its_keys_in_the_order_messages_always_used():
    """Derived from the schema's field order, which is therefore part of the messages'
    ("unknown key; valid keys: ..."): these are the lists the block reader used to spell."""
    assert profiler_block.KEYS == ("tool", "enabled", "output_dir", "filename_template", "nsys",
                                   "torch", "rocprof_sys", "phases", "rpc_timeout_s",
                                   "finalize_timeout_s", "on_rank_failure", "finish_hook",
                                   "on_demand", "existing_run", "summarise", "place",
                                   "window_delay_s", "window_duration_s", "max_total_bytes")
    assert profiler_block.NSYS_KEYS == ("trigger", "executable", "worker_flags",
                                        "controller_flags")
    assert profiler_block.TORCH_KEYS == ("record_shapes", "profile_memory", "with_stack", "cuda")
    assert profiler_block.ROCPROF_KEYS == ("args", "env", "executable")
    assert profiler_block.FINISH_HOOK_KEYS == ("cmd", "all_ranks", "ranks", "timeout_s")
