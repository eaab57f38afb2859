"""``trainer.profiler.max_total_bytes``: the setting, the plan's estimate against reports real
nsys wrote (the torch profiler's: tests/unit/test_controller.py), the refusal line, and the
controller keeping windows closed past the budget (fake ranks, tests/unit/test_controller.py's
harness), with ``skipped`` in the manifest and in ``verlprof report``."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
from rich.console import Console

from tests.torch_runs import write_torch_run
from tests.unit.test_controller import GROUP, TOPO, FileCapture, Rank, controller_of, run
from verlprof.config.loader import config_from_dict
from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
from verlprof.config.size_budget import AUTO_FRACTION, KEY, parse_setting
from verlprof.demo.run import plan_demo
from verlprof.errors import ConfigError
from verlprof.manifest import Manifest, ReportEntry, read_manifest, write_manifest
from verlprof.plan import build_plan
from verlprof.plan.render import size_lines
from verlprof.plan.size import CONTROLLER_KIND, REPORT_BYTES
from verlprof.report import summarize
from verlprof.runtime.controller import ProfileController
from verlprof.runtime.local_rpc import InProcessRanks

QUICKSTART = os.path.join(os.path.dirname(__file__), "..", "docs", "fixtures", "quickstart_run")
MIB = 1 << 20


def _loaded(profiler: dict, tmp_path) -> ProfilingConfig:
    cfg = {"trainer": {"device": "cpu", "profile_steps": [1],
                       "profiler": {"output_dir": str(tmp_path / "out"), **profiler}},
           "actor_rollout_ref": {"actor": {"profile_ranks": [0]}}}
    return config_from_dict(cfg, env={}).profiling


# -- the setting ------------------------------------------------------------------------------


def test_sizes_as_people_write_them():
    assert parse_setting(1024) == 1024
    assert parse_setting("20GiB") == 20 << 30
    assert parse_setting("500M") == 500 << 20
    assert parse_setting("1.5 TB") == 3 << 39
    assert parse_setting("4096b") == 4096
    assert parse_setting("auto") == "auto" and parse_setting(None) is None
    for bad in (True, 0, -5, 2.5, "lots", "20XB", "", [1]):
        with pytest.raises(ConfigError) as info:
            parse_setting(bad)
        assert str(info.value).startswith(f"{KEY}: must be a size in bytes")
        assert "\n" not in str(info.value)


def test_left_out_is_a_tenth_of_the_free_space_null_is_none_a_size_is_bytes(tmp_path):
    auto = _loaded({}, tmp_path)
    free = shutil.disk_usage(str(tmp_path)).free  # out/ does not exist yet: its parent counts
    assert isinstance(auto.max_total_bytes, int)
    assert abs(auto.max_total_bytes - free * AUTO_FRACTION) < 0.01 * free
    assert auto.max_total_bytes_basis.startswith("auto: 10% of the ")
    assert str(tmp_path) in auto.max_total_bytes_basis
    assert _loaded({"max_total_bytes": None}, tmp_path).max_total_bytes is None
    given = _loaded({"max_total_bytes": "2GiB"}, tmp_path)
    assert (given.max_total_bytes, given.max_total_bytes_basis) == (2 << 30, "")
    with pytest.raises(ConfigError, match=r"^trainer\.profiler\.max_total_bytes: must be a size"):
        _loaded({"max_total_bytes": "much"}, tmp_path)


def test_a_budget_below_the_first_window_is_refused_in_one_line(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(ConfigError) as info:
        plan_demo(None, [f"trainer.profiler.output_dir={out}", "trainer.profile_steps=[1,2]",
                         "++trainer.profiler.max_total_bytes=100K"])
    line = str(info.value)
    assert "\n" not in line and line.startswith(f"{KEY}: 100.0 KiB holds not even the first "
                                                "window: step(s) [1] make about ")
    assert "null for no budget" in line
    # a budget that holds the first window is taken
    _, plan, _ = plan_demo(None, [f"trainer.profiler.output_dir={out}",
                                  "trainer.profile_steps=[1,2]",
                                  "++trainer.profiler.max_total_bytes=100M"])
    assert plan.size.max_total_bytes == 100 * MIB


# -- the estimate against real reports ----------------------------------------------------------


def test_the_estimate_holds_what_real_nsys_wrote_within_a_factor_of_two(tmp_path):
    """The quickstart fixture: the demo's steps 3 and 4, actor rank 0 and the controller, real
    nsys on CPU. Its plan's estimate per window is at least what was written, at most 2x."""
    manifest = read_manifest(QUICKSTART)
    _, plan, _ = plan_demo(None, [f"trainer.profiler.output_dir={tmp_path}",
                                  "trainer.profile_steps=[3,4]", "critic.profile_ranks=[]",
                                  "actor_rollout_ref.actor.profile_ranks=[0]",
                                  "trainer.profiler.tool=nsys"])
    assert sorted((r.group, r.rank, r.steps) for r in plan.reports) == sorted(
        (e.group, e.rank, e.steps) for e in manifest.reports if e.group != "controller")
    for window, estimate in zip(plan.step_windows, plan.size.window_bytes):
        real = sum(e.bytes for e in manifest.reports if e.steps == window)
        assert real > 0 and real <= estimate <= 2 * real, (window, real, estimate)
    per_report = REPORT_BYTES[CONTROLLER_KIND].bytes_per_step
    assert all(e.bytes <= per_report <= 2 * e.bytes for e in manifest.reports)
    lines = size_lines(plan)
    assert lines[0].startswith("  size: about 512.0 KiB per window, 1.0 MiB for 2 window(s); "
                               "budget ") and KEY in lines[0]
    assert any("nsys whole-step, CPU only: 2 report(s), about 256.0 KiB each per step "
               "(measured: 156 KiB" in line for line in lines)


# -- the controller keeps windows closed past the budget ----------------------------------------


def _plan(tmp_path, steps, *, budget, ranks=(0, 1)):
    cfg = ProfilingConfig(steps=tuple(steps), tool="torch", output_dir=str(tmp_path),
                          max_total_bytes=budget, components=ComponentsConfig(
                              actor=ComponentConfig(ranks=tuple(ranks))))
    return build_plan(cfg, TOPO)


class SizedCapture(FileCapture):
    """Writes each window's report as a file of ``SIZE`` bytes with the torch suffix, as the
    budget finds reports on disk."""

    SIZE = 300 << 10

    def close(self, window):
        n = len(self.files) + 1
        path = os.path.join(self.plan.raw_dir,
                            f"{GROUP}_rank{self.plan.rank}_{os.getpid()}.{n}.pt.trace.json.gz")
        with open(path, "wb") as handle:
            handle.write(b"\0" * self.SIZE)
        self.files[n] = path


class SizedRank(Rank):
    def verlprof_configure(self, plan):
        status = super().verlprof_configure(plan)
        self._verlprof_session.capture = SizedCapture(plan)
        return status


def test_before_any_report_the_estimate_decides_and_skipped_reports_say_why(tmp_path):
    """Torch on CPU is estimated at 1 MiB per report: two ranks make 2 MiB a window, so 2.5 MiB
    holds the first window only (FileCapture's files carry no report suffix: nothing measured)."""
    plan = _plan(tmp_path, [1, 2, 3], budget=int(2.5 * MIB))
    assert plan.size.window_bytes == (2 * MIB,) * 3
    controller, ranks, rpc = controller_of(plan)
    run(controller, ranks, [1, 2, 3])
    assert [m for m, _ in rpc.sent].count("verlprof_start") == 1
    manifest = controller.finalize()
    assert sorted((e.rank, e.steps, e.status) for e in manifest.reports) == [
        (r, (s,), "ok" if s == 1 else "skipped") for r in (0, 1) for s in (1, 2, 3)]
    reasons = {e.reason for e in manifest.reports if e.status == "skipped"}
    assert reasons == {f"not opened: {KEY} is 2.5 MiB, 2.0 MiB were written and this window "
                       "would add about 2.0 MiB (estimated)"}
    warnings = [w for w in manifest.warnings if KEY in w]
    assert warnings == [f"{KEY}: 2.5 MiB budget: 2.0 MiB written, the next window would add "
                        "about 2.0 MiB (estimated); window(s) [2], [3] are skipped (listed as "
                        "skipped in the manifest)"]
    # the manifest on disk says so too, and reads back
    on_disk = read_manifest(str(tmp_path))
    assert [e.status for e in on_disk.by_status("skipped")] == ["skipped"] * 4


def test_once_reports_are_written_their_real_size_decides(tmp_path):
    """Reports of 300 KiB: the 2.5 MiB budget, which the estimate would end after one window,
    holds four windows of 600 KiB measured; the fifth is skipped."""
    plan = _plan(tmp_path, [1, 2, 3, 4, 5], budget=int(2.5 * MIB))
    controller = ProfileController(plan, rpc=InProcessRanks(), echo=False, preflight=False,
                                   handle_signals=False)
    ranks = [SizedRank(0), SizedRank(1)]
    controller.register_group(GROUP, ranks)
    run(controller, ranks, [1, 2, 3, 4, 5])
    manifest = controller.finalize()
    assert sorted((e.steps[0], e.status) for e in manifest.reports if e.rank == 0) == [
        (1, "ok"), (2, "ok"), (3, "ok"), (4, "ok"), (5, "skipped")]
    assert all(e.bytes == SizedCapture.SIZE for e in manifest.by_status("ok"))
    (warning,) = [w for w in manifest.warnings if KEY in w]
    assert warning == (f"{KEY}: 2.5 MiB budget: 2.3 MiB written, the next window would add "
                       "about 600.0 KiB (measured); window(s) [5] are skipped (listed as "
                       "skipped in the manifest)")


def test_no_budget_opens_every_window(tmp_path):
    plan = _plan(tmp_path, [1, 2, 3], budget=None)
    controller, ranks, _ = controller_of(plan)
    run(controller, ranks, [1, 2, 3])
    assert {e.status for e in controller.finalize().reports} == {"ok"}


# -- verlprof report on a manifest with skipped reports -----------------------------------------


def test_the_report_lists_skipped_reports_with_the_reason(tmp_path):
    write_torch_run(tmp_path)
    manifest = read_manifest(str(tmp_path))
    reason = f"not opened: {KEY} is 1.0 MiB, 900.0 KiB were written and ..."
    skipped = ReportEntry(steps=(2,), group=GROUP, rank=0, component=GROUP, backend="torch",
                          path="step0002/actor_rollout_ref/rank0/r0.pt.trace.json.gz",
                          status="skipped", reason=reason)
    write_manifest(dataclasses.replace(manifest, reports=manifest.reports + (skipped,),
                                       step_windows=((1,), (2,))), str(tmp_path))
    summary = summarize(str(tmp_path), console=Console(quiet=True), picture=False)
    assert [(p.kind, p.steps, p.reason) for p in summary.missing] == [("skipped", (2,), reason)]
    assert {r.step for r in summary.rows} == {1}
    with open(summary.paths["summary.md"]) as handle:
        assert "| skipped | 2 |" in handle.read()


def test_a_manifest_from_before_skipped_still_loads():
    with open(os.path.join(QUICKSTART, "manifest.json")) as handle:
        data = json.load(handle)
    assert {e.status for e in Manifest.from_dict(data).reports} == {"ok"}


def test_an_auto_budget_is_raised_to_the_first_window_up_to_half_the_free_space(tmp_path):
    """auto is a tenth of the free space: a first window of up to five times that (half the
    free space) raises it, so that the default never leaves a run with nothing; more is refused."""
    def plan(budget):
        cfg = ProfilingConfig(steps=(1, 2), tool="torch", output_dir=str(tmp_path),
                              max_total_bytes=budget, max_total_bytes_basis="auto: 10% of X",
                              components=ComponentsConfig(actor=ComponentConfig(ranks=(0, 1))))
        return build_plan(cfg, TOPO)

    raised = plan(1 * MIB).size  # the first window: 2 MiB
    assert (raised.max_total_bytes, raised.basis) == (
        2 * MIB, "auto: 10% of X, raised to hold the first window")
    with pytest.raises(ConfigError, match=r"^trainer\.profiler\.max_total_bytes: 300\.0 KiB "
                                          r"\(auto: 10% of X\) holds not even the first window"):
        plan(300 << 10)
