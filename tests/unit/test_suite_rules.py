"""Rules of the test suite itself (issue 30): under ``CI=true`` no test skips for a missing
tool the Makefile could install; every skip goes through ``tests/helpers.skip_or_fail``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import skip_or_fail

TESTS = Path(__file__).resolve().parents[1]
SKIP = re.compile(r"pytest\.skip\(|mark\.skip(if)?\b|importorskip\(")


def test_skip_or_fail_skips_alone_and_fails_in_one_line_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="node not found"):
        skip_or_fail("node not found")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as failed:
        skip_or_fail("node not found")
    assert str(failed.value) == "node not found; CI=true requires it"


def test_no_test_skips_but_through_skip_or_fail():
    """A bare ``pytest.skip`` would skip silently under CI=true too."""
    offenders = [f"{path.relative_to(TESTS)}:{n}" for path in sorted(TESTS.rglob("*.py"))
                 if path.name != "helpers.py" and path != Path(__file__).resolve()
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if SKIP.search(line)]
    assert not offenders, offenders
