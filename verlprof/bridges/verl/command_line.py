"""The command line of ``python -m verl.trainer.main_ppo``, read as its ``@hydra.main`` reads it.

verl's entry is ``@hydra.main(config_path="config", config_name="ppo_trainer")`` on
``verl/trainer/main_ppo.py``. The launcher takes the same line, so it reads it with Hydra's own
parser and composes the config with Hydra's own search path and loader, as ``main_ppo`` would:

* ``--config-path`` / ``-cp``: absolute, ``pkg://``, or relative to the directory of
  ``main_ppo.py`` (Hydra resolves a relative path against the file declaring ``@hydra.main``,
  not the working directory: verl's scripts write ``--config-path=config`` for verl's own
  ``verl/trainer/config``);
* ``--config-name`` / ``-cn``: the primary config (``ppo_trainer`` unless given);
* ``--config-dir`` / ``-cd``: a directory put first on the search path (relative to the
  working directory);
* overrides, ``hydra.*`` ones included (``hydra.run.dir=...``), composed in Hydra's run mode.

Two words are the launcher's own: ``--plan`` anywhere, and the module it runs
(``verl.trainer.main_ppo``) written as the first argument, alone or after ``-m``. A run of many
jobs (``--multirun`` / ``-m``, ``--experimental-rerun``) and another module are refused in one
line.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import re
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from verlprof.errors import ConfigError

ENTRY = "verl.trainer.main_ppo"
"""The module the launcher runs; its ``@hydra.main`` arguments follow."""
ENTRY_CONFIG_PATH = "config"
ENTRY_CONFIG_NAME = "ppo_trainer"
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


class CommandLineError(ConfigError):
    """A command line the launcher cannot run: one line, naming the flag or word."""

    def __init__(self, message: str):
        super().__init__("", message)

    def __reduce__(self):
        return (type(self), (self.message,))


@dataclass(frozen=True)
class CommandLine:
    """What a ``main_ppo`` command line asks for, the config's place made explicit."""

    plan_only: bool
    config_path: str
    """The primary config directory as Hydra searches it: absolute, or ``pkg://...``."""
    config_name: str
    config_dir: Optional[str]
    """An absolute directory put first on the search path (``--config-dir``)."""
    overrides: Tuple[str, ...]
    shows: Tuple[str, ...]
    """Hydra's flags that show something instead of running (``--cfg job``, ``--info``,
    ``--help``...), handed on to ``main_ppo`` as they came."""

    def hydra_argv(self) -> List[str]:
        """The arguments that make ``main_ppo``'s ``@hydra.main`` read this line as
        ``python -m verl.trainer.main_ppo`` would (the config path already resolved)."""
        argv = [f"--config-path={self.config_path}", f"--config-name={self.config_name}"]
        if self.config_dir is not None:
            argv.append(f"--config-dir={self.config_dir}")
        return [*argv, *self.shows, *self.overrides]


def _refuse(message: str) -> Any:
    if message.startswith("unrecognized arguments"):
        message += " (Hydra takes its flags before or after the overrides, not among them)"
    raise CommandLineError(message)


def _hydra_parser() -> argparse.ArgumentParser:
    """Hydra's own parser (``main_ppo`` reads its line with it), answering with one line
    instead of its usage text."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    parser.error = _refuse
    return parser


def _entry(tokens: List[str]) -> List[str]:
    """``tokens`` without a leading module name (``verl.trainer.main_ppo`` or ``-m
    verl.trainer.main_ppo``); another module is refused. (A bare dotted word is never an
    override: Hydra's overrides hold ``=`` or start with ``~``.)"""
    at = 1 if tokens[:1] == ["-m"] else 0
    if len(tokens) <= at or not _MODULE.match(tokens[at]):
        return tokens
    module = tokens[at]
    if module != ENTRY:
        raise CommandLineError(
            f"{module}: the launcher runs {ENTRY} only (its TaskRunnerV1 with "
            "trainer.use_v1=true, verl.trainer.main_ppo_v0's TaskRunner with "
            "trainer.use_v1=false); to profile another driver, call "
            "verlprof.bridges.verl.attach(config) in it before its trainer starts")
    return tokens[at + 1:]


def entry_file() -> str:
    """``main_ppo.py`` of the installed verl, found without importing it (that starts Ray's
    and verl's imports)."""
    spec = importlib.util.find_spec(ENTRY)
    if spec is None or spec.origin is None:
        raise CommandLineError(f"{ENTRY} is not installed: pip install verl")
    return spec.origin


def read_command_line(argv: Sequence[str]) -> CommandLine:
    """``argv`` (what follows ``python -m verlprof.bridges.verl``) as ``main_ppo`` reads it."""
    from hydra._internal.utils import compute_search_path_dir
    from hydra.core.utils import validate_config_path

    tokens = [a for a in argv if a != "--plan"]
    plan_only = len(tokens) != len(argv)
    args = _hydra_parser().parse_args(_entry(tokens))
    if args.multirun:
        raise CommandLineError("--multirun: the launcher runs one job; write one line per "
                               "job (a sweep's values as plain overrides)")
    if args.experimental_rerun is not None:
        raise CommandLineError("--experimental-rerun: the launcher composes the config from "
                               "the command line; give the overrides of that run instead")
    config_path = args.config_path if args.config_path is not None else ENTRY_CONFIG_PATH
    try:
        validate_config_path(config_path)
    except ValueError as err:
        raise CommandLineError(f"--config-path={config_path}: "
                               f"{str(err).splitlines()[0]}") from None
    # python -m verl.trainer.main_ppo: the task function's module is __main__, so Hydra
    # resolves a relative config path against the file
    search_dir = compute_search_path_dir(entry_file(), None, config_path)
    config_dir = None
    if args.config_dir is not None:
        config_dir = os.path.abspath(args.config_dir)
        if not os.path.isdir(config_dir):
            raise CommandLineError(f"--config-dir={args.config_dir}: no such directory "
                                   f"({config_dir})")
    return CommandLine(plan_only=plan_only, config_path=str(search_dir),
                       config_name=args.config_name or ENTRY_CONFIG_NAME,
                       config_dir=config_dir, overrides=tuple(args.overrides),
                       shows=_shows(args))


def _shows(args: argparse.Namespace) -> Tuple[str, ...]:
    flags = [("--help", args.help), ("--hydra-help", args.hydra_help),
             (f"--cfg={args.cfg}", args.cfg), ("--resolve", args.resolve),
             (f"--package={args.package}", args.package),
             (f"--info={args.info}", args.info), ("--shell-completion", args.shell_completion)]
    return tuple(flag for flag, given in flags if given)


def compose(line: CommandLine, overrides: Optional[Sequence[str]] = None) -> DictConfig:
    """The job config ``main_ppo`` would be called with: Hydra's search path for the line,
    its loader in run mode, the ``hydra`` node taken out as Hydra's ``run_job`` does (which
    also makes ``${hydra:...}`` interpolations readable). ``overrides`` replace the line's."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    search_path = create_config_search_path(line.config_path)
    if line.config_dir is not None:
        search_path.prepend(provider="command-line", path=f"file://{line.config_dir}",
                            anchor=SearchPathQuery(provider="schema"))
    GlobalHydra.instance().clear()
    try:
        hydra = Hydra.create_main_hydra2(task_name=ENTRY.rsplit(".", 1)[-1],
                                         config_search_path=search_path)
        config = hydra.compose_config(
            config_name=line.config_name, run_mode=RunMode.RUN, with_log_configuration=False,
            overrides=list(line.overrides if overrides is None else overrides))
    finally:
        GlobalHydra.instance().clear()
    if OmegaConf.select(config, "hydra.mode") == RunMode.MULTIRUN:  # a config may ask it
        raise CommandLineError("hydra.mode=MULTIRUN: the launcher runs one job")
    with read_write(config.hydra.runtime), open_dict(config.hydra.runtime):
        config.hydra.runtime.output_dir = os.path.abspath(str(config.hydra.run.dir))
    HydraConfig.instance().set_config(config)
    job = copy.deepcopy(config)
    with read_write(job), open_dict(job):
        del job["hydra"]
    return job
