"""Fixtures of the fault suite: one Ray head for the suite (package scope: it ends with the
fault suite, not with the test session, whose other tiers start clusters of their own), one
connection per module, and a check at the end of each module that no ``nsys --start-agent``
(or ``nsys profile``) this suite started is left behind. The terminal summary saying what the
suite proved is tests/conftest.py's (it sums the counts of pytest-xdist's workers)."""

from __future__ import annotations

import pytest

from tests.faults import harness


@pytest.fixture(scope="package")
def ray_head():
    from tests.helpers import require_nsys

    require_nsys()
    head = harness.RayHead()
    try:
        head.wait_ready()
        yield head
    finally:
        head.stop()


@pytest.fixture(scope="module")
def ray_cluster(ray_head):
    """This module's connection to the session's Ray head; at the end, nothing of ours left
    capturing: no nsys agent, no nsys profile process (bounded wait for those finishing)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    harness.connect(ray_head.address)
    yield ray_head
    ray.shutdown()
    harness.assert_no_leftovers()


@pytest.fixture(scope="module")
def no_leftovers():
    """For modules that start nsys without Ray: the same end-of-module check."""
    yield
    harness.assert_no_leftovers()
