"""The bridge in the process that runs verl's trainer: plan, controller, and verl's hooks.

::

    bridge = attach(config)          # a verl config (resolved); plans and starts the controller
    trainer.init_workers()           # verl wraps only the planned ranks, registers them
    trainer.fit()                    # _start/_stop_profiling drive controller.step(n)
                                     # fit's end: bridge.finish() -> reports + manifest.json

A tool that writes only when its process exits (rocprof-sys) would lose everything under verl,
which ends its workers by killing them at ``ray.shutdown()`` (no exit handler runs): at fit's
end the bridge then ends the profiled worker processes itself, gracefully, and gathers what
they wrote (``ProfileController.wait_for_profilers``).
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import AbstractContextManager
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from verlprof.backends import get_backend
from verlprof.bridges.verl.driver_side import (
    BuiltGroup,
    GroupMap,
    VerlActor,
    active_bridge,
    patch_worker_groups,
    set_active_bridge,
)
from verlprof.bridges.verl.engine_traces import EngineTraces
from verlprof.bridges.verl.messages import nothing_profiled
from verlprof.bridges.verl.patching import undo_all
from verlprof.bridges.verl.served import patch_replicas
from verlprof.bridges.verl.trainer import patch_trainers
from verlprof.bridges.verl.worker_side import forget_routes, patch_dist_profiler
from verlprof.config import config_from_dict
from verlprof.config.topology import GroupTopology, Topology
from verlprof.manifest import Manifest
from verlprof.plan import ProfilePlan, build_plan
from verlprof.runtime.controller import ProfileController
from verlprof.runtime.rank_rpc import DIED

logger = logging.getLogger("verlprof")
EXIT_TIMEOUT_S = 120.0
"""How long fit's end waits for the profiled workers to exit and their tool to write."""


def install() -> List[str]:
    """Patch verl's seams in this process (idempotent): worker groups, ``DistProfiler``, the
    trainers' profiling hooks. Each patch defers to verl's own code until a bridge is attached
    (driver side) or this process's rank is configured (worker side). Returns what was
    patched."""
    done = []
    if patch_worker_groups():
        done.append("RayWorkerGroup")
    if patch_dist_profiler():
        done.append("DistProfiler")
    if patch_replicas():
        done.append("RolloutReplica")
    done += patch_trainers()
    return done


def uninstall() -> int:
    """Undo every patch the bridge applied in this process (``patching``'s record): each of
    verl's attributes, functions and module globals is the identical original object again,
    and :func:`install` may patch afresh. Returns how many patches were undone."""
    set_active_bridge(None)
    forget_routes()
    return undo_all()


class Bridge:
    """verlprof's controller behind verl's trainer hooks, for one run."""

    def __init__(self, plan: ProfilePlan, controller: Optional[ProfileController] = None,
                 drive_engines: bool = True, **controller_options: Any):
        self.controller = controller or ProfileController(plan, **controller_options)
        self.plan = self.controller.plan  # <output_dir>/<run id>/ when the claim says so
        self.groups = GroupMap(self.plan, self._replan)
        self.manifest: Optional[Manifest] = None
        self._open: Optional[Tuple[int, AbstractContextManager]] = None
        self._planned: List[Any] = []
        """Handles of the planned worker processes (ended at fit's end when the tool writes
        at exit)."""
        self._replicas: Dict[str, Dict[int, Any]] = {}
        """Replica servers launched so far, per replica group."""
        route = self.plan.engine_route
        self.engines = EngineTraces(route, self.plan.output_dir, drive_engines) \
            if route is not None else None
        """verl's own engine profiling of the replicas (``drive_engines``: verl's step list
        was cleared, so the bridge calls their start/stop_profile)."""

    def _replan(self, built: BuiltGroup, name: str, predicted: bool) -> ProfilePlan:
        """verl built ``built`` as plan group ``name``, which the plan predicted other
        (``predicted``) or not at all: plan again on the pools verl built, say what differs."""
        before = self.plan.group(name) if predicted else None
        size = built.world_size or (before.world_size if before is not None else 1)
        observed = GroupTopology(name=name, roles=built.roles, world_size=size)
        said = (f"verl built {name} with roles {'/'.join(built.roles)} on {size} rank(s)"
                + (f"; the config predicted {'/'.join(before.roles)} on {before.world_size}"
                   if before is not None else "; the config predicted no such pool"))
        inputs = self.plan.built_from
        if inputs is None:  # a plan not made by build_plan: profile by rank as it says
            self.controller.note(f"{said}: profiled by rank as planned")
            return self.plan
        groups = [observed if g.name == name else g for g in inputs.topology.groups]
        if before is None:
            groups.append(observed)
        topology = dataclasses.replace(inputs.topology, groups=tuple(groups))
        config = dataclasses.replace(inputs.config, output_dir=self.plan.output_dir)
        plan = self.controller.replan(build_plan(config, topology))
        self.plan = self.controller.plan
        self.controller.note(f"{said}: planned again on the pools verl built "
                             f"({len(plan.processes)} process(es) profiled)")
        return self.plan

    def register(self, group: str, handles: Sequence[Any]) -> None:
        """verl's workers of plan group ``group`` (rank order) are up: configure the planned."""
        self.controller.register_group(group, [VerlActor(h) for h in handles])
        self._planned += [handles[p.rank] for p in self.plan.processes if p.group == group]

    def register_replica(self, group: str, replica_rank: int, servers: Sequence[Any]) -> None:
        """The servers of verl's replica ``replica_rank`` are up, one per node: ranks
        ``replica_rank * servers_per_replica + node`` of ``group``, which registers once every
        replica the plan expects is (verl launches them together)."""
        planned = self.plan.group(group)
        assert planned is not None, group  # registered groups are the plan's
        per = planned.servers_per_replica
        expected = planned.world_size // per
        if replica_rank >= expected or len(servers) != per:
            self.controller.note(f"verl launched {group} replica {replica_rank} with "
                                 f"{len(servers)} server(s), but the config predicted "
                                 f"{expected} replica(s) of {per}: not profiled")
            return
        launched = self._replicas.setdefault(group, {})
        launched.update({replica_rank * per + node: s for node, s in enumerate(servers)})
        if len(launched) == planned.world_size:
            self.register(group, [launched[r] for r in range(planned.world_size)])

    def begin_step(self, step: int) -> None:
        """verl's ``_start_profiling``: enter ``controller.step(step)``."""
        self.end_step(None)  # a step whose end verl never reported (it raised) ends here
        step_context = self.controller.step(step)
        step_context.__enter__()
        self._open = (step, step_context)
        if self.engines is not None:
            self.engines.begin(step)

    def end_step(self, step: Optional[int]) -> None:
        """verl's ``_stop_profiling``: leave the step (closes the windows that end here)."""
        if self._open is None or (step is not None and self._open[0] != step):
            return
        opened, step_context = self._open
        self._open = None
        step_context.__exit__(None, None, None)
        if self.engines is not None:
            self.engines.end(opened)

    def finish(self) -> Manifest:
        """Stop every window, gather every report into output_dir, write manifest.json
        (idempotent)."""
        if self.manifest is None:
            self.end_step(None)
            self.manifest = self.controller.finalize()
            dead = {t for t, why in self.controller.failed_ranks.items() if DIED in why}
            if get_backend(self.plan.tool).output_at_exit:
                if self._planned:
                    self.manifest = self._collect_at_exit()
            elif dead:  # a dead process's nsys may leave its agent behind; the others live on
                for problem in self.controller.wait_for_profilers(EXIT_TIMEOUT_S, only=dead):
                    logger.warning("verlprof: %s", problem)
            if self.engines is not None:  # and what verl's engines wrote late
                self.engines.gather(self.engines.step)
                self.manifest = dataclasses.replace(
                    self.manifest, reports=self.manifest.reports + tuple(self.engines.entries),
                    warnings=self.manifest.warnings + tuple(self.engines.problems))
                for problem in self.engines.problems:
                    logger.warning("verlprof: %s", problem)
                self.manifest = self.controller.context.write(self.manifest)  # as the run owns it
            why = nothing_profiled(self.manifest, [f"{p.group} rank {p.rank}"  # armed,
                                                   for p in self.plan.processes if p.windows])
            if why is not None:  # the launcher exits 3 with it; a custom driver sees it here
                logger.error("verlprof: %s", why)
            if active_bridge() is self:
                set_active_bridge(None)
        return self.manifest

    def _collect_at_exit(self, timeout_s: float = EXIT_TIMEOUT_S) -> Manifest:
        """End the planned worker processes (fit is over; verl would kill them at shutdown)
        and gather what their tool wrote at exit; the manifest is rewritten with it."""
        import ray

        ended = [h.__ray_terminate__.remote() for h in self._planned]
        ray.wait(ended, num_returns=len(ended), timeout=timeout_s)
        for problem in self.controller.wait_for_profilers(timeout_s):
            logger.warning("verlprof: %s", problem)
        return self.controller.finalize()


def attach(config: Any, topology: Optional[Topology] = None, *, plan: Optional[ProfilePlan] = None,
           **controller_options: Any) -> Bridge:
    """Plan ``config`` (a verl trainer config: DictConfig or dict, any verl layout) and attach
    a :class:`Bridge` to this process. ``topology`` defaults to verl's resource pools read from
    the config; ``plan`` skips planning (the launcher plans once, before verl starts, and
    clears verl's own step list)."""
    install()
    verl_steps = (config.get("global_profiler") or {}).get("steps") if hasattr(config, "get") \
        else None  # cleared by the launcher: then the bridge drives verl's engine profiling
    bridge = Bridge(plan or plan_of(config, topology), drive_engines=not verl_steps,
                    **controller_options)
    set_active_bridge(bridge)
    return bridge


def plan_of(config: Mapping[str, Any], topology: Optional[Topology] = None) -> ProfilePlan:
    """The plan a bridge would follow for ``config`` (no Ray, no verl needed)."""
    loaded = config_from_dict(config)
    return build_plan(loaded.profiling, topology or loaded.topology)
