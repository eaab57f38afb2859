"""``verlprof plan``'s tables over hostile names (issue 19, "names are data"): a group or role
name, an output directory, a launch argument or environment value, a warning and a finish
hook command from the config never act as rich markup or terminal codes; each appears in its
visible form (commands and paths as shell words that still run)."""

from __future__ import annotations

import dataclasses
import io

from hypothesis import HealthCheck, given, settings
from rich.console import Console

from tests.hostile import names
from tests.unit.test_safe_text import hidden
from verlprof.config.schema import ComponentConfig, ComponentsConfig, ProfilingConfig
from verlprof.config.topology import GroupTopology, Topology
from verlprof.plan import build_plan
from verlprof.plan.render import next_steps, render_plan
from verlprof.plan_model import FinishHookPlan
from verlprof.safe_text import shell_quote, visible

GROUP = "actor_rollout_ref"


def hostile_plan(name: str):
    """A real plan (nsys: launch commands and a files table), then every text field a config
    can fill set to ``name``."""
    config = ProfilingConfig(steps=(1,), tool="nsys", output_dir=f"/tmp/{name}",
                             components=ComponentsConfig(actor=ComponentConfig(ranks=(0,))))
    plan = build_plan(config, Topology.of({GROUP: 2}, cuda=False))
    process = dataclasses.replace(
        plan.processes[0], group=name, selected_roles=(name,),
        launch_argv=plan.processes[0].launch_argv + (f"--tag={name}",),
        launch_env={"VERLPROF_NAME": name})
    report = dataclasses.replace(plan.reports[0], path=f"step0001/{name}/rank0/r.nsys-rep")
    process = dataclasses.replace(process, windows=(dataclasses.replace(
        process.windows[0], report=report),))
    return dataclasses.replace(
        plan, groups=(GroupTopology(name=name, roles=(name,), world_size=2),),
        processes=(process,), warnings=(f"warning about {name}",),
        finish_hook=FinishHookPlan(cmd=f"upload {name}"))


@given(names)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_plan_tables_show_every_name_visibly_and_never_as_markup(name):
    plan = hostile_plan(name)
    console = Console(file=io.StringIO(), width=100_000, color_system=None)
    render_plan(plan, console)
    text = console.file.getvalue()
    assert not hidden(text.replace("\n", ""))
    assert f"warning: warning about {visible(name)}" in text
    assert f"output_dir: /tmp/{visible(name)}" in text
    assert shell_quote(f"--tag={name}") in text and shell_quote(name) in text  # argv, env
    assert f"/bin/sh -c {shell_quote(f'upload {name}')}" in text
    assert f"then: verlprof report {shell_quote(f'/tmp/{name}')}" in "\n".join(next_steps(plan))
    if len(visible(name)) < 300:  # a table cell this long is cut by rich itself
        assert f"step0001/{visible(name)}/rank0/r.nsys-rep" in text


def test_brackets_in_an_output_dir_print_as_written():
    plan = hostile_plan("[bold]x[/]")
    console = Console(file=io.StringIO(), width=300, color_system=None)
    render_plan(plan, console)
    text = console.file.getvalue()
    assert "output_dir: /tmp/[bold]x[/]" in text
    assert "Reports that will appear under /tmp/[bold]x[/]" in text
