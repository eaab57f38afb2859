"""What the demo trainer reads from its config besides profiling, checked on the driver.

verlprof itself ignores these keys. They are read here, before the run claims its output
directory or starts Ray, so that a bad value is one line naming its key (exit 2), not an
exception from inside the TaskRunner actor; the TaskRunner gets the checked record.

``trainer.total_training_steps`` (default 3), ``data.batch_size`` (default 8), and the ``demo:``
block, which also rehearses faults:

``demo.faults: [{group, rank, phase, step, action, seconds, marker, release}]``
    planted in that rank's ``phase`` on its ``step``-th call (= training step ``step``):
    ``kill`` (SIGKILL itself), ``raise`` (an exception), ``sleep`` (``seconds``, a stuck rank;
    sooner once the file ``release`` exists, so a rehearsal need not wait the worst case out);
    ``marker``: a file written (JSON: pid, phase, step) just before the fault fires.
``demo.stragglers: [{group, rank, phase, seconds}]``
    that rank's ``phase`` sleeps ``seconds`` (default 0.2) on every call: a planted straggler.
``demo.on_worker_death``: ``stop`` (default, like verl: the step fails) or ``continue`` (the
    dead rank is dropped and its share of the batch goes to the others).
``demo.worker_start_timeout_s``: bound on worker start-up (default 300).
``demo.worker_resources: {group: {resource: amount}}``, ``demo.controller_resources:
    {resource: amount}``: Ray custom resources that place a group's ranks or the controller
    on chosen nodes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Literal, Mapping, Optional, Tuple, get_args

from verlprof.errors import ConfigError

FaultAction = Literal["kill", "raise", "sleep"]
OnWorkerDeath = Literal["stop", "continue"]


@dataclass(frozen=True)
class Straggler:
    """A planted straggler: every call of ``phase`` on ``group`` rank ``rank`` sleeps."""

    group: str
    rank: int
    phase: str
    seconds: float = 0.2


@dataclass(frozen=True)
class Fault:
    """A planted fault, fired in ``phase``'s ``step``-th call on ``group`` rank ``rank``."""

    group: str
    rank: int
    phase: str
    action: FaultAction
    step: int = 1
    seconds: float = 30.0
    """For ``sleep``: how long the rank is stuck."""
    marker: Optional[str] = None
    """A file written (JSON: pid, phase, step, action) just before the fault fires."""
    release: Optional[str] = None
    """For ``sleep``: a file whose appearance ends the sleep early."""


@dataclass(frozen=True)
class DemoSettings:
    """The demo trainer's own settings, as checked by :func:`demo_settings`."""

    total_steps: int = 3
    batch_size: int = 8
    on_worker_death: OnWorkerDeath = "stop"
    worker_start_timeout_s: float = 300.0
    stragglers: Tuple[Straggler, ...] = ()
    faults: Tuple[Fault, ...] = ()
    worker_resources: Dict[str, Dict[str, float]] = field(default_factory=dict)
    controller_resources: Dict[str, float] = field(default_factory=dict)

    def delays(self, group: str, rank: int) -> Dict[str, float]:
        """Seconds each phase of that rank sleeps (its planted stragglers)."""
        return {s.phase: s.seconds for s in self.stragglers if (s.group, s.rank) == (group, rank)}

    def faults_of(self, group: str, rank: int) -> Tuple[Fault, ...]:
        return tuple(f for f in self.faults if (f.group, f.rank) == (group, rank))


def demo_settings(raw: Mapping[str, Any]) -> DemoSettings:
    """The demo's settings from the whole config (``raw``); ConfigError names a bad key."""
    trainer = _block(raw, "trainer")
    data = _block(raw, "data")
    demo = _block(raw, "demo")
    on_death = demo.get("on_worker_death", "stop")
    if on_death not in get_args(OnWorkerDeath):
        raise ConfigError("demo.on_worker_death", f"stop or continue, not {on_death!r}")
    return DemoSettings(
        total_steps=_number(_given(trainer, "total_training_steps", 3), int,
                            "trainer.total_training_steps", minimum=1),
        batch_size=_number(_given(data, "batch_size", 8), int, "data.batch_size", minimum=1),
        on_worker_death=on_death,
        worker_start_timeout_s=_number(demo.get("worker_start_timeout_s", 300.0), float,
                                       "demo.worker_start_timeout_s", minimum=0.0,
                                       above=True),
        stragglers=tuple(_item(Straggler, item, f"demo.stragglers[{i}]")
                         for i, item in enumerate(_list(demo, "stragglers"))),
        faults=tuple(_item(Fault, item, f"demo.faults[{i}]")
                     for i, item in enumerate(_list(demo, "faults"))),
        worker_resources={str(group): _resources(amounts, f"demo.worker_resources.{group}")
                          for group, amounts in _block(demo, "worker_resources",
                                                       "demo.").items()},
        controller_resources=_resources(demo.get("controller_resources") or {},
                                        "demo.controller_resources"))


def _given(block: Mapping[str, Any], key: str, default: Any) -> Any:
    """``block[key]``, or ``default`` where it is absent or null (verl's null: derived)."""
    value = block.get(key)
    return default if value is None else value


def _block(raw: Mapping[str, Any], name: str, prefix: str = "") -> Mapping[str, Any]:
    value = raw.get(name) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(prefix + name, f"a mapping expected, not {value!r}")
    return value


def _list(demo: Mapping[str, Any], name: str) -> list:
    value = demo.get(name) or []
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"demo.{name}", f"a list expected, not {value!r}")
    return list(value)


def _number(value: Any, kind: type, key: str, *, minimum: float, above: bool = False) -> Any:
    """``value`` as ``kind`` (int or float), at least (or, ``above``, over) ``minimum``."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float) if kind is float
                                                    else int)
    if ok and (value > minimum if above else value >= minimum):
        return kind(value)
    bound = f"over {minimum:g}" if above else f"at least {minimum:g}"
    noun = "an integer" if kind is int else "a number"
    raise ConfigError(key, f"{noun} {bound} expected, not {value!r}")


def _resources(amounts: Any, key: str) -> Dict[str, float]:
    if not isinstance(amounts, Mapping):
        raise ConfigError(key, f"a mapping of resource to amount expected, not {amounts!r}")
    return {str(name): _number(amount, float, f"{key}.{name}", minimum=0.0, above=True)
            for name, amount in amounts.items()}


def _item(cls: type, item: Any, key: str) -> Any:
    """One straggler or fault, built by keyword from its mapping, every field checked."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if not isinstance(item, Mapping):
        raise ConfigError(key, f"a mapping with {', '.join(fields)} expected, not {item!r}")
    unknown = sorted(set(map(str, item)) - set(fields))
    if unknown:
        raise ConfigError(f"{key}.{unknown[0]}", f"not a key here (keys: {', '.join(fields)})")
    missing = [name for name, f in fields.items() if name not in item
               and f.default is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{key}.{missing[0]}", "required")
    values: Dict[str, Any] = {}
    for name, value in item.items():
        where = f"{key}.{name}"
        if name in ("rank", "step"):
            values[name] = _number(value, int, where, minimum=0 if name == "rank" else 1)
        elif name == "seconds":
            values[name] = _number(value, float, where, minimum=0.0)
        elif name == "action":
            if value not in get_args(FaultAction):
                raise ConfigError(where, f"one of {', '.join(get_args(FaultAction))}, not "
                                         f"{value!r}")
            values[name] = value
        elif value is None and fields[name].default is None:
            values[name] = None
        elif not isinstance(value, str) or not value:
            raise ConfigError(where, f"a name expected, not {value!r}")
        else:
            values[name] = value
    return cls(**values)
