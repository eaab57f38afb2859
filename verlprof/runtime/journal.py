"""The journal of a running job, ``<output_dir>/.raw/placement.json``: what ``verlprof
collect`` needs to place the reports a job left when its controller died before finalize.

The manifest says which reports a run plans and which are placed. The journal adds, per
planned process, who ran it and the step windows it was sent with whether each closed (nsys
numbers a process's reports in that order): small, so that it can be rewritten with each
running manifest at thousands of ranks. The controller
rewrites it with each running manifest (``verlprof.runtime.placement``) and removes it at
finalize.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Optional, Tuple

import dacite

from verlprof import paths
from verlprof.manifest import write_json_atomically
from verlprof.records import ProcessIdentity, StepWindow

JOURNAL_NAME = "placement.json"
"""The journal's name, in ``<output_dir>/.raw/``."""


@dataclass(frozen=True)
class SentWindow:
    """A step window a process was sent, and whether it was closed."""

    steps: StepWindow
    closed: bool


@dataclass(frozen=True)
class ProcessJournal:
    """One planned process as the controller left it: with its entries in the manifest,
    enough to place its files later (its raw directory follows from group and rank)."""

    group: str
    rank: int
    identity: ProcessIdentity
    sent: Tuple[SentWindow, ...] = ()
    open_ended: bool = False
    """Launched with an open-ended nsys count (an armed rank): reports only at exit, unnumbered
    by window."""


@dataclass(frozen=True)
class ControllerJournal:
    """The controller's own nsys capture, when it runs under nsys (its host and pid are the
    manifest's ``controller``): its planned windows, and those it opened, in order (nsys
    numbers its reports so), with whether each closed."""

    planned: Tuple[StepWindow, ...]
    sent: Tuple[SentWindow, ...] = ()


@dataclass(frozen=True)
class RunJournal:
    """The processes of a running job (written with each running manifest)."""

    run_id: str
    tool: str
    output_dir: str
    processes: Tuple[ProcessJournal, ...] = ()
    controller: Optional[ControllerJournal] = None
    """None when the controller does not run under nsys."""


def journal_path(output_dir: str) -> str:
    return os.path.join(output_dir, paths.RAW_DIR, JOURNAL_NAME)


def read_journal(output_dir: str) -> Optional[RunJournal]:
    """The journal of ``output_dir``; None when absent or unreadable."""
    try:
        with open(journal_path(output_dir), encoding="utf-8") as handle:
            return dacite.from_dict(RunJournal, json.load(handle),
                                    config=dacite.Config(cast=[tuple]))
    except (OSError, ValueError, dacite.DaciteError, TypeError):
        return None


def write_journal(journal: RunJournal, output_dir: str) -> None:
    write_json_atomically(os.path.join(output_dir, paths.RAW_DIR), JOURNAL_NAME,
                          dataclasses.asdict(journal))


def remove_journal(output_dir: str) -> None:
    """Once the final manifest is written; ``.raw`` too where nothing else is left in it."""
    with contextlib.suppress(OSError):
        os.remove(journal_path(output_dir))
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(journal_path(output_dir)))
