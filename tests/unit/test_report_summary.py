"""A report's summary (verlprof/backends/summary.py): written by ``verlprof report`` beside each
report it read, used instead of the report while it matches it, and never otherwise: a report
changed, another report's summary, another format or window start, a file that is not a
summary all mean the report is read again. The summary files made on Ray nodes are the same
records (tests/integration/test_node_summaries.py)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from tests.torch_runs import write_torch_run, write_torch_trace
from verlprof.backends import get_backend
from verlprof.backends.summary import (
    SUMMARY_FORMAT,
    ReportSummary,
    fingerprint,
    load_summary,
    make_summary,
    summary_path,
    write_summary,
)
from verlprof.config import ConfigError, config_from_dict
from verlprof.manifest import Manifest, read_manifest, write_manifest
from verlprof.report import summarize


def _summarize(root):
    from rich.console import Console

    return summarize(str(root), console=Console(quiet=True), progress=False, write=False)


def _phase_ms(summary, rank):
    return [(r.end_ns - r.start_ns) / 1e6 for r in summary.records
            if r.rank == rank and r.phase == "update_actor"]


def test_report_writes_a_summary_beside_each_report_and_reads_it_next_time(tmp_path):
    reports = write_torch_run(tmp_path)
    first = _summarize(tmp_path)
    for index, report in enumerate(reports):
        summary = load_summary(report, "torch", None)
        assert summary is not None and summary.format == SUMMARY_FORMAT
        assert summary.node_id == "" and summary.report == os.path.basename(report)
        assert summary.fingerprint == fingerprint(report)
        direct = get_backend("torch").read(report, index=index, window_start_ns=None,
                                           timeout_s=30)
        assert summary.data(index) == dataclasses.replace(direct, seconds=0.0)
    made = {r: os.stat(summary_path(r)).st_mtime_ns for r in reports}
    second = _summarize(tmp_path)
    assert second.records == first.records and second.rows == first.rows
    assert {r: os.stat(summary_path(r)).st_mtime_ns for r in reports} == made  # used, kept


def test_a_changed_report_is_read_again_never_its_old_summary(tmp_path):
    reports = write_torch_run(tmp_path)
    assert _phase_ms(_summarize(tmp_path), 2) == [900.0]
    write_torch_trace(reports[2], 400.0)  # same name, new content
    assert load_summary(reports[2], "torch", None) is None
    assert _phase_ms(_summarize(tmp_path), 2) == [400.0]
    assert load_summary(reports[2], "torch", None) is not None  # made again, current


def test_a_summary_is_used_only_for_the_report_and_inputs_it_was_made_from(tmp_path):
    reports = write_torch_run(tmp_path)
    _summarize(tmp_path)
    with open(summary_path(reports[0])) as handle:
        raw = json.load(handle)
    good = ReportSummary.from_dict(raw)
    assert load_summary(reports[0], "torch", None) == good
    assert load_summary(reports[0], "torch", 123) is None  # another window start
    assert load_summary(reports[0], "nsys", None) is None  # another backend

    def planted(target, **changes):
        with open(summary_path(target), "w") as handle:
            json.dump(dict(raw, **changes), handle)
        return load_summary(target, "torch", None)

    assert planted(reports[0], format=SUMMARY_FORMAT + 1) is None
    stale = dict(raw["fingerprint"], mtime_ns=raw["fingerprint"]["mtime_ns"] + 1)
    assert planted(reports[0], fingerprint=stale) is None
    # another report's summary beside this one: another name, then another content
    assert planted(reports[2]) is None
    assert planted(reports[2], report=os.path.basename(reports[2])) is None
    for junk in ("", "[]", "{\"format\": 1}", "not json"):
        with open(summary_path(reports[2]), "w") as handle:
            handle.write(junk)
        assert load_summary(reports[2], "torch", None) is None
    assert _phase_ms(_summarize(tmp_path), 2) == [900.0]  # read again, not the junk


def test_the_fingerprint_hashes_both_ends_and_the_size(tmp_path):
    path = tmp_path / "r.bin"
    body = bytearray(os.urandom(3 << 20))
    path.write_bytes(bytes(body))
    first = fingerprint(str(path))
    stamp = os.stat(path).st_mtime_ns
    body[-1] ^= 1  # the last byte: inside the last edge
    path.write_bytes(bytes(body))
    os.utime(path, ns=(stamp, stamp))
    assert fingerprint(str(path)).edges_sha256 != first.edges_sha256
    assert fingerprint(str(path)).mtime_ns == first.mtime_ns


def test_an_unreadable_report_gets_no_summary(tmp_path):
    path = tmp_path / "bad.pt.trace.json.gz"
    path.write_bytes(b"not gzip")
    data, made = make_summary(str(path), "torch", index=3, window_start_ns=None, timeout_s=5)
    assert made is None and data.error and data.index == 3
    assert not os.path.exists(summary_path(str(path)))


def test_a_summary_that_cannot_be_written_is_no_error(tmp_path):
    reports = write_torch_run(tmp_path)
    _, made = make_summary(reports[0], "torch", index=0, window_start_ns=None, timeout_s=5)
    assert made is not None
    gone = str(tmp_path / "no-such-folder" / "r.pt.trace.json.gz")
    assert write_summary(made, gone) is None  # e.g. a read-only folder: read next time


def test_manifests_without_the_summary_field_still_load(tmp_path):
    write_torch_run(tmp_path)
    raw = json.loads((tmp_path / "manifest.json").read_text())
    for entry in raw["reports"]:
        entry.pop("summary")
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    manifest = read_manifest(str(tmp_path))
    assert {e.summary for e in manifest.reports} == {None}
    listed = dataclasses.replace(manifest, reports=tuple(
        dataclasses.replace(e, summary=summary_path(e.path)) for e in manifest.reports))
    write_manifest(listed, str(tmp_path))
    assert read_manifest(str(tmp_path)) == listed
    assert isinstance(listed, Manifest)


@pytest.mark.parametrize("key, default, other", [("summarise", "at_end", "per_window"),
                                                  ("place", "per_window", "at_end")])
def test_when_keys_are_validated_by_name(key, default, other):
    base = {"trainer": {"profile_steps": [1], "device": "cpu", "profiler": {}}}
    assert getattr(config_from_dict(base, env={}).profiling, key) == default
    base["trainer"]["profiler"][key] = other
    assert getattr(config_from_dict(base, env={}).profiling, key) == other
    base["trainer"]["profiler"][key] = "always"
    with pytest.raises(ConfigError, match=rf"^trainer\.profiler\.{key}: "):
        config_from_dict(base, env={})
