"""One local Ray cluster per test module (a Ray start costs 10-15 s here)."""

from __future__ import annotations

import pytest

from tests.helpers import assert_no_leaked_agents


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster for the module; on teardown, no nsys agent may be left orphaned."""
    import ray

    from verlprof.backends.nsys.cli import list_agents

    before = {a.pid for a in list_agents()}
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR",
             log_to_driver=False)
    yield
    ray.shutdown()
    assert_no_leaked_agents(before)
