"""Every subcommand's errors are one line with a documented exit code (docs/user_guide.md,
"Exit codes"); `--version`; the config as `--config FILE` or the first positional argument;
`check` refuses an output_dir that cannot be created."""

from __future__ import annotations

import os

import pytest

from verlprof import __version__
from verlprof.cli import main

CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "trainer_configs",
                      "ppo_trainer.yaml")


def run(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as exit_:
        rc = exit_.code
    out, err = capsys.readouterr()
    return rc, out, err


def test_version(capsys):
    rc, out, _ = run(["--version"], capsys)
    assert (rc, out) == (0, f"verlprof {__version__}\n")


@pytest.mark.parametrize("argv", [["check", "--config", CONFIG], ["check", CONFIG]])
def test_the_config_is_a_flag_or_the_first_positional_argument(argv, capsys):
    rc, out, _ = run([*argv, "critic.profile_ranks=[0]"], capsys)
    assert rc == 0 and "ok (" in out


@pytest.mark.parametrize("argv, message", [
    (["plan", "--bogus"], "verlprof: unrecognized arguments: --bogus"),
    (["check"], "verlprof: check: give the trainer YAML"),
    (["demo", "--config", CONFIG, "stray"], "verlprof: demo: 'stray' is not KEY=VALUE"),
    (["nosuch"], "verlprof: argument command: invalid choice"),
    (["report", "--threshold", "0", "x"], "verlprof: argument --threshold: must be > 0"),
])
def test_usage_errors_are_one_line_exit_2(argv, message, capsys):
    rc, out, err = run(argv, capsys)
    assert rc == 2 and err.startswith(message) and err.count("\n") == 1 and not out


@pytest.mark.parametrize("output_dir, why", [
    ("/proc/no/such", "cannot be created or written"),
    ("{file}/out", "is not a directory"),
])
def test_check_refuses_an_output_dir_that_cannot_be_created(tmp_path, output_dir, why, capsys):
    (tmp_path / "file").write_text("")
    target = output_dir.format(file=tmp_path / "file")
    rc, _, err = run(["check", CONFIG, f"trainer.profiler.output_dir={target}"], capsys)
    assert rc == 2 and err.startswith("verlprof: trainer.profiler.output_dir: ") and why in err
    fresh = tmp_path / "new" / "a"
    rc, _, _ = run(["check", CONFIG, f"trainer.profiler.output_dir={fresh}"], capsys)
    assert rc == 0 and not (tmp_path / "new").exists()  # probed, nothing left behind


def test_any_other_failure_is_one_line_exit_1_and_a_ray_start_failure_says_what_to_do(
        monkeypatch, capsys):
    from verlprof.demo import run as demo_run

    def fail(*args, **kwargs):
        raise demo_run.RayStartError(None, TimeoutError("Timed out after 60 s\nwaiting for"))

    monkeypatch.setattr(demo_run, "run_demo", fail)
    rc, _, err = run(["demo"], capsys)
    assert rc == 1 and err.count("\n") == 1
    assert err.startswith("verlprof: demo: could not start or reach a local Ray cluster "
                          "(TimeoutError: Timed out after 60 s waiting for)")
    assert "--ray-address" in err and "VERLPROF_DEBUG=1" in err
    monkeypatch.setattr(demo_run, "run_demo", lambda *a, **k: 1 / 0)
    rc, _, err = run(["demo"], capsys)
    assert (rc, err.count("\n")) == (1, 1) and "demo: ZeroDivisionError: division by zero" in err
    monkeypatch.setenv("VERLPROF_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["demo"])


@pytest.mark.parametrize("command", ["status", "collect", "report"])
def test_a_directory_command_on_a_file_or_nothing_says_which_in_one_line(command, tmp_path,
                                                                        capsys):
    """Before, ``collect`` on a file printed ``NotADirectoryError: [Errno 20] ...`` (exit 1)."""
    afile = tmp_path / "afile"
    afile.write_text("")
    for path, why in ((afile, "not a directory"), (tmp_path / "nope", "no such directory")):
        assert main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert err == f"verlprof: {command}: {path}: {why}\n"
