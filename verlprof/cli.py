"""``verlprof``: plan, check, demo and report from the command line.

Every error prints one line on stderr (``verlprof: <key>: <problem>``). Exit codes, the same
for every subcommand (docs/user_guide.md#exit-codes): 0 done; 1 the run or the command failed
for a reason outside the config (Ray could not start, a file could not be written; set
``VERLPROF_DEBUG=1`` for the traceback); 2 bad usage or a bad config (nothing was started);
3 ``report --strict`` and a report is not ok; 130 interrupted; 143 terminated (SIGTERM).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:
    import argparse

# argparse, verlprof.errors and verlprof.safe_text load in the functions that use them

EXIT_FAILED = 1
EXIT_USAGE = 2
DEBUG_ENV = "VERLPROF_DEBUG"

EPILOG = """typical use:
  verlprof plan --config trainer.yaml 'trainer.profile_steps=[3,4]' \\
      'actor_rollout_ref.actor.profile_ranks=[0]'      # what will happen; starts nothing
  (run the trainer with the same config and overrides)
  verlprof report <output_dir>                          # tables, stragglers, timeline
  nsys-ui <output_dir>/step0003/actor_rollout_ref/rank0/<report>.nsys-rep

examples:
  verlprof plan --config trainer_configs/ppo_trainer.yaml 'trainer.profile_steps=[1,2,5]'
  verlprof plan --config trainer_configs/ppo_trainer.yaml --json > plan.json
  verlprof check --config my_trainer.yaml 'critic.profile_ranks=[0]'
  verlprof demo 'trainer.profile_steps=[2,3]'
  verlprof init-config my_trainer.yaml                  # the demo's config, to start from
  verlprof report outputs/ppo_demo/profiling
  verlprof trace outputs/ppo_demo/profiling --steps 2   # one Perfetto trace of the run
  verlprof capture outputs/ppo_demo/profiling --steps next:2 --ranks 0   # a running job

docs: docs/user_guide.md (guide), docs/config_reference.md (every key)
"""


def _parser() -> argparse.ArgumentParser:
    import argparse

    class OneLineParser(argparse.ArgumentParser):
        """Usage errors in one line, like every other error (argparse prints the usage too)."""

        def error(self, message: str):
            from verlprof.safe_text import visible

            self.exit(EXIT_USAGE, f"verlprof: {visible(message)} (see {self.prog} --help)\n")

    parser = OneLineParser(
        prog="verlprof",
        description="Profiling controller for Ray-based RL trainers (verl style): plan which\n"
                    "steps and ranks are profiled, check a config, run the CPU demo, and\n"
                    "summarise a run's reports.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    from verlprof.version import __version__

    parser.add_argument("--version", action="version", version=f"verlprof {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser, required: bool = True) -> None:
        p.add_argument("--config", metavar="FILE",
                       help="trainer YAML: verlprof's keys, verl's per-role 'profiler' "
                            "blocks or verl's 'global_profiler' (docs/migrating_from_verl.md); "
                            "also accepted as the first positional argument"
                            + ("" if required else " (default: the demo's own config)"))
        p.set_defaults(config_required=required)
        p.add_argument("overrides", nargs="*", metavar="[FILE] KEY=VALUE",
                       help="Hydra dotlist overrides as verl users type them, e.g. "
                            "'trainer.profile_steps=[3,4]' "
                            "'actor_rollout_ref.actor.profile_ranks=[0]'; prefix a key the "
                            "YAML lacks with +. NRL_* environment variables apply too "
                            "(docs/nemo_rl_env.md)")

    plan = sub.add_parser(
        "plan", help="print what will be profiled, how, and which files appear",
        description="Load the trainer config with the overrides, validate it, and print the "
                    "plan: the profiled ranks of each worker group and their mode, the exact "
                    "launch command of each wrapped process, and every report that will "
                    "appear. Starts nothing.")
    with_config(plan)
    plan.add_argument("--json", action="store_true",
                      help="print the whole plan as JSON (for scripts)")
    check = sub.add_parser(
        "check", help="validate a config; print nothing but warnings on success",
        description="Validate the trainer config with the overrides and plan it. Prints one "
                    "line and exits 0 when it is valid (warnings on stderr); exits 2 with "
                    "one line naming the bad key otherwise.")
    with_config(check)
    demo = sub.add_parser(
        "demo", help="run the CPU demo PPO trainer with profiling on",
        description="Run verlprof's small PPO trainer (actor_rollout_ref, critic and reward "
                    "model worker groups) on CPU over Ray, profiled as the config says "
                    "(default: the config shipped with verlprof, printed by 'verlprof "
                    "init-config -'), then summarise it like 'verlprof report'. Uses nsys "
                    "when it is installed, else the torch profiler. Under a minute on 2 "
                    "cores.")
    with_config(demo, required=False)
    demo.add_argument("--ray-address", metavar="ADDR", default=None,
                      help="run on this existing Ray cluster (default: start a local one)")
    init = sub.add_parser(
        "init-config", help="write the demo's trainer config to a file, to start your own from",
        description="Write a copy of the trainer config that 'verlprof demo' runs by default "
                    "(verl-style PPO, every profiling key commented) to PATH, or print it "
                    "with '-'. An existing file is kept unless --force.")
    init.add_argument("path", metavar="PATH", help="file to write; '-' prints the config")
    init.add_argument("--force", action="store_true", help="overwrite PATH if it exists")
    from verlprof.report.cli import add_report_subcommand

    add_report_subcommand(sub)
    from verlprof.trace.cli import add_trace_subcommand

    add_trace_subcommand(sub)
    from verlprof.runtime.capture_cli import add_capture_subcommands

    add_capture_subcommands(sub)  # capture, status, collect: a running or dead job
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    args = parser.parse_args(given)
    if hasattr(args, "config_required"):
        _config_from_positional(parser, args)
    from verlprof.errors import ConfigError, ProfilingRuntimeError
    from verlprof.runtime.signals import ProfilingTerminated

    try:
        return _dispatch(args)
    except (ConfigError, ProfilingRuntimeError) as err:
        print(f"verlprof: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except ProfilingTerminated:
        print("verlprof: terminated (SIGTERM); open windows were stopped and the reports "
              "finalised", file=sys.stderr)
        return 128 + 15
    except KeyboardInterrupt:
        print("verlprof: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # anything else: one line too, the traceback on request
        import os

        if os.environ.get(DEBUG_ENV):
            raise
        from verlprof.safe_text import one_line, visible

        text = one_line(err) or type(err).__name__
        prefix = "" if text.startswith(f"{args.command}: ") else f"{args.command}: "
        kind = "" if type(err).__name__ == "RayStartError" else f"{type(err).__name__}: "
        print(f"verlprof: {prefix}{kind}{visible(text)} (set {DEBUG_ENV}=1 for the "
              "traceback)", file=sys.stderr)
        return EXIT_FAILED


def _config_from_positional(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``verlprof check FILE KEY=VALUE ...`` as well as ``--config FILE``: a first positional
    argument that is not an override is the config."""
    first = args.overrides[0] if args.overrides else ""
    if first and "=" not in first and not first.startswith(("~", "+")):
        if args.config is not None:
            parser.error(f"{args.command}: {first!r} is not KEY=VALUE (the config is "
                         f"--config {args.config})")
        args.config = args.overrides.pop(0)
    if args.config is None and args.config_required:
        parser.error(f"{args.command}: give the trainer YAML: verlprof {args.command} FILE "
                     "[KEY=VALUE ...] (or --config FILE)")


def _one_line(err: BaseException) -> str:
    """The error's own message: one raised in a Ray worker carries a traceback around it.
    It may quote a name or value from the config: shown visibly, never as terminal codes."""
    from verlprof.errors import ConfigError, ProfilingRuntimeError
    from verlprof.safe_text import one_line, visible

    cause = getattr(err, "cause", None)
    if isinstance(cause, (ConfigError, ProfilingRuntimeError)):
        err = cause
    return visible(one_line(err))


def _running_state(output_dir: str, manifest) -> str:
    """Where the run of a manifest still marked running stands, as ``verlprof status`` says:
    still going, or ended without finalize (then with the ``verlprof collect`` to run)."""
    from verlprof.runtime.leftovers import state_of
    from verlprof.safe_text import visible

    return visible(state_of(output_dir, manifest))


def _note_existing_run(plan) -> None:
    """What a run would meet in its output directory today (another run, or one going on)."""
    from verlprof.runtime.ownership import POLICY_KEY, inspect
    from verlprof.safe_text import visible

    found = inspect(plan.output_dir) if plan.enabled else None
    if found is None:
        return
    policy = plan.policy.existing_run
    outcome = {"refuse": "a run started now is refused",
               "move_aside": "a run started now moves it into <output_dir>/<its run id>/ and "
                             "writes into <output_dir>",
               "new_subdir": "a run started now writes into <output_dir>/<run id>/",
               "reuse": "a run started now writes over it (refused while that run goes on)"}
    print(f"note: {visible(found)}; with {POLICY_KEY}={policy} {outcome[policy]}")


def _check_output_dir(plan) -> None:
    """``check``: the output directory is a writable directory, or can be created. Probed for
    real (``os.access`` says yes to root everywhere): a file made and removed in it, or its
    first missing directory made and removed; nothing is left behind."""
    import os
    import tempfile

    from verlprof.errors import ConfigError

    if not plan.enabled:
        return
    target = os.path.abspath(plan.output_dir)
    probe = target
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    try:
        if not os.path.isdir(probe):
            raise NotADirectoryError(f"{probe} is not a directory")
        if probe == target:
            with tempfile.TemporaryFile(dir=target):
                pass
        else:
            first_missing = os.path.join(probe, os.path.relpath(target, probe).split(os.sep)[0])
            os.mkdir(first_missing)
            os.rmdir(first_missing)
    except OSError as err:
        raise ConfigError("trainer.profiler.output_dir", f"{target} cannot be created or "
                                                        f"written: {err.strerror or err}") \
            from None


def _dispatch(args: argparse.Namespace) -> int:
    from verlprof.safe_text import visible

    if args.command in ("plan", "check"):
        from verlprof.config import load_config
        from verlprof.plan import build_plan

        loaded = load_config(args.config, args.overrides)
        plan = build_plan(loaded.profiling, loaded.topology)
        warnings = list(dict.fromkeys(list(loaded.warnings) + list(plan.warnings)))
        if args.command == "check":
            _check_output_dir(plan)
            for warning in warnings:
                print(f"verlprof: warning: {visible(warning)}", file=sys.stderr)
            print(f"verlprof: {args.config}: ok ({len(plan.reports)} report(s) planned)")
            return 0
        if args.json:
            print(plan.to_json())
            return 0
        from verlprof.plan.render import render_plan

        render_plan(plan)
        for warning in loaded.warnings:
            if warning not in plan.warnings:
                print(f"warning: {visible(warning)}")
        _note_existing_run(plan)
        return 0
    if args.command == "report":
        from verlprof.report.cli import run_report_command

        args.running_state = _running_state  # report may not import runtime (its stage)
        return run_report_command(args)
    if args.command == "trace":
        from verlprof.trace.cli import run_trace_command

        return run_trace_command(args)
    if args.command in ("capture", "status", "collect"):
        from verlprof.runtime.capture_cli import run_capture_command

        return run_capture_command(args)
    if args.command == "demo":
        from verlprof.demo.run import run_demo

        return run_demo(args.config, args.overrides, ray_address=args.ray_address)
    if args.command == "init-config":
        from verlprof.demo.default_config import STDOUT, write_config_copy

        write_config_copy(args.path, force=args.force)
        if args.path != STDOUT:  # '-' keeps stdout the config alone, for a pipe
            import shlex

            path = shlex.quote(args.path)
            print(f"verlprof: wrote {args.path} (the demo's trainer config)")
            print("next steps:")
            print(f"  edit: {path} (trainer.profile_steps, <role>.profile_ranks, "
                  "trainer.profiler.tool)")
            print(f"  plan: verlprof plan --config {path}")
            print(f"  run:  verlprof demo --config {path}")
        return 0
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
