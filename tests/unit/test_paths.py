"""The file contract, path by path."""

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verlprof import paths
from verlprof.config.schema import DEFAULT_FILENAME_TEMPLATE


def test_whole_step_report_path():
    rel = paths.report_relpath(DEFAULT_FILENAME_TEMPLATE, (5,), "actor_rollout_ref", 1, "nsys")
    assert rel == ("step0005/actor_rollout_ref/rank1/"
                   "actor_rollout_ref_step5_rank1_{host}_{pid}.nsys-rep")
    assert paths.resolve_relpath(rel, "node-7", 4242).endswith("_rank1_node-7_4242.nsys-rep")


def test_continuous_window_names_first_and_last_step():
    rel = paths.report_relpath(DEFAULT_FILENAME_TEMPLATE, (1, 2), "critic", 0, "torch")
    assert rel == "step0001-0002/critic/rank0/critic_step1-2_rank0_{host}_{pid}.pt.trace.json.gz"


def test_discrete_component():
    assert paths.discrete_component("actor", "update_actor") == "actor.update_actor"


def test_raw_and_controller_prefixes():
    assert paths.raw_prefix("/o", "critic", 3) == "/o/.raw/critic/rank3/critic_rank3_%p"
    assert paths.controller_prefix("/o") == "/o/controller/controller_%h_%p"


@given(st.text(max_size=40))
def test_sanitize_is_one_safe_segment(name):
    out = paths.sanitize(name)
    assert out and "/" not in out and out not in (".", "..") and not out.startswith(".")


@given(st.text(max_size=30), st.integers(min_value=0, max_value=10**7))
def test_resolved_paths_stay_inside_output_dir(host, pid):
    rel = paths.report_relpath(DEFAULT_FILENAME_TEMPLATE, (1,), "../../etc", 0, "nsys")
    resolved = paths.resolve_relpath(rel, host, pid)
    full = paths.inside("/tmp/out", resolved)
    assert full.startswith(os.path.realpath("/tmp/out") + os.sep)


def test_inside_refuses_escape():
    with pytest.raises(ValueError):
        paths.inside("/tmp/out", "../x")


def _sanitize_keeping_fields_by_parts(name):
    """The rule spelled out: every run of unsafe characters outside ``{host}``/``{pid}``
    becomes ``_``, leading dots go, an empty name becomes ``_``."""
    import re

    parts = re.split(r"(\{host\}|\{pid\})", name)
    cleaned = "".join(p if p in ("{host}", "{pid}") else re.sub(r"[^A-Za-z0-9._-]+", "_", p)
                      for p in parts)
    return cleaned.lstrip(".") or "_"


@given(st.lists(st.one_of(st.sampled_from(["{host}", "{pid}", ".", "..", "a", "_", "-", "7"]),
                          st.text(max_size=6)), max_size=8))
def test_a_safe_name_is_kept_as_is_and_any_other_sanitised_by_the_rule(pieces):
    name = "".join(pieces)
    assert paths._sanitize_keeping_fields(name) == _sanitize_keeping_fields_by_parts(name)
