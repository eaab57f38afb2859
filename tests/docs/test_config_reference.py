"""docs/config_reference.md is generated from the schema's field docstrings and up to date;
every key it documents is one the loader really reads."""

from __future__ import annotations

import dataclasses
import os

from tests.docs.snippets import ROOT
from verlprof.config import layouts, profiler_block, reference, schema


def test_committed_reference_is_up_to_date():
    with open(os.path.join(ROOT, "docs", "config_reference.md"), encoding="utf-8") as handle:
        committed = handle.read()
    assert committed == reference.render(), (
        "docs/config_reference.md is stale: run python -m verlprof.config.reference")


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
                          schema.TorchProfilerConfig, schema.RocprofSysConfig)
              for f in dataclasses.fields(cls)}
    assert fields == set(reference.KEYS)


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
        "<role>": set(layouts.SEED_ROLE_KEYS),
    }
    for name, keys in reference.KEYS.items():
        if keys.internal:
            continue
        parent, _, leaf = keys.seed.rpartition(".")
        assert leaf in known[parent], f"{name}: {keys.seed} is not read by the loader"
