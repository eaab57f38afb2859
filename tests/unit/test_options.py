"""Tool options → argv: rendering rules and the errors that name the key."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verlprof.config.options import merge_options, render_options, validate_options
from verlprof.errors import ConfigError


def test_short_long_flags_and_booleans():
    argv = render_options({"t": "cuda,nvtx", "cuda-memory-usage": True, "kill": "none",
                           "capture-range-end": None, "delay": 5},
                          ["stats", "--export-json"])
    assert argv == ["-t", "cuda,nvtx", "--cuda-memory-usage=true", "--kill=none", "--delay=5",
                    "--stats", "--export-json"]


def test_false_is_lower_cased_and_floats_plain():
    assert render_options({"force-overwrite": False, "duration": 2.5}) == [
        "--force-overwrite=false", "--duration=2.5"]


@pytest.mark.parametrize("options,flags,key", [
    ({"o": "a", "output": "b"}, None, "w.output"),
    ({"t": "nvtx", "trace": "cuda"}, None, "w.trace"),
    ({"bad key": 1}, None, "w.bad key"),
    ({"t": ["a"]}, None, "w.t"),
    ({"delay": -1}, None, "w.delay"),
    ({"duration": "soon"}, None, "w.duration"),
    ({"x": float("nan")}, None, "w.x"),
    ({"trace": "nvtx"}, ["trace"], "w.flags[0]"),
    ({}, ["ok", "no spaces"], "w.flags[1]"),
    ({}, "stats", "w.flags"),
])
def test_bad_options_name_the_key(options, flags, key):
    with pytest.raises(ConfigError) as err:
        validate_options(options, flags, "w")
    assert str(err.value).startswith(key + ":")
    assert "\n" not in str(err.value)


def test_merge_treats_short_and_long_as_one_key():
    assert merge_options({"t": "cuda", "kill": "none"}, {"trace": "nvtx"}) == {
        "kill": "none", "trace": "nvtx"}


@given(st.dictionaries(st.from_regex(r"[a-z][a-z-]{1,12}", fullmatch=True),
                       st.text(min_size=0, max_size=30), max_size=6))
def test_values_stay_inside_their_argv_slot(options):
    """Whatever a value holds (quotes, ;, $(...), newlines), it is one slot, unchanged."""
    argv = render_options(options)
    assert len(argv) == len(options)
    for (name, value), slot in zip(options.items(), argv):
        assert slot == f"--{name}={value}"
