"""``python -m verlprof.bridges.verl`` takes the command line of ``python -m
verl.trainer.main_ppo``: Hydra's flags, ``hydra.*`` overrides, a user's own config directory
extending verl's ``ppo_trainer``, ``--plan`` anywhere, and the launch lines of verl's own
example scripts (verl 0.9.1's real config and Hydra; no Ray)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
import yaml

from tests.helpers import require_verl

require_verl()

from verlprof.bridges.verl.command_line import compose, entry_file, read_command_line  # noqa: E402
from verlprof.bridges.verl.launch import main, prepare  # noqa: E402

SELECTION = ["global_profiler.tool=nsys", "global_profiler.steps=[2]",
             "actor_rollout_ref.actor.profiler.enable=true",
             "actor_rollout_ref.actor.profiler.ranks=[0]"]
"""A profiling selection in verl's keys: the actor's rank 0 on step 2."""

USER_YAML = {
    "hydra": {"searchpath": ["pkg://verl.trainer.config"]},  # as verl's recipes find verl's
    "defaults": ["ppo_trainer", "_self_"],
    "trainer": {"n_gpus_per_node": 4},
    "global_profiler": {"tool": "nsys", "steps": [2]},
    "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "ranks": [3]}}},
}
"""A user's own trainer config: verl's ``ppo_trainer`` through ``defaults``, with its own
values (4 GPUs, the actor's rank 3 profiled on step 2)."""


@pytest.fixture
def user_config(tmp_path):
    folder = tmp_path / "my_configs"
    folder.mkdir()
    (folder / "my_trainer.yaml").write_text(yaml.safe_dump(USER_YAML))
    return folder


def _planned(argv):
    """(plan, config) of ``argv`` as the launcher composes it."""
    config = compose(read_command_line(argv))
    return prepare(config), config


def _selected(plan):
    return [(p.group, p.rank) for p in plan.processes if p.windows]


def test_user_config_path_absolute_and_relative_with_config_name(user_config, tmp_path):
    """A relative ``--config-path`` is relative to ``main_ppo.py``'s directory, as Hydra
    resolves it for ``python -m verl.trainer.main_ppo`` (not to the working directory)."""
    out = f"global_profiler.save_path={tmp_path / 'out'}"
    relative = os.path.relpath(user_config, os.path.dirname(entry_file()))
    for flags in (["--config-path", str(user_config), "--config-name", "my_trainer"],
                  [f"--config-path={relative}", "--config-name=my_trainer.yaml"],
                  ["-cp", relative, "-cn", "my_trainer"]):
        plan, config = _planned([*flags, out])
        assert config.trainer.n_gpus_per_node == 4, flags  # the user's value over verl's
        assert config.algorithm.adv_estimator == "gae"  # verl's, through defaults
        assert [g.world_size for g in plan.groups if g.name == "global_pool"] == [4]
        assert ("global_pool", 3) in _selected(plan), flags
        assert plan.step_windows == ((2,),)


def test_config_dir_is_relative_to_the_working_directory(user_config, monkeypatch):
    monkeypatch.chdir(user_config.parent)
    plan, config = _planned(["-cd", "my_configs", "-cn", "my_trainer"])
    assert config.trainer.n_gpus_per_node == 4 and ("global_pool", 3) in _selected(plan)


def test_verls_own_config_path_and_name_as_its_scripts_write_them():
    """``--config-path=config`` and ``./config`` are verl's ``verl/trainer/config``."""
    line = read_command_line(["--config-path=./config", "--config-name=ppo_megatron_trainer"])
    assert line.config_path == os.path.join(os.path.dirname(entry_file()), "config")
    plan, config = _planned(["--config-path=config", "--config-name=ppo_megatron_trainer.yaml",
                             *SELECTION])
    assert config.actor_rollout_ref.actor.strategy == "megatron"
    assert ("global_pool", 0) in _selected(plan)


def test_plan_anywhere_hydra_overrides_and_the_entry_word(user_config, tmp_path, capsys):
    out = tmp_path / "out"
    flags = ["--config-path", str(user_config), "--config-name", "my_trainer"]
    lines = (["--plan", *flags, f"global_profiler.save_path={out}", "hydra.run.dir=/tmp/x"],
             ["verl.trainer.main_ppo", *flags, "--plan", f"global_profiler.save_path={out}",
              "hydra.job.chdir=false"],
             ["-m", "verl.trainer.main_ppo", *flags, f"global_profiler.save_path={out}",
              "hydra.run.dir=/tmp/x", "--plan"])
    for argv in lines:
        assert main(argv) == 0, argv
        printed = capsys.readouterr()
        assert printed.err == "" and "verlprof plan tool=nsys" in printed.out, argv
        assert str(out) in printed.out
    assert not out.exists()  # --plan runs nothing


def test_main_ppo_composes_what_the_launcher_planned(user_config, capsys):
    """Hydra's own ``@hydra.main`` of ``main_ppo``, given the line the launcher hands it
    (``--cfg`` shows instead of running), composes the config the plan was made from."""
    argv = ["-cp", os.path.relpath(user_config, os.path.dirname(entry_file())),
            "-cn", "my_trainer", "hydra.run.dir=/tmp/verlprof-hydra-run", *SELECTION[2:]]
    from omegaconf import OmegaConf

    planned = OmegaConf.to_container(compose(read_command_line(argv)))
    assert main([*argv, "--cfg", "job"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == planned
    assert main([*argv, "--cfg", "hydra"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["hydra"]["run"]["dir"] == "/tmp/verlprof-hydra-run"


def test_the_run_is_main_ppos_own_on_the_users_config(user_config, tmp_path):
    """Without ``--plan`` the launcher hands the line to verl's ``main_ppo``: Hydra's run
    (``hydra.run.dir``, its ``.hydra`` record) and verl's own checks, on the user's config
    found through a relative ``-cp``. verl's check fails here before anything starts (4 GPUs
    from the user's YAML, a batch of 3), as ``python -m verl.trainer.main_ppo`` would."""
    import subprocess
    import sys

    run_dir = tmp_path / "hydra_run"
    argv = ["-cp", os.path.relpath(user_config, os.path.dirname(entry_file())),
            "-cn", "my_trainer", f"hydra.run.dir={run_dir}", "data.train_batch_size=3",
            f"global_profiler.save_path={tmp_path / 'out'}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "verlprof.bridges.verl", *argv], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "real_train_batch_size (3) must be divisible by minimal possible batch size (4)" \
        in proc.stderr
    recorded = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
    assert recorded["trainer"]["n_gpus_per_node"] == 4
    assert recorded["data"]["train_batch_size"] == 3
    assert yaml.safe_load((run_dir / ".hydra" / "hydra.yaml").read_text())[
        "hydra"]["job"]["config_name"] == "my_trainer"


@pytest.mark.parametrize("argv,line", [
    (["--multirun", "trainer.nnodes=1,2"], "verlprof: --multirun: the launcher runs one job"),
    (["-m", "trainer.nnodes=1,2"], "verlprof: --multirun: the launcher runs one job"),
    (["verl.trainer.main_ppo_v0", "trainer.nnodes=1"],
     "verlprof: verl.trainer.main_ppo_v0: the launcher runs verl.trainer.main_ppo"),
    (["trainer.nnodes=1", "--config-name=ppo_trainer", "trainer.nnodes=2"],
     "verlprof: unrecognized arguments: trainer.nnodes=2 (Hydra takes its flags before"),
    (["--config-name=no_such_trainer"],
     "verlprof: cannot compose verl's config: Cannot find primary config 'no_such_trainer'"),
    (["--config-dir=/no/such/dir"], "verlprof: --config-dir=/no/such/dir: no such directory"),
    (["--config-path=config/ppo_trainer.yaml"], "verlprof: --config-path=config/ppo_trainer"),
    (["trainer.nnodes=1,2"], "verlprof: cannot compose verl's config: Ambiguous value"),
])
def test_what_main_ppo_cannot_run_is_refused_in_one_line(argv, line, capsys):
    assert main([*argv, "--plan"]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and printed.err.startswith(line), printed.err
    assert printed.err.count("\n") == 1


def test_the_other_modules_refusal_says_how_to_attach():
    from verlprof.bridges.verl.command_line import CommandLineError

    with pytest.raises(CommandLineError) as refused:
        read_command_line(["-m", "verl.trainer.main_ppo_v0"])
    assert str(refused.value) == (
        "verl.trainer.main_ppo_v0: the launcher runs verl.trainer.main_ppo only (its "
        "TaskRunnerV1 with trainer.use_v1=true, verl.trainer.main_ppo_v0's TaskRunner with "
        "trainer.use_v1=false); to profile another driver, call "
        "verlprof.bridges.verl.attach(config) in it before its trainer starts")


# -- the launch lines of verl's example scripts -------------------------------------------------

LINES = Path(__file__).resolve().parents[1] / "fixtures" / "verl" / "example_launch_lines.txt"


def _example_lines():
    """(source, expected answer, the arguments after ``-m verl.trainer.main_ppo``)."""
    found = []
    for block in LINES.read_text().split("\n\n"):
        notes = dict(line[2:].split(": ", 1) for line in block.splitlines()
                     if line.startswith(("# source: ", "# expect: ")))
        if "source" not in notes:
            continue
        command = "\n".join(line for line in block.splitlines() if not line.startswith("#"))
        argv = shlex.split(command.replace("\\\n", " "))  # the shell's line continuations
        at = argv.index("verl.trainer.main_ppo")
        assert argv[at - 1] == "-m", notes["source"]
        found.append(pytest.param(notes["expect"], argv[at + 1:], id=notes["source"]))
    return found


@pytest.mark.parametrize("expect,args", _example_lines())
def test_verls_example_launch_lines_plan_with_a_selection_added(expect, args, tmp_path,
                                                                 capsys):
    out = tmp_path / "out"
    rc = main([*args, *SELECTION, f"global_profiler.save_path={out}", "--plan"])
    printed = capsys.readouterr()
    if expect == "plans":
        assert (rc, printed.err) == (0, ""), printed.err
        assert "verlprof plan tool=nsys" in printed.out and "steps: [2]" in printed.out
        assert "global_pool" in printed.out
    else:  # a key newer than the installed verl: one line naming it, as verl would refuse
        assert (rc, printed.out, printed.err) == (2, "", f"{expect}\n")
