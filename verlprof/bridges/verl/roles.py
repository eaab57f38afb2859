"""verl's names for roles and phases, and verlprof's.

verl keys each role of a fused worker by a string (``actor_rollout_ref``, ``critic``, ...), and
its profiler ranges by an ``annotate(role=...)`` label such as ``actor_update``. verlprof plans
roles (``actor``, ``rollout``, ``ref``, ``critic``, ``rm``) and phases named after the annotated
method, so that verl's ``update_actor`` is phase ``actor/update_actor`` as in verlprof's demo.
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Tuple

from verlprof.config.verl_release import role_of_method

VERL_KEYS: Dict[str, Tuple[str, ...]] = {
    "actor_rollout_ref": ("actor", "rollout", "ref"),
    "actor_rollout": ("actor", "rollout"),
    "actor": ("actor",),
    "rollout": ("rollout",),
    "ref": ("ref",),
    "critic": ("critic",),
    "rm": ("rm",),
    "reward_model": ("rm",),
    "reward": ("rm",),
    "teacher": ("teacher",),
}
"""verl's role keys (worker-dict keys, ``Role`` names, ``save_file_prefix``) → verlprof roles."""

PLANNED_ROLES = ("actor", "rollout", "ref", "critic", "rm")
"""The roles a verlprof plan selects ranks of."""


def roles_of_keys(keys: Iterable[str]) -> Tuple[str, ...]:
    """The verlprof roles hosted by a fused worker whose verl role keys are ``keys``."""
    return tuple(dict.fromkeys(role for key in keys for role in VERL_KEYS.get(key, (key,))))


def fused_keys(attribute_names: Iterable[str]) -> Tuple[str, ...]:
    """verl's role keys of a fused ``WorkerDict`` class, from its prefixed methods: verl copies
    each registered method of role ``key`` onto the fused class as ``<key>_<method>``."""
    by_length = sorted(VERL_KEYS, key=len, reverse=True)
    found = []
    for name in attribute_names:
        key = next((k for k in by_length if name.startswith(k + "_")), None)
        if key is not None and name.endswith("_start_profile"):
            found.append(key)
    return tuple(dict.fromkeys(sorted(found)))


def phase_of(label: Optional[str], method: str, worker_key: Optional[str]) -> Tuple[str, str]:
    """(role, phase) of a call of ``method`` annotated with verl label ``label`` in a worker of
    role key ``worker_key``: the label's role prefix when it has one (``actor_update``,
    ``ref_compute_log_prob``); for a method verl annotates without a role label (0.4.1,
    Megatron up to 0.6.0), the role verl's workers give that method (``generate_sequences`` is
    the rollout's even in the hybrid worker); else the worker's own role (a critic's
    ``train_batch``)."""
    if label:
        head = label.split("_", 1)[0]
        if head in PLANNED_ROLES:
            return head, method
    known = role_of_method(method)
    if known is not None and known in VERL_KEYS.get(worker_key or "", (known,)):
        return known, method
    roles = VERL_KEYS.get(worker_key or "", ())
    return (roles[0] if roles else (worker_key or "worker")), method
