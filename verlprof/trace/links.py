"""Arrows the trace draws between processes from an analysis of the run: each controller
phase to its slowest rank's call (``verlprof report``'s anatomy,
:mod:`verlprof.report.anatomy`). A plain record, so that the trace never imports the report.

Each link is drawn as two slices, one on a ``where the step went`` track of each process (the
controller's phase, the rank's call), joined by a flow arrow: the phases' own slices are
written by the parts, each in a process of its own, and a flow needs an id on both ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Sequence, Tuple, Union

from verlprof.trace.clock import Key

LINK_FLOW_BASE = 1 << 62
"""Flow ids of the links: above every part's own (``flow_base`` hands out ``n << 40``)."""
TRACK_NAME = "where the step went"


@dataclass(frozen=True)
class Link:
    """An arrow from a span of ``source`` to a span of ``target``; spans on the controller's
    clock already (not moved again)."""

    name: str
    source: Key
    source_span: Tuple[int, int]
    target: Key
    target_span: Tuple[int, int]
    args: Dict[str, Union[int, str]] = field(default_factory=dict)


def write_links(links: Sequence[Link], tracks: Dict[Key, object]) -> int:
    """Draw ``links`` whose two processes have tracks (:class:`ProcessTracks` by key);
    returns how many were drawn."""
    drawn = 0
    for n, link in enumerate(links):
        source, target = tracks.get(link.source), tracks.get(link.target)
        if source is None or target is None:
            continue
        flow = LINK_FLOW_BASE + n
        for side, span, out, into in ((source, link.source_span, flow, None),
                                      (target, link.target_span, None, flow)):
            track = side.child("anatomy", "", TRACK_NAME, rank=5)  # type: ignore[attr-defined]
            side.writer.slice(track, link.name, span[0], span[1],  # type: ignore[attr-defined]
                              category="anatomy", args=link.args, flow_out=out, flow_in=into)
        drawn += 1
    return drawn
