"""Clock alignment records: where each process's clock stands against the controller's.

The controller measured them while the run went on (``verlprof.runtime.clock_sync``) and wrote
them into the manifest (:attr:`verlprof.manifest.ProcessInfo.clock_offset_ns` and
``clock_error_ns``). The trace puts every event on the controller's clock: ``t - offset``.
A process never measured (an old manifest, a rank that never answered) is taken as it is
(offset 0) and its error is unknown, which the trace and ``verlprof report`` say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from verlprof.manifest import Manifest, ProcessInfo

Key = Tuple[str, int]
"""(group, rank); the controller is ``("controller", 0)``."""


@dataclass(frozen=True)
class Alignment:
    """One process's clock against the controller's."""

    offset_ns: int = 0
    """Its clock minus the controller's."""
    error_ns: Optional[int] = None
    """How far ``offset_ns`` may be off; None when it was never measured."""

    def place(self, t_ns: int) -> int:
        """``t_ns`` on the process's clock, on the controller's."""
        return t_ns - self.offset_ns


def _of(process: ProcessInfo) -> Alignment:
    if process.clock_offset_ns is None:
        return Alignment()
    return Alignment(process.clock_offset_ns, process.clock_error_ns)


def alignments(manifest: Manifest) -> Dict[Key, Alignment]:
    """Every process of ``manifest`` by (group, rank)."""
    out = {(p.group, p.rank): _of(p) for p in manifest.processes}
    if manifest.controller is not None:
        out[("controller", 0)] = Alignment(0, 0)
    return out


@dataclass(frozen=True)
class ClockSummary:
    """The alignment of a run in one line's worth of numbers."""

    largest_error_ns: Optional[int]
    """The largest error bound of the processes measured (None: none was)."""
    unmeasured: int
    """Processes whose clock was never measured (taken as the controller's)."""

    def line(self) -> str:
        """``clocks aligned to the controller's within ±0.41 ms`` (and what is unknown)."""
        if self.largest_error_ns is None:
            return ("clocks: not measured (a manifest from before verlprof measured them): "
                    "each host's clock is taken as it is")
        text = f"clocks aligned to the controller's within ±{self.largest_error_ns / 1e6:.3g} ms"
        if self.unmeasured:
            text += f" ({self.unmeasured} process(es) never measured, taken as they are)"
        return text


def clock_summary(manifest: Manifest) -> ClockSummary:
    """The largest error bound of ``manifest``'s worker processes."""
    errors = [p.clock_error_ns for p in manifest.processes if p.clock_error_ns is not None]
    unmeasured = sum(1 for p in manifest.processes if p.clock_offset_ns is None)
    return ClockSummary(max(errors) if errors else None, unmeasured)
