import os
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def pg_url(fixture_module):
    """An empty database on a PostgreSQL server started for this module (skipped where none can start)."""
    local_postgres = fixture_module("local_postgres")
    for server in local_postgres.serve_or_skip():
        yield local_postgres.create_database(server)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory, fixture_module):
    """A head (no CPUs) and two nodes of one CPU each, on this machine; torchgauge from this checkout.

    Skipped, with the reason, only where Ray is missing or cannot start here.
    """
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'torchgauge[ray]')")
    local_ray_cluster = fixture_module("local_ray_cluster")
    markers = tmp_path_factory.mktemp("markers")
    cluster = local_ray_cluster.LocalRayCluster(
        env={
            "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
            "TG_MARKER_DIR": str(markers),
            "TORCHGAUGE_CORE_LOCK_DIR": str(tmp_path_factory.mktemp("core-locks")),
            "OMP_NUM_THREADS": "1",
        }
    )
    try:
        cluster.start()
        cluster.add_node("a", cpus=1)
        cluster.add_node("b", cpus=1)
    except local_ray_cluster.RayUnavailable as exc:
        cluster.stop()
        pytest.skip(f"no Ray cluster could start here: {exc}")
    cluster.markers = markers
    yield cluster
    cluster.stop()
