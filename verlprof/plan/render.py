"""A plan as a person reads it: what is captured, where, with which command, which files.

Group and role names, paths, commands and warnings come from the config: they are data
(:mod:`verlprof.safe_text`). They reach rich only as ``Text`` of their visible form, never as
markup (an ``output_dir`` with ``[bold]`` in it prints as written), and commands and paths are
shell words that show every hidden character and still run when pasted.
"""

from __future__ import annotations

from typing import List, Optional, Tuple, Union

from rich.console import Console
from rich.table import Table
from rich.text import Text

from verlprof import paths
from verlprof.config.size_budget import human_bytes
from verlprof.config.topology import GroupTopology
from verlprof.plan_model import ProfilePlan
from verlprof.safe_text import shell_join, shell_quote, visible

Part = Union[str, Tuple[str, str]]
"""A piece of a printed line: data (shown visibly, no style) or (our text, its style)."""


def _text(*parts: Part) -> Text:
    """One line from data and styled pieces of ours: no markup is ever parsed."""
    return Text.assemble(*[p if isinstance(p, tuple) else visible(p) for p in parts])


def render_plan(plan: ProfilePlan, console: Optional[Console] = None) -> None:
    """Print ``plan`` as tables: overview, selected ranks, commands, expected files, warnings."""
    console = console or Console(width=140)
    if plan.disabled_reason:  # the switch, not the steps or ranks, is why nothing runs
        console.print(_text(("Profiling is off", "bold"), f": {plan.disabled_reason}."),
                      soft_wrap=True)
    elif not plan.step_windows:
        console.print(_text(("No planned window" if plan.on_demand.enabled else
                             "Profiling is off", "bold"), " (no trainer.profile_steps)."))
    elif not plan.enabled:
        console.print(_text(("Profiling is off", "bold"),
                            ": no rank of any component is selected."))
    if plan.on_demand.enabled:
        console.print(_text(("On demand", "bold"), ": the running job takes capture requests "
                            f"(verlprof capture {plan.output_dir} --steps next:N)."),
                      soft_wrap=True)
        armed = ", ".join(f"{group} rank {r}" for group, ranks in
                          plan.on_demand.nsys_ranks.items() for r in ranks)
        if armed:
            console.print(_text(f"  armed for nsys (--tool nsys; launched under nsys with an "
                                f"open-ended window count): {armed}"), soft_wrap=True)
    if plan.enabled and plan.step_windows:
        windows = ", ".join(f"[{paths.step_text(w)}]" for w in plan.step_windows)
        release = f" verl={plan.verl_release}" if plan.verl_release else ""
        console.print(_text(("verlprof plan", "bold"),
                            f" tool={plan.tool} source={plan.source}{release}"), soft_wrap=True)
        console.print(_text(f"  steps: {windows}  ({len(plan.step_windows)} window(s))"))
        if plan.window_time.bounded:
            console.print(_text(f"  time bounds: each window {plan.window_time.describe()} "
                                "(trainer.profiler.window_delay_s / window_duration_s)"),
                          soft_wrap=True)
        console.print(_text(f"  output_dir: {plan.output_dir}"), soft_wrap=True)
        for line in size_lines(plan):
            console.print(_text(line), soft_wrap=True)
        console.print(_ranks_table(plan))
        _print_commands(plan, console)
        # the heading on a line of its own: a table title wraps a long output_dir to the
        # table's width, and a path cut in two cannot be copied
        console.print(_text(f"Reports that will appear under {plan.output_dir}"),
                      soft_wrap=True)
        console.print(_files_table(plan))
    elif plan.on_demand.nsys_ranks:  # armed ranks, nothing planned: their launch commands
        _print_commands(plan, console)
    for line in unprofiled_lines(plan) + engine_route_lines(plan) + finish_hook_lines(plan):
        console.print(_text(line), soft_wrap=True)
    for warning in plan.warnings:
        console.print(_text(("warning:", "yellow"), f" {warning}"), soft_wrap=True)
    for line in next_steps(plan):
        console.print(_text(line), soft_wrap=True)


def size_lines(plan: ProfilePlan) -> List[str]:
    """The estimate per window and in all, by kind of report, against the budget."""
    size = plan.size
    if not size.window_bytes:
        return []
    each = sorted(set(size.window_bytes))
    per_window = human_bytes(each[0]) if len(each) == 1 else \
        f"{human_bytes(each[0])} to {human_bytes(each[-1])}"
    budget = (f"budget {human_bytes(size.max_total_bytes)} ({size.key}"
              + (f"; {size.basis})" if size.basis else ")")
              if size.max_total_bytes is not None else
              f"no budget ({size.key}: {size.basis or 'null'})")
    lines = [f"  size: about {per_window} per window, {human_bytes(size.total_bytes)} for "
             f"{len(size.window_bytes)} window(s); {budget}"]
    lines += [f"    {k.kind}: {k.reports} report(s), about {human_bytes(k.bytes_per_step)} each "
              f"per step ({k.basis})" for k in size.kinds]
    if size.max_total_bytes is not None and size.total_bytes > size.max_total_bytes:
        spent, first = 0, len(size.window_bytes)
        for index, nbytes in enumerate(size.window_bytes):
            spent += nbytes
            if spent > size.max_total_bytes:
                first = index
                break
        skipped = ", ".join(f"[{paths.step_text(w)}]" for w in plan.step_windows[first:])
        lines.append(f"    at this estimate the budget ends before window(s) {skipped}: the run "
                     "measures the reports it writes and skips the windows that would not fit")
    return lines


def unprofiled_lines(plan: ProfilePlan) -> List[str]:
    """One line per process group of the run that no setting can profile (never an error)."""
    return [f"{g.name} ({g.description}, {g.world_size} ranks): present, not profiled: "
            f"{g.reason}" for g in plan.unprofiled]


def engine_route_lines(plan: ProfilePlan) -> List[str]:
    """verl's own engine profiling of the rollout replicas, which verlprof drives and gathers."""
    route = plan.engine_route
    if route is None:
        return []
    return [f"{route.group}: verl's engine profiler ({route.key}) on steps "
            f"{', '.join(map(str, route.steps))}, {route.tokens.describe()}, in the replicas "
            "verl's rollout profiler block selects; traces gathered from "
            f"{route.trace_dir}/agent_loop_rollout_replica_<r>/ into "
            f"step<N>/{route.group}/verl_engine/replica<r>/"]


def finish_hook_lines(plan: ProfilePlan) -> List[str]:
    """Where and what the finish hook runs, once every report is gathered."""
    hook = plan.finish_hook
    if hook is None:
        return []
    where = ("on the controller's host" if not hook.targets else "on the nodes of "
             + ", ".join(f"{group} rank {rank}" for group, rank in hook.targets))
    return [f"finish hook ({hook.key}), after every report is gathered, {where}: "
            f"/bin/sh -c {shell_quote(hook.cmd)} (timeout {hook.timeout_s:g}s)"]


def next_steps(plan: ProfilePlan) -> List[str]:
    """What to do after reading the plan: how to get the reports, then how to read them."""
    if plan.disabled_reason:
        return [f"next steps: nothing is profiled while {plan.disabled_reason}; change that "
                "setting to profile (docs/user_guide.md)"]
    if not plan.enabled:
        return ["next steps: choose steps and ranks, e.g. 'trainer.profile_steps=[3,4]' "
                "'actor_rollout_ref.actor.profile_ranks=[0]' (docs/user_guide.md)"]
    out_dir = shell_quote(plan.output_dir)
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
        # a served model's ranks are its replicas' servers: say so, with their GPUs
        servers = group.servers_per_replica
        name = (f"{group.name} ({group.engine} replicas of {group.replica_span} GPU(s)"
                + (f", {servers} servers each" if servers > 1 else "") + ")"
                if group.served else group.name)
        if not procs:
            table.add_row(_text(name), str(group.world_size), "-", "-", "-", "-")
            continue
        ranks = ", ".join(_served_rank(group, p.rank) if group.served else str(p.rank)
                          for p in procs)
        roles = "; ".join(sorted({",".join(p.selected_roles) for p in procs}))
        modes = ",".join(sorted({p.mode for p in procs}))
        counts = ",".join(sorted({str(len(p.windows)) for p in procs}))
        table.add_row(_text(name), str(group.world_size), ranks, _text(roles), modes, counts)
    return table


def _served_rank(group: GroupTopology, rank: int) -> str:
    """A served group's rank: the replica's server it is (where a replica has several) and
    its GPUs (global ranks)."""
    servers = group.servers_per_replica
    where = f"replica {rank // servers} server {rank % servers}, " if servers > 1 else ""
    return f"{rank} ({where}GPUs {rank * group.rank_span}-{(rank + 1) * group.rank_span - 1})"


def _print_commands(plan: ProfilePlan, console: Console) -> None:
    console.print(_text(("Launch commands", "bold"), " (only these processes are wrapped; "
                        "the interpreter follows):"))
    if plan.controller.launch_argv:
        command = _command(plan.controller.launch_argv, plan.controller.launch_env)
        console.print(_text(f"  controller: {command}"), soft_wrap=True)
    for proc in plan.processes:
        if proc.launch_argv:
            console.print(_text(f"  {proc.group} rank {proc.rank}: "
                                f"{_command(proc.launch_argv, proc.launch_env)}"),
                          soft_wrap=True)
        else:
            console.print(_text(f"  {proc.group} rank {proc.rank}: in-process {proc.backend} "
                                "profiler"), soft_wrap=True)


def _command(argv, env) -> str:
    """The launch as one shell line (visible, runnable): ``K=V ... argv``."""
    prefix = " ".join(f"{k}={shell_quote(v)}" for k, v in sorted(env.items()))
    return (prefix + " " if prefix else "") + shell_join(argv)


def _files_table(plan: ProfilePlan) -> Table:
    table = Table()
    table.add_column("step(s)")
    table.add_column("file")
    for report in sorted(plan.reports, key=lambda r: (r.steps, r.group, r.rank, r.path)):
        table.add_row(paths.step_text(report.steps), _text(report.path))
    if plan.controller.launch_argv:
        for window in plan.controller.windows:
            table.add_row(paths.step_text(window), _text(
                f"{paths.CONTROLLER_DIR}/controller_{{host}}_{{pid}}[.<n>].nsys-rep"))
    return table
