"""Names that cannot be shown get a stand-in, once, before any analysis.

A role, phase or group name that is empty, has nothing printable, or is megabytes long would
make an empty cell, a blank lane label or a table no terminal can hold. It is replaced by
:func:`verlprof.safe_text.stand_in` (stable: the same name gets the same stand-in in every
output and every run, so it still groups and compares across ranks), and one warning per
distinct name says where it came from. Every other name stays as the report wrote it: each
renderer escapes it for its own medium.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypeVar

from verlprof.manifest import ReportEntry
from verlprof.report.model import PhaseRecord
from verlprof.safe_text import stand_in, unshowable

MAX_WARNINGS = 20
"""Distinct stand-ins warned about one by one; the rest are counted in one more line."""

T = TypeVar("T", PhaseRecord, ReportEntry)


class _StandIns:
    """Replaces the named fields of records, counting each distinct name replaced."""

    def __init__(self, what: str):
        self.what = what
        self.known: Dict[str, Optional[str]] = {}  # a name's stand-in: hashed once, not per row
        self.seen: Dict[str, Tuple[str, str, int]] = {}  # stand-in -> (why, where, count)

    def replace(self, item: T, fields: Sequence[str], where: str) -> T:
        changes: Dict[str, Any] = {}
        for field in fields:
            raw = getattr(item, field)
            if raw not in self.known:
                self.known[raw] = stand_in(raw)
            shown = self.known[raw]
            if shown is not None:
                changes[field] = shown
                why, first, count = self.seen.get(shown, (str(unshowable(raw)), where, 0))
                self.seen[shown] = (why, first, count + 1)
        return dataclasses.replace(item, **changes) if changes else item

    def warnings(self) -> List[str]:
        out = [f"{self.what} in {first} cannot be shown ({why}): shown as {shown} "
               f"({count}×)" for shown, (why, first, count) in self.seen.items()]
        if len(out) > MAX_WARNINGS:
            out = out[:MAX_WARNINGS] + [f"{len(out) - MAX_WARNINGS} more name(s) cannot be "
                                        "shown and have stand-ins"]
        return out


def records_with_stand_ins(records: Sequence[PhaseRecord]
                           ) -> Tuple[List[PhaseRecord], List[str]]:
    """``records`` with unshowable role, phase and group names replaced; the warnings."""
    names = _StandIns("a range name")
    out = [names.replace(r, ("role", "phase", "group"), r.report_path) for r in records]
    return out, names.warnings()


def entries_with_stand_ins(entries: Sequence[ReportEntry]
                           ) -> Tuple[List[ReportEntry], List[str]]:
    """Manifest entries with unshowable group and component names replaced (they name lanes,
    rows and problems); the warnings."""
    names = _StandIns("a group name")
    out = [names.replace(e, ("group", "component"), "manifest.json") for e in entries]
    return out, names.warnings()
