"""``verlprof``: plan, check, demo and report from the command line.

Every error a user can cause prints one line (``verlprof: <key>: <problem>``) and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from verlprof.errors import ConfigError, ProfilingRuntimeError

EXIT_USAGE = 2

EPILOG = """examples:
  verlprof plan --config trainer_configs/ppo_trainer.yaml 'trainer.profile_steps=[1,2,5]'
  verlprof plan --config trainer_configs/ppo_trainer.yaml --json > plan.json
  verlprof check --config my_trainer.yaml critic.profile_ranks=[0]
  verlprof demo 'trainer.profile_steps=[2,3]'
  verlprof report outputs/ppo_demo/profiling
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="verlprof", description="Profiling controller for Ray-based RL trainers.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser, required: bool = True) -> None:
        p.add_argument("--config", required=required, metavar="FILE",
                       help="trainer YAML (seed, verl 'profiler' or 'global_profiler' layout)")
        p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                       help="dotlist overrides as verl users type them, e.g. "
                            "'trainer.profile_steps=[1,2]' critic.profile_ranks=[0]")

    plan = sub.add_parser("plan", help="print what will be profiled, how, and which files appear")
    with_config(plan)
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    check = sub.add_parser("check", help="validate a config; print nothing but warnings on success")
    with_config(check)
    demo = sub.add_parser("demo", help="run the CPU demo PPO trainer with profiling on")
    with_config(demo, required=False)
    from verlprof.report.cli import add_report_subcommand

    add_report_subcommand(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _dispatch(args)
    except (ConfigError, ProfilingRuntimeError) as err:
        print(f"verlprof: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("verlprof: interrupted", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command in ("plan", "check"):
        from verlprof.config import load_config
        from verlprof.plan import build_plan

        loaded = load_config(args.config, args.overrides)
        plan = build_plan(loaded.profiling, loaded.topology)
        warnings = list(dict.fromkeys(list(loaded.warnings) + list(plan.warnings)))
        if args.command == "check":
            for warning in warnings:
                print(f"verlprof: warning: {warning}", file=sys.stderr)
            print(f"verlprof: {args.config}: ok ({len(plan.reports)} report(s) planned)")
            return 0
        if args.json:
            print(plan.to_json())
            return 0
        from verlprof.plan_render import render_plan

        render_plan(plan)
        for warning in loaded.warnings:
            if warning not in plan.warnings:
                print(f"warning: {warning}")
        return 0
    if args.command == "report":
        from verlprof.report.cli import run_report_command

        return run_report_command(args)
    if args.command == "demo":
        from verlprof.demo.run import run_demo

        return run_demo(args.config, args.overrides)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
