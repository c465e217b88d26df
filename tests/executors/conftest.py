import importlib.util
import sys
import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SRC = Path(__file__).resolve().parents[2] / "src"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, FIXTURES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


local_ray_cluster = _load("local_ray_cluster")
local_postgres = _load("local_postgres")


@pytest.fixture(scope="module")
def pg_url():
    """An empty database on a PostgreSQL server started for this module (skipped where none can start)."""
    for server in local_postgres.serve_or_skip():
        yield local_postgres.create_database(server)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A head (no CPUs) and two nodes of one CPU each, on this machine; torchgauge from this checkout.

    Skipped, with the reason, only where Ray is missing or cannot start here.
    """
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'torchgauge[ray]')")
    markers = tmp_path_factory.mktemp("markers")
    cluster = local_ray_cluster.LocalRayCluster(env={
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
        "TG_MARKER_DIR": str(markers),
        "TORCHGAUGE_CORE_LOCK_DIR": str(tmp_path_factory.mktemp("core-locks")),
        "OMP_NUM_THREADS": "1",
    })
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
