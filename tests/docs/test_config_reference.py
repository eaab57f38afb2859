"""docs/config_reference.md is generated from the schema's field docstrings and up to date;
every key it documents is one the loader really reads."""

from __future__ import annotations

import dataclasses
import os
import typing

import pytest

from tests.docs.snippets import ROOT
from tests.helpers import load_script
from verlprof import records
from verlprof.config import layouts, profiler_block, schema

reference = load_script("config_reference")


def test_committed_reference_is_up_to_date():
    with open(os.path.join(ROOT, "docs", "config_reference.md"), encoding="utf-8") as handle:
        committed = handle.read()
    assert committed == reference.render(), (
        "docs/config_reference.md is stale: run python scripts/config_reference.py")


def test_check_mode_agrees(capsys):
    assert reference.main(["--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_check_mode_reports_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "config_reference.md"
    stale.write_text("# old\n")
    assert reference.main(["--check", "-o", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err


def test_every_schema_field_is_documented_and_no_entry_is_stale():
    fields = {f"{cls.__name__}.{f.name}"
              for cls in (schema.ProfilingConfig, schema.ComponentsConfig,
                          schema.ComponentConfig, schema.NsysConfig,
                          schema.TorchProfilerConfig, schema.RocprofSysConfig,
                          schema.FinishHookConfig, schema.OnDemandConfig)
              for f in dataclasses.fields(cls)}
    where = reference.keys()
    assert fields == set(where)
    assert set(reference.NOTES) <= {name for name, keys in where.items() if not keys.internal}


def test_a_field_no_reader_maps_fails_the_reference(monkeypatch):
    """A new schema field that no layout reader maps must not reach the docs as if it worked."""
    monkeypatch.setattr(profiler_block, "field_keys", lambda: {})
    with pytest.raises(ValueError, match="no layout reader maps: ProfilingConfig.tool"):
        reference.keys()


def test_closed_choices_are_the_records_literals_and_render_as_strings():
    hints = typing.get_type_hints(schema.ProfilingConfig)
    assert hints["tool"] == records.Tool
    assert hints["on_rank_failure"] == records.OnRankFailure
    trigger = typing.get_type_hints(schema.NsysConfig)["trigger"]
    assert set(typing.get_args(records.Trigger)) < set(typing.get_args(trigger))
    assert reference.yaml_type("Tool") == reference.yaml_type("OnRankFailure") == "string"
    assert reference.yaml_type("NsysTrigger") == "string"


def test_every_docstring_is_rendered():
    classes, _ = reference.parse_schema()
    text = reference.render()
    for fields in classes.values():
        for f in fields:
            assert f.doc, f"{f.owner}.{f.name} has no docstring"
            assert reference._md_doc(f.doc) in text


def test_documented_keys_are_keys_the_loader_reads():
    known = {
        "trainer": set(layouts.TRAINER_PROFILE_KEYS),
        "trainer.profiler": set(profiler_block.KEYS),
        "trainer.profiler.nsys": set(profiler_block.NSYS_KEYS),
        "trainer.profiler.torch": set(profiler_block.TORCH_KEYS),
        "trainer.profiler.rocprof_sys": set(profiler_block.ROCPROF_KEYS),
        "trainer.profiler.finish_hook": set(profiler_block.FINISH_HOOK_KEYS),
        "trainer.profiler.on_demand": set(profiler_block.ON_DEMAND_KEYS),
        "<role>": set(layouts.SEED_ROLE_KEYS),
    }
    for name, keys in reference.keys().items():
        if keys.internal:
            continue
        parent, _, leaf = keys.seed.rpartition(".")
        assert leaf in known[parent], f"{name}: {keys.seed} is not read by the loader"
