"""``verlprof plan``'s tables are what a user copies: each launch command and each report path
as printed must be the plan's own record, to the character (issue 13 item 6).

Each test runs ``verlprof plan`` on the shipped ``trainer_configs/ppo_trainer.yaml`` through
:func:`verlprof.cli.main`, reads its stdout as a user would (a command line is pasted into a
shell, a table row is read cell by cell) and compares it with the plan
:func:`~verlprof.plan.build_plan` builds from the same config and overrides."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from verlprof import cli, paths
from verlprof.config import load_config
from verlprof.plan import build_plan

SHIPPED = str(Path(__file__).resolve().parents[2] / "trainer_configs" / "ppo_trainer.yaml")

CASES = {
    # whole-step windows, two worker groups, the controller wrapped, rm present but unprofiled
    "shipped": [],
    # discrete critic (two components per step), a third window, 4-way groups of which only
    # some ranks are planned, and a worker option changed so the argv must follow the config
    "discrete": ["critic.profile_discrete=true", "trainer.profile_steps=[1,2,3]",
                 "trainer.n_gpus_per_node=4", "trainer.worker_nsight_options.trace=nvtx",
                 "actor_rollout_ref.actor.profile_ranks=[1,3]",
                 "actor_rollout_ref.rollout.profile_ranks=[]"],
    # continuous windows: one report covers steps 1-2
    "continuous": ["trainer.profile_continuous_steps=true", "trainer.profile_steps=[1,2,3]"],
    # torch: nothing is wrapped, every planned rank runs the profiler in process
    "torch": ["trainer.profiler.tool=torch"],
}


def plan_and_stdout(overrides: List[str], tmp_path, capsys):
    overrides = [f"trainer.profiler.output_dir={tmp_path}/out"] + overrides
    assert cli.main(["plan", "--config", SHIPPED, *overrides]) == 0
    loaded = load_config(SHIPPED, overrides)
    return build_plan(loaded.profiling, loaded.topology), capsys.readouterr().out


def command_lines(out: str) -> Dict[str, str]:
    """``{"controller" | "<group> rank <n>": what follows the colon}`` of the commands block."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Launch commands"))
    found: Dict[str, str] = {}
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        who, _, command = line[2:].partition(": ")
        assert who not in found, f"{who} listed twice"
        found[who] = command
    return found


def table_rows(out: str, title: str) -> List[Tuple[str, ...]]:
    """The body rows of the table printed under ``title``, as stripped cells."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    body = next(i for i in range(start, len(lines)) if lines[i].startswith("┡"))
    rows = []
    for line in lines[body + 1:]:
        if line.startswith("└"):
            return rows
        assert line.startswith("│"), f"a row wrapped or broke the table: {line!r}"
        rows.append(tuple(cell.strip() for cell in line.strip("│").split("│")))
    raise AssertionError(f"table {title!r} never closed")


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_printed_command_is_the_plans_argv_and_env_exactly(case, tmp_path, capsys):
    plan, out = plan_and_stdout(CASES[case], tmp_path, capsys)
    printed = command_lines(out)
    expected = {f"{p.group} rank {p.rank}": p for p in plan.processes}
    assert set(printed) - {"controller"} == set(expected)  # every planned rank, nothing else
    for who, proc in expected.items():
        if not proc.launch_argv:
            assert printed[who] == f"in-process {proc.backend} profiler"
            continue
        # pasted into a shell, the line is the plan's environment then its argv, word for word
        words = shlex.split(printed[who])
        env = [f"{k}={v}" for k, v in sorted(proc.launch_env.items())]
        assert words == env + list(proc.launch_argv)
        assert proc.launch_argv[:2] == ("nsys", "profile")
        assert f"--capture-range-end=repeat:{len(proc.windows)}" in words
        assert any(w.startswith(f"--output={proc.raw_dir}/") for w in words), proc.raw_dir
    if plan.controller.launch_argv:
        env = [f"{k}={v}" for k, v in sorted(plan.controller.launch_env.items())]
        assert shlex.split(printed["controller"]) == env + list(plan.controller.launch_argv)
    else:
        assert "controller" not in printed
    # ranks the plan leaves alone are neither wrapped nor mentioned
    planned = {(p.group, p.rank) for p in plan.processes}
    for group in plan.groups:
        for rank in range(group.world_size):
            if (group.name, rank) not in planned:
                assert f"{group.name} rank {rank}:" not in out
    if case == "discrete":
        assert "--trace=nvtx" in shlex.split(printed["critic rank 0"])
        assert "actor_rollout_ref rank 0" not in printed and "actor_rollout_ref rank 3" in printed


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_files_table_lists_every_planned_report_with_its_steps(case, tmp_path, capsys):
    plan, out = plan_and_stdout(CASES[case], tmp_path, capsys)
    assert f"Reports that will appear under {tmp_path}/out" in out
    rows = table_rows(out, "Reports that will appear under")
    controller = [r for r in rows if r[1].startswith(f"{paths.CONTROLLER_DIR}/")]
    workers = [r for r in rows if r not in controller]
    assert len(workers) == len(plan.reports) and len(set(workers)) == len(workers)
    for report in plan.reports:
        row = (paths.step_text(report.steps), report.path)
        assert row in workers, row
        # the path a user reads names the report's step(s), component and rank
        step_dir, component, rank_dir, name = report.path.split("/")
        assert step_dir == paths.step_dir(report.steps)
        assert (component, rank_dir) == (report.component, f"rank{report.rank}")
        assert name.startswith(f"{report.component}_step{paths.step_text(report.steps)}_"
                               f"rank{report.rank}_")
    assert {r.steps for r in plan.reports} == set(plan.step_windows)
    if plan.controller.launch_argv:
        assert [r[0] for r in controller] == [paths.step_text(w) for w in plan.controller.windows]
    else:
        assert controller == []


def test_the_ranks_table_lists_each_group_with_its_planned_ranks(tmp_path, capsys):
    plan, out = plan_and_stdout(CASES["discrete"], tmp_path, capsys)
    rows = {row[0]: row for row in table_rows(out, "Worker ranks")}
    assert set(rows) == {g.name for g in plan.groups}
    for group in plan.groups:
        procs = [p for p in plan.processes if p.group == group.name]
        ranks = ", ".join(str(p.rank) for p in procs) or "-"
        assert rows[group.name][1:3] == (str(group.world_size), ranks)
    assert rows["critic"][4:] == ("discrete", str(len(plan.processes[-1].windows)))
    assert rows["rm"][2:] == ("-",) * 4
