"""What ``verlprof plan`` prints around its tables, line by line as a user reads and copies it:
the headline that says whether anything is profiled and why not, and the lines a user pastes
(a launch command, the output directory, the finish hook, the next steps), which stay one
line on a terminal of any width. Found by the mutation check (docs/reliability.md): the
existing tests rendered 200-400 columns wide and matched substrings, so a wrong headline above
a good plan, a pasted line broken in two, or a headline no longer bold went unnoticed."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

from tests.unit.test_plan_render_tables import SHIPPED, plan_and_stdout, table_rows
from verlprof.config import load_config
from verlprof.config.schema import (
    ComponentConfig,
    ComponentsConfig,
    OnDemandConfig,
    ProfilingConfig,
)
from verlprof.config.topology import Topology
from verlprof.plan import build_plan
from verlprof.plan.render import render_plan
from verlprof.plan_model import EngineRoute, FinishHookPlan, TokenWindow, WindowTime

GROUP = "actor_rollout_ref"
OUT = "/tmp/a/long/output/directory/for/profiling"
NSYS = ("nsys profile --sample=none --cpuctxsw=none --capture-range=nvtx "
        "--nvtx-capture=VERLPROF_CAPTURE@verlprof")


@pytest.mark.parametrize("overrides, headline", [
    ([], None),
    (["trainer.profile_steps=null"], "Profiling is off (no trainer.profile_steps)."),
    (["actor_rollout_ref.actor.profile_ranks=[]", "actor_rollout_ref.rollout.profile_ranks=[]",
      "critic.profile_ranks=[]"], "Profiling is off: no rank of any component is selected."),
])
def test_the_first_line_says_whether_anything_is_profiled(overrides, headline, tmp_path, capsys):
    _, out = plan_and_stdout(overrides, tmp_path, capsys)
    lines = out.splitlines()
    if headline is None:  # a plan that runs starts with it, under no "off" headline
        assert lines[:3] == ["verlprof plan tool=nsys source=seed",
                             "  steps: [1], [2]  (2 window(s))",
                             f"  output_dir: {tmp_path}/out"]
        assert "Profiling is off" not in out and "No planned window" not in out
    else:
        assert lines[0] == headline
        assert "verlprof plan tool=" not in out and "Launch commands" not in out


def on_demand_plan(steps):
    """A plan with every line around the tables: on demand with an armed rank, time bounds, a
    finish hook and a warning; ``steps=()`` plans no window (the armed rank alone runs)."""
    config = ProfilingConfig(steps=steps, tool="nsys", output_dir=OUT,
                             components=ComponentsConfig(actor=ComponentConfig(ranks=(0,))),
                             on_demand=OnDemandConfig(enabled=True, nsys_ranks={GROUP: (1,)}))
    plan = build_plan(config, Topology.of({GROUP: 2}, cuda=False))
    return dataclasses.replace(
        plan, window_time=WindowTime(delay_s=30.0, duration_s=60.0), verl_release="0.9.1",
        warnings=("a warning long enough to wrap at forty columns",),
        finish_hook=FinishHookPlan(cmd="upload.sh /tmp/a/long/output/directory"))


def rendered(plan, width: int, terminal: bool = False) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=terminal,
                      color_system="standard" if terminal else None)
    render_plan(plan, console)
    return console.file.getvalue()


def command(rank: int, end: str) -> str:
    return (f"  {GROUP} rank {rank}: NSYS_NVTX_PROFILER_REGISTER_ONLY=0 VERLPROF_NSYS_OWNER={OUT}"
            f" {NSYS} --capture-range-end={end} --force-overwrite=true "
            f"--output={OUT}/.raw/{GROUP}/rank{rank}/{GROUP}_rank{rank}_%p")


ON_DEMAND = [
    f"On demand: the running job takes capture requests (verlprof capture {OUT} "
    "--steps next:N).",
    "  armed for nsys (--tool nsys; launched under nsys with an open-ended window count): "
    f"{GROUP} rank 1"]
AFTER_TABLES = [
    "finish hook (trainer.profiler.finish_hook.cmd), after every report is gathered, on the "
    "controller's host: /bin/sh -c 'upload.sh /tmp/a/long/output/directory' (timeout 600s)",
    "warning: a warning long enough to wrap at forty columns",
    "next steps:",
    "  run:  start the trainer with this config and the same overrides (only the ranks above "
    "are wrapped)",
    f"  then: verlprof report {OUT}"]


def test_on_a_narrow_terminal_each_line_a_user_pastes_stays_one_line():
    lines = rendered(on_demand_plan((1,)), width=40).splitlines()
    assert lines[:6] == ON_DEMAND + [
        "verlprof plan tool=nsys source=seed verl=0.9.1",
        "  steps: [1]  (1 window(s))",
        "  time bounds: each window opens 30 s into its step, closes 60 s later or at the "
        "step's end, whichever comes first (trainer.profiler.window_delay_s / "
        "window_duration_s)",
        f"  output_dir: {OUT}"]
    start = lines.index("are wrapped; the interpreter follows):")  # rich wraps this one
    assert lines[start + 1:start + 3] == [command(0, "repeat:1"), command(1, "repeat")]
    assert lines.count(command(1, "repeat")) == 1  # listed once, planned windows or not
    assert lines[-5:] == AFTER_TABLES


def test_with_no_planned_window_the_armed_rank_still_gets_its_command():
    lines = rendered(on_demand_plan(()), width=400).splitlines()
    assert lines == ["No planned window (no trainer.profile_steps)."] + ON_DEMAND + [
        "Launch commands (only these processes are wrapped; the interpreter follows):",
        command(1, "repeat")] + AFTER_TABLES


def test_on_a_terminal_the_headlines_are_bold_and_warnings_yellow(tmp_path):
    bold, yellow, plain = "\x1b[1m", "\x1b[33m", "\x1b[0m"
    text = rendered(on_demand_plan((1,)), width=400, terminal=True)
    for headline in ("On demand", "verlprof plan", "Launch commands"):
        assert f"{bold}{headline}{plain}" in text, headline
    assert f"{yellow}warning:{plain} a warning" in text
    assert rendered(on_demand_plan(()), width=400, terminal=True).startswith(
        f"{bold}No planned window{plain} (no trainer.profile_steps).")
    off = dataclasses.replace(on_demand_plan(()), on_demand=OnDemandConfig())
    assert rendered(off, width=400, terminal=True).startswith(
        f"{bold}Profiling is off{plain} (no trainer.profile_steps).")
    switched_off = dataclasses.replace(off, disabled_reason="trainer.profiler.enabled is false")
    assert rendered(switched_off, width=400, terminal=True).startswith(
        f"{bold}Profiling is off{plain}: trainer.profiler.enabled is false.")
    no_rank = dataclasses.replace(on_demand_plan((1,)), on_demand=OnDemandConfig(),
                                  processes=(), enabled=False)
    assert rendered(no_rank, width=400, terminal=True).startswith(
        f"{bold}Profiling is off{plain}: no rank of any component is selected.")


@pytest.mark.parametrize("change, lines", [
    ({"enabled": False, "disabled_reason": "trainer.profiler.enabled is false"}, [
        "Profiling is off: trainer.profiler.enabled is false.",
        "next steps: nothing is profiled while trainer.profiler.enabled is false; change that "
        "setting to profile (docs/user_guide.md)"]),
    ({"components": ComponentsConfig()}, [  # (its headline is wrapped by rich: not pasted)
        "next steps: choose steps and ranks, e.g. 'trainer.profile_steps=[3,4]' "
        "'actor_rollout_ref.actor.profile_ranks=[0]' (docs/user_guide.md)"]),
])
def test_on_a_narrow_terminal_why_nothing_runs_stays_one_line(change, lines):
    config = dataclasses.replace(ProfilingConfig(
        steps=(1,), output_dir=OUT, components=ComponentsConfig(actor=ComponentConfig(ranks=(0,)))),
        **change)
    plan = dataclasses.replace(build_plan(config, Topology.of({GROUP: 2}, cuda=False)),
                               warnings=())
    printed = rendered(plan, width=40).splitlines()
    assert printed[-len(lines):] == lines
    assert printed[0].startswith("Profiling is off: ")


def test_a_served_groups_ranks_are_its_replicas_with_their_gpus():
    config = ProfilingConfig(steps=(1,), output_dir=OUT, components=ComponentsConfig(
        actor=ComponentConfig(ranks=(0, 1))))
    plan = build_plan(config, Topology.of({GROUP: 2, "critic": 2}, cuda=False))
    served = dataclasses.replace(plan.groups[0], rank_span=4, engine="vllm")
    plan = dataclasses.replace(plan, groups=(served,) + plan.groups[1:])
    rows = table_rows(rendered(plan, width=400), "Worker ranks")
    assert rows == [(f"{GROUP} (vllm replicas of 4 GPU(s))", "2", "0 (GPUs 0-3), 1 (GPUs 4-7)",
                     "actor", "whole", "1"),
                    ("critic", "2", "-", "-", "-", "-")]


def test_the_ranks_table_joins_each_groups_ranks_roles_modes_and_window_counts():
    overrides = ["trainer.n_gpus_per_node=4", "trainer.profile_steps=[1,2]",
                 "actor_rollout_ref.actor.profile_ranks=[0,1,3]",
                 "actor_rollout_ref.rollout.profile_ranks=[1,2]", "critic.profile_ranks=[]"]
    loaded = load_config(SHIPPED, [f"trainer.profiler.output_dir={OUT}", *overrides])
    plan = build_plan(loaded.profiling, loaded.topology)
    first, *others = plan.processes  # one rank planned otherwise: discrete, one window
    first = dataclasses.replace(first, mode="discrete", windows=first.windows[:1])
    text = rendered(dataclasses.replace(plan, processes=(first, *others)), width=400)
    lines = [line.rstrip() for line in text.splitlines()]
    title = lines.index("Worker ranks")  # on the left
    assert lines[title + 2].split("┃")[1:-1] == [
        " group             ", " world ", " profiled ranks ", " roles that select them        ",
        " mode           ", " windows/rank "]
    assert table_rows(text, "Worker ranks") == [
        (GROUP, "4", "0, 1, 2, 3", "actor; actor,rollout; rollout", "discrete,whole", "1,2"),
        ("critic", "4", "-", "-", "-", "-"),  # a group with no planned rank, then the next one
        ("rm", "1", "-", "-", "-", "-")]


def test_the_engine_route_armed_ranks_and_hook_nodes_are_listed_in_full():
    plan = dataclasses.replace(
        on_demand_plan((1,)),
        on_demand=OnDemandConfig(enabled=True, nsys_ranks={GROUP: (0, 1), "critic": (2,)}),
        finish_hook=FinishHookPlan(cmd="upload.sh", targets=((GROUP, 0), ("critic", 1)),
                                   timeout_s=90.5, key="global_profiler.finish_hook_cmd"),
        engine_route=EngineRoute(group="rollout_replicas", steps=(1, 3), trace_dir="/tmp/tr",
                                 tokens=TokenWindow(10, 20), key="rollout.tool_config.torch"))
    lines = rendered(plan, width=40).splitlines()
    assert ("  armed for nsys (--tool nsys; launched under nsys with an open-ended window "
            f"count): {GROUP} rank 0, {GROUP} rank 1, critic rank 2") in lines
    assert ("rollout_replicas: verl's engine profiler (rollout.tool_config.torch) on steps 1, 3, "
            "engine iterations 10 to 20, in the replicas verl's rollout profiler block selects; "
            "traces gathered from /tmp/tr/agent_loop_rollout_replica_<r>/ into "
            "step<N>/rollout_replicas/verl_engine/replica<r>/") in lines
    assert ("finish hook (global_profiler.finish_hook_cmd), after every report is gathered, on "
            f"the nodes of {GROUP} rank 0, critic rank 1: /bin/sh -c upload.sh "
            "(timeout 90.5s)") in lines


def test_a_command_without_environment_and_an_in_process_rank_are_one_line_each():
    plan = on_demand_plan((1,))
    nsys_rank, armed = plan.processes
    in_process = dataclasses.replace(nsys_rank, launch_argv=(), backend="torch")
    plan = dataclasses.replace(plan, processes=(in_process, dataclasses.replace(
        armed, launch_env={}, launch_argv=("nsys", "profile", "--trace=nvtx"))))
    lines = [line.rstrip() for line in rendered(plan, width=40).splitlines()]
    assert f"  {GROUP} rank 0: in-process torch profiler" in lines
    assert f"  {GROUP} rank 1: nsys profile --trace=nvtx" in lines
    # the heading is one line, however narrow the console: a path cut in two cannot be copied
    title = next(i for i, line in enumerate(lines)
                 if line.startswith("Reports that will appear under /"))
    header = next(line for line in lines[title:] if line.startswith("┃"))
    assert [cell.strip() for cell in header.split("┃")[1:-1]] == ["step(s)", "file"]
