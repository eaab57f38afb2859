"""A plan as a person reads it: what is captured, where, with which command, which files."""

from __future__ import annotations

import shlex
from typing import List, Optional

from rich.console import Console
from rich.table import Table

from verlprof import paths
from verlprof.plan.model import ProfilePlan


def _steps_text(window) -> str:
    return paths.step_text(window)


def render_plan(plan: ProfilePlan, console: Optional[Console] = None) -> None:
    """Print ``plan`` as tables: overview, selected ranks, commands, expected files, warnings."""
    console = console or Console(width=140)
    if not plan.step_windows:
        console.print("[bold]Profiling is off[/] (no trainer.profile_steps).")
    elif not plan.enabled:
        console.print("[bold]Profiling is off[/]: no rank of any component is selected.")
    else:
        windows = ", ".join(f"[{_steps_text(w)}]" for w in plan.step_windows)
        release = f" verl={plan.verl_release}" if plan.verl_release else ""
        console.print(f"[bold]verlprof plan[/] tool={plan.tool} source={plan.source}{release}")
        console.print(f"  steps: {windows}  ({len(plan.step_windows)} window(s))")
        console.print(f"  output_dir: {plan.output_dir}")
        console.print(_ranks_table(plan))
        _print_commands(plan, console)
        console.print(_files_table(plan))
    for line in unprofiled_lines(plan) + finish_hook_lines(plan):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    for warning in plan.warnings:
        console.print(f"[yellow]warning:[/] {warning}", soft_wrap=True)
    for line in next_steps(plan):
        console.print(line, soft_wrap=True, highlight=False, markup=False)


def unprofiled_lines(plan: ProfilePlan) -> List[str]:
    """One line per process group of the run that no setting can profile (never an error)."""
    return [f"{g.name} ({g.description}, {g.world_size} ranks): present, not profiled: "
            f"{g.reason}" for g in plan.unprofiled]


def finish_hook_lines(plan: ProfilePlan) -> List[str]:
    """Where and what the finish hook runs, once every report is gathered."""
    hook = plan.finish_hook
    if hook is None:
        return []
    where = ("on the controller's host" if not hook.targets else "on the nodes of "
             + ", ".join(f"{group} rank {rank}" for group, rank in hook.targets))
    return [f"finish hook ({hook.key}), after every report is gathered, {where}: "
            f"/bin/sh -c {shlex.quote(hook.cmd)} (timeout {hook.timeout_s:g}s)"]


def next_steps(plan: ProfilePlan) -> List[str]:
    """What to do after reading the plan: how to get the reports, then how to read them."""
    if not plan.enabled:
        return ["next steps: choose steps and ranks, e.g. 'trainer.profile_steps=[3,4]' "
                "'actor_rollout_ref.actor.profile_ranks=[0]' (docs/user_guide.md)"]
    out_dir = shlex.quote(plan.output_dir)
    return ["next steps:",
            "  run:  start the trainer with this config and the same overrides (only the "
            "ranks above are wrapped)",
            f"  then: verlprof report {out_dir}"]


def _ranks_table(plan: ProfilePlan) -> Table:
    table = Table(title="Worker ranks", title_justify="left")
    for column in ("group", "world", "profiled ranks", "roles that select them", "mode",
                   "windows/rank"):
        table.add_column(column)
    for group in plan.groups:
        procs = [p for p in plan.processes if p.group == group.name]
        if not procs:
            table.add_row(group.name, str(group.world_size), "-", "-", "-", "-")
            continue
        ranks = ", ".join(str(p.rank) for p in procs)
        roles = "; ".join(sorted({",".join(p.selected_roles) for p in procs}))
        modes = ",".join(sorted({p.mode for p in procs}))
        counts = ",".join(sorted({str(len(p.windows)) for p in procs}))
        table.add_row(group.name, str(group.world_size), ranks, roles, modes, counts)
    return table


def _print_commands(plan: ProfilePlan, console: Console) -> None:
    console.print("[bold]Launch commands[/] (only these processes are wrapped; "
                  "the interpreter follows):")
    if plan.controller.launch_argv:
        command = _command(plan.controller.launch_argv, plan.controller.launch_env)
        console.print(f"  controller: {command}", soft_wrap=True)
    for proc in plan.processes:
        if proc.launch_argv:
            console.print(f"  {proc.group} rank {proc.rank}: "
                          f"{_command(proc.launch_argv, proc.launch_env)}", soft_wrap=True)
        else:
            console.print(f"  {proc.group} rank {proc.rank}: in-process {proc.backend} profiler")


def _command(argv, env) -> str:
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return (prefix + " " if prefix else "") + shlex.join(argv)


def _files_table(plan: ProfilePlan) -> Table:
    table = Table(title=f"Reports that will appear under {plan.output_dir}", title_justify="left")
    table.add_column("step(s)")
    table.add_column("file")
    for report in sorted(plan.reports, key=lambda r: (r.steps, r.group, r.rank, r.path)):
        table.add_row(paths.step_text(report.steps), report.path)
    if plan.controller.launch_argv:
        for window in plan.controller.windows:
            table.add_row(paths.step_text(window),
                          f"{paths.CONTROLLER_DIR}/controller_{{host}}_{{pid}}[.<n>].nsys-rep")
    return table
