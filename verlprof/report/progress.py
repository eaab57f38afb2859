"""Progress of long work (exporting reports, waiting for them, writing the summary).

On a terminal it is a live bar on stderr that disappears when the work is done; anywhere else
(a log file, a Ray actor whose output is forwarded line by line, CI) it is one line per item,
at most one every ``min_interval_s`` seconds, plus a last line with the total time::

    with Progress("exporting nsys reports", total=len(tasks)) as progress:
        for task in tasks:
            ...
            progress.advance(os.path.basename(path))

``Progress.disabled()`` is a null object with the same methods, for callers that are told to
be quiet. Progress never raises: a broken stream must not fail the work it reports on.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any, Optional

from verlprof.safe_text import visible

PREFIX = "verlprof"


class Progress:
    """Counts ``done`` of ``total`` items for one task and shows it."""

    def __init__(self, label: str, total: int, *, stream: Optional[IO[str]] = None,
                 live: Optional[bool] = None, min_interval_s: float = 2.0,
                 enabled: bool = True):
        self.label = label
        self.total = max(0, int(total))
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval_s = min_interval_s
        self.enabled = enabled and self.total > 0
        self.started = time.monotonic()
        self._last_line = float("-inf")  # the first item is always shown
        self._bar: Any = None
        self._task: Any = None
        if self.enabled and (live if live is not None else _is_terminal(self.stream)):
            self._start_bar()

    @classmethod
    def disabled(cls) -> Progress:
        """A progress that shows nothing."""
        return cls("", 0, enabled=False)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def advance(self, detail: str = "", n: int = 1) -> None:
        """``n`` more items are done; ``detail`` names the last one (a file, a rank)."""
        self.done = min(self.total, self.done + n)
        if not self.enabled:
            return
        detail = visible(detail)  # a report's file name is data: no code reaches the terminal
        try:
            if self._bar is not None:
                self._bar.update(self._task, completed=self.done,
                                 detail=detail[-60:] if detail else "")
                return
            now = time.monotonic()
            if self.done >= self.total or now - self._last_line < self.min_interval_s:
                return  # the closing line reports the end
            self._last_line = now
            self._write(f"{self.done}/{self.total}" + (f" ({detail})" if detail else ""))
        except Exception:  # noqa: BLE001 - showing progress must never break the work
            self.enabled = False

    def close(self) -> None:
        """Remove the bar, or write the closing line with the elapsed time."""
        if not self.enabled:
            return
        self.enabled = False
        try:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None
            else:
                self._write(f"{self.done}/{self.total} done in {self.elapsed_s:.1f} s")
        except Exception:  # noqa: BLE001
            pass

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _write(self, text: str) -> None:
        self.stream.write(f"{PREFIX}: {self.label}: {text}\n")
        self.stream.flush()

    def _start_bar(self) -> None:
        import rich.progress as rp
        from rich.console import Console

        self._bar = rp.Progress(
            rp.TextColumn(f"{PREFIX}: {self.label}"), rp.BarColumn(), rp.MofNCompleteColumn(),
            rp.TimeElapsedColumn(), rp.TextColumn("{task.fields[detail]}", markup=False),
            console=Console(file=self.stream), transient=True)
        self._task = self._bar.add_task(self.label, total=self.total, detail="")
        self._bar.start()


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
