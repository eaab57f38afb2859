"""Configs tiny as written and huge once expanded: every entry point refuses them, unexpanded.

The malformed-file corpus of the loader: a YAML alias bomb (seven nested levels of nine
aliases, 9^7 values expanded), a file over the size bound, a huge flow list, and the same
shapes reaching :func:`config_from_dict` as shared dict references or through NeMo RL's
``NRL_NSYS_EXTRA_OPTIONS``. Each is refused with one line naming the file, key or variable,
and unexpanded: the refusal allocates a few MiB (:data:`PEAK_MIB` at most; expanding an alias
bomb takes gigabytes). Memory, not time, is what is bounded here: a shared machine can make any
call slow. Anchors and aliases of normal size keep working.
"""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

from verlprof.config import ConfigError, config_from_dict, guard, load_config
from verlprof.config import nemo_env as ne

ROOT = Path(__file__).resolve().parents[2]
PPO = ROOT / "trainer_configs" / "ppo_trainer.yaml"
PEAK_MIB = 64
"""Memory a refusal may allocate (measured: 23 MiB for the largest, the flow list)."""


@contextmanager
def refused_unexpanded() -> Iterator[None]:
    """The block may allocate at most :data:`PEAK_MIB` (Python allocations, tracemalloc)."""
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert peak < PEAK_MIB, f"{peak:.0f} MiB allocated: expanded?"


def alias_bomb(levels: int = 7, width: int = 9) -> str:
    """A few hundred bytes of YAML that expands to ``width ** levels`` strings."""
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def oversized() -> str:
    """A valid mapping, padded with comments past the file-size bound."""
    return "trainer: {}\n" + ("# padding\n" * (guard.MAX_YAML_BYTES // 10 + 1))


def flow_list() -> str:
    """A single flow list of values, just under the file-size bound."""
    count = (guard.MAX_YAML_BYTES - 64) // 2
    return "critic:\n  extra: [" + ",".join(["0"] * count) + "]\n"


CORPUS: List[tuple[str, Callable[[], str], str]] = [
    ("alias-bomb", alias_bomb, "expands to more than 10000 values"),
    ("oversized-file", oversized, f"a trainer config is at most {guard.MAX_YAML_BYTES}"),
    ("huge-flow-list", flow_list, "values (anchors/aliases or shared references counted per "
                                  "use); at most 10000 are accepted"),
    ("bomb-in-a-mapping", lambda: "trainer: {}\n" + alias_bomb().replace("\n", "\n  ").join(
        ["blow:\n  ", ""]), "expands to more than 10000 values"),
]


@pytest.mark.parametrize("name, text, fragment", CORPUS, ids=[c[0] for c in CORPUS])
def test_yaml_refused_unexpanded_naming_the_file(tmp_path, name, text, fragment):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text())
    with refused_unexpanded(), pytest.raises(ConfigError) as info:
        load_config(str(path), env={})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"config: {path}") and fragment in message, message


def test_normal_anchors_and_aliases_keep_working(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text(PPO.read_text() + "\nshared: &ranks [0, 1]\nagain: *ranks\n"
                    "merged:\n  <<: {a: 1, b: 2}\n  c: 3\n")
    loaded = load_config(str(path), env={})
    assert loaded.raw["again"] == [0, 1] and loaded.raw["merged"] == {"a": 1, "b": 2, "c": 3}


def test_shared_references_in_a_dict_are_refused_unexpanded():
    node: object = ["x"]
    for _ in range(7):
        node = [node] * 9
    with refused_unexpanded(), pytest.raises(
            ConfigError, match=r"^config: the config expands to more than 10000"):
        config_from_dict({"trainer": {}, "critic": {"extra": node}}, env={})


def test_a_shared_reference_used_a_few_times_is_fine():
    ranks = [0]
    loaded = config_from_dict({"trainer": {"profile_steps": [1], "device": "cpu"},
                               "critic": {"profile_ranks": ranks},
                               "actor_rollout_ref": {"actor": {"profile_ranks": ranks}}}, env={})
    assert loaded.profiling.components.critic.ranks == (0,)


@pytest.mark.parametrize("value, fragment", [
    ('{"trace": "' + "x" * guard.MAX_ENV_BYTES + '"}', "characters long"),
    ('{"a": [' + ",".join(["0"] * 20_000) + "]}", "expands to"),
    ("[" * 30_000 + "]" * 30_000, "NRL_NSYS_EXTRA_OPTIONS"),
])
def test_nemo_extra_options_refused_naming_the_variable(value, fragment):
    with refused_unexpanded(), pytest.raises(ConfigError) as info:
        ne.parse_extra_options(value, "NRL_NSYS_EXTRA_OPTIONS")
    message = str(info.value)
    assert message.startswith("NRL_NSYS_EXTRA_OPTIONS") and fragment in message
    assert "\n" not in message


def test_check_on_an_alias_bomb_exits_2_with_one_line(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from verlprof.cli import main; sys.exit(main())",
         "check", "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "expands to" in lines[0], lines


@pytest.mark.parametrize("override", [
    "trainer.nnodes=1000000000",
    "+critic.n_gpus_per_node=999999999",
])
def test_a_world_size_no_plan_could_walk_is_one_line(override):
    """A mistyped size (10^9 ranks) used to hang ``build_plan``, which visits every rank."""
    with pytest.raises(ConfigError) as info:
        load_config(str(PPO), [override])
    assert "ranks, more than verlprof plans for (131072)" in str(info.value)
    assert "\n" not in str(info.value)
