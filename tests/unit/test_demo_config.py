"""The demo's default trainer config ships inside the package: ``verlprof demo`` finds it
without a repository, says which file it used, and ``verlprof init-config`` writes a copy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from verlprof.cli import main
from verlprof.demo.default_config import DEFAULT_CONFIG, default_config_text
from verlprof.demo.run import plan_demo

ROOT = Path(__file__).resolve().parents[2]


def test_the_repository_config_is_the_package_file():
    """One source of truth: trainer_configs/ppo_trainer.yaml (a project rule) is a link to
    the package file, so the two cannot drift."""
    repo = ROOT / "trainer_configs" / "ppo_trainer.yaml"
    assert repo.is_symlink(), "trainer_configs/ppo_trainer.yaml must link to the package file"
    assert repo.resolve() == DEFAULT_CONFIG
    assert DEFAULT_CONFIG.parent == ROOT / "verlprof" / "demo"


def test_setup_cfg_ships_it_as_package_data():
    text = (ROOT / "setup.cfg").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("verlprof = "))
    assert "demo/*.yaml" in line


def test_demo_plans_from_any_directory_without_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no trainer_configs/ here, as after `pip install verlprof`
    loaded, plan, _ = plan_demo(None, ["trainer.total_training_steps=1",
                                       "trainer.profile_steps=[1]"])
    assert loaded.raw["trainer"]["experiment_name"] == "ppo_demo"
    assert plan.output_dir == str(tmp_path / "outputs" / "ppo_demo" / "profiling")


def test_a_missing_config_names_the_way_out(tmp_path, capsys):
    rc = main(["demo", "--config", str(tmp_path / "nope.yaml")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "nope.yaml not found" in err and "init-config" in err


def test_init_config_writes_the_shipped_config_and_says_what_next(tmp_path, capsys):
    dest = tmp_path / "my_trainer.yaml"
    assert main(["init-config", str(dest)]) == 0
    assert dest.read_text() == default_config_text() == DEFAULT_CONFIG.read_text()
    out = capsys.readouterr().out
    assert f"verlprof: wrote {dest}" in out
    assert f"plan: verlprof plan --config {dest}" in out


def test_init_config_keeps_an_existing_file_unless_forced(tmp_path, capsys):
    dest = tmp_path / "mine.yaml"
    dest.write_text("trainer: {profile_steps: [9]}\n")
    assert main(["init-config", str(dest)]) == 2
    err = capsys.readouterr().err
    assert err == f"verlprof: {dest}: exists; pass --force to overwrite it, or choose another " \
                  "name\n"
    assert dest.read_text() == "trainer: {profile_steps: [9]}\n"
    assert main(["init-config", str(dest), "--force"]) == 0
    assert dest.read_text() == default_config_text()


def test_init_config_dash_prints_only_the_config(capsys):
    assert main(["init-config", "-"]) == 0
    assert capsys.readouterr().out == default_config_text()


@pytest.mark.parametrize("where", ["dir", "missing_parent"])
def test_init_config_refuses_what_it_cannot_write_in_one_line(tmp_path, capsys, where):
    dest = str(tmp_path) if where == "dir" else os.path.join(str(tmp_path), "no", "x.yaml")
    assert main(["init-config", dest]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"verlprof: {dest}: ") and err.count("\n") == 1


def test_a_named_nsys_that_is_not_there_is_an_error_not_a_fallback(tmp_path):
    """The demo falls back to the torch profiler only when nsys is simply not installed; an
    executable the user named and got wrong is one line naming its key (before, the run went
    on with torch and said 'nsys is not installed here')."""
    from verlprof.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        plan_demo(None, [f"trainer.profiler.output_dir={tmp_path}",
                         f"+trainer.profiler.nsys.executable={tmp_path}/no/nsys"])
    assert str(info.value) == (f"trainer.profiler.nsys.executable: nsys executable "
                               f"'{tmp_path}/no/nsys' not found")
