"""Errors verlprof raises for bad input: one line, naming the full config key."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad profiling setting. ``str(err)`` is ``"<full.key>: <what is wrong>"``."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)

    def __reduce__(self):  # crosses Ray (raised inside the controller actor) intact
        return (type(self), (self.key, self.message))


class ProfilingRuntimeError(RuntimeError):
    """A failure while profiling a live run. The message names every failing rank; ``group``
    and ``rank`` hold the first one, for programs."""

    def __init__(self, message: str, group: str | None = None, rank: int | None = None):
        self.group = group
        self.rank = rank
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (self.args[0] if self.args else "", self.group, self.rank))
