"""What the CLI tells the user: help texts, progress of long work, and what to do next."""

from __future__ import annotations

import io
import os
import shutil
import types

import pytest

from tests.docs import snippets
from tests.docs.test_snippets import DEMO_OUTPUT, FIXTURE
from tests.helpers import require_nsys
from verlprof.backends.base import PERFETTO_URL
from verlprof.manifest import ReportEntry
from verlprof.report.model import Problem
from verlprof.report.next_steps import next_steps
from verlprof.report.progress import Progress

PPO = os.path.join(snippets.ROOT, "trainer_configs", "ppo_trainer.yaml")


@pytest.mark.parametrize("argv", [[], ["plan"], ["check"], ["demo"], ["report"],
                                  ["init-config"]])
def test_help_texts_describe_each_command(argv, capsys):
    from verlprof.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert len(text.split("\n\n")) >= 3, text  # usage, a description, the arguments
    if not argv:
        assert "docs/user_guide.md" in text and "verlprof report <output_dir>" in text


def test_plan_ends_with_the_next_steps(tmp_path):
    rc, out, _ = snippets.run_verlprof(["plan", "--config", PPO], {}, str(tmp_path))
    assert rc == 0
    tail = out.rstrip().splitlines()[-3:]
    assert tail[0] == "next steps:"
    assert tail[-1].split() == ["then:", "verlprof", "report",
                                str(tmp_path / "outputs" / "ppo_demo" / "profiling")]


def test_plan_without_steps_says_what_to_set(tmp_path):
    rc, out, _ = snippets.run_verlprof(["plan", "--config", PPO, "trainer.profile_steps=null"],
                                       {}, str(tmp_path))
    assert rc == 0
    assert "next steps: choose steps and ranks, e.g. 'trainer.profile_steps=[3,4]'" in out


@pytest.mark.parametrize("overrides, reason", [
    (["trainer.profiler.enabled=false"], "trainer.profiler.enabled is false"),
    # the switch wins over missing steps: it is the reason nothing would run either way
    (["trainer.profiler.enabled=false", "trainer.profile_steps=null"],
     "trainer.profiler.enabled is false"),
])
def test_plan_with_profiling_disabled_says_why(tmp_path, overrides, reason):
    rc, out, _ = snippets.run_verlprof(["plan", "--config", PPO, *overrides], {},
                                       str(tmp_path))
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == f"Profiling is off: {reason}.", out
    assert "no rank of any component is selected" not in out
    assert f"next steps: nothing is profiled while {reason}; change that setting to profile" \
        in out


@pytest.fixture
def quickstart_run(tmp_path) -> str:
    out = tmp_path / DEMO_OUTPUT
    shutil.copytree(FIXTURE, out)
    return str(out)


def test_report_shows_progress_and_names_the_file_to_open(quickstart_run, tmp_path):
    require_nsys()
    rc, out, err = snippets.run_verlprof(["report", quickstart_run, "--no-picture"], {},
                                         str(tmp_path))
    assert rc == 0, err
    assert "verlprof: reading reports: 4/4 done in" in err
    lines = out.splitlines()
    steps = lines.index("next steps:")
    opened = lines[steps + 1].split()
    assert opened[:3] == ["one", "report:", "nsys-ui"]
    assert os.path.isfile(opened[3]), opened  # a real report of the run
    assert "/step0003/actor_rollout_ref/rank0/" in opened[3]
    assert lines[steps + 2].split()[:4] == ["in", "a", "terminal:", "nsys"]


def test_report_on_a_directory_without_manifest_says_where_to_look(tmp_path):
    rc, _, err = snippets.run_verlprof(["report", str(tmp_path)], {}, str(tmp_path))
    assert rc == 2
    assert err.count("\n") == 1 and "no manifest here" in err and "output_dir" in err


def _summary(entries, **kw):
    fields = dict(manifest=types.SimpleNamespace(reports=tuple(entries)), output_dir="/out",
                  paths={}, stragglers=(), records=(), missing=())
    fields.update(kw)
    return types.SimpleNamespace(**fields)


def _entry(backend, path, group="actor_rollout_ref", status="ok"):
    return ReportEntry(steps=(3,), group=group, rank=0, component=group, backend=backend,
                       path=path, status=status)


def test_next_steps_for_torch_traces_point_at_perfetto():
    lines = next_steps(_summary([_entry("torch", "step0003/a/rank0/a.pt.trace.json.gz")],
                                paths={"timeline.html": "/out/summary/timeline.html"}))
    assert lines[0] == "next steps:"
    assert "timeline.html in a browser" in lines[1]
    assert PERFETTO_URL in lines[2] and "/out/step0003/a/rank0/a.pt.trace.json.gz" in lines[2]


def test_next_steps_prefer_a_worker_report_and_mention_problems():
    summary = _summary([_entry("nsys", "controller/c.1.nsys-rep", group="controller"),
                        _entry("nsys", "step0003/critic/rank0/c.nsys-rep", group="critic"),
                        _entry("nsys", "step0004/critic/rank0/c.nsys-rep", status="missing")],
                       missing=(Problem(kind="missing", steps=(4,), group="critic", rank=0,
                                        component="critic",
                                        path="step0004/critic/rank0/c.nsys-rep",
                                        reason="never written"),))
    text = "\n".join(next_steps(summary))
    assert "nsys-ui /out/step0003/critic/rank0/c.nsys-rep" in text
    assert "1 report(s) not summarised" in text


def test_next_steps_empty_when_nothing_to_open():
    assert next_steps(_summary([])) == []


def test_progress_in_a_log_is_one_line_per_item_and_a_closing_line():
    stream = io.StringIO()
    with Progress("reading reports", 3, stream=stream, min_interval_s=0) as progress:
        for name in ("a.nsys-rep", "b.nsys-rep", "c.nsys-rep"):
            progress.advance(name)
    lines = stream.getvalue().splitlines()
    assert lines[:2] == ["verlprof: reading reports: 1/3 (a.nsys-rep)",
                         "verlprof: reading reports: 2/3 (b.nsys-rep)"]
    assert lines[2].startswith("verlprof: reading reports: 3/3 done in ")
    assert len(lines) == 3


def test_progress_is_rate_limited_and_silent_when_empty():
    stream = io.StringIO()
    with Progress("exporting", 100, stream=stream, min_interval_s=3600) as progress:
        for _ in range(100):
            progress.advance()
    assert len(stream.getvalue().splitlines()) == 2  # the first item and the closing line
    quiet = io.StringIO()
    with Progress("nothing", 0, stream=quiet) as progress:
        progress.advance()
    assert quiet.getvalue() == ""


def test_progress_bar_on_a_terminal_is_transient():
    stream = io.StringIO()
    with Progress("reading reports", 2, stream=stream, live=True) as progress:
        progress.advance("a")
        progress.advance("b")
    assert "2/2 done" not in stream.getvalue()  # the bar is removed, no closing line


def test_progress_never_breaks_the_work():
    class Broken(io.StringIO):
        def write(self, text):
            raise OSError("disk full")

    with Progress("reading reports", 2, stream=Broken(), min_interval_s=0) as progress:
        progress.advance("a")
        progress.advance("b")
    assert progress.done == 2
