"""One local Ray cluster per test module (a Ray start costs 10-15 s here)."""

from __future__ import annotations

import pytest

from tests.helpers import local_ray_cluster


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster for the module; on teardown, no nsys agent may be left orphaned."""
    with local_ray_cluster(num_cpus=2):
        yield
