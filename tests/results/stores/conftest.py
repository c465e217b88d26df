import importlib.util
import sys
from pathlib import Path

import pytest

_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, _FIXTURES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


local_postgres = _load("local_postgres")


@pytest.fixture(scope="session")
def pg_server():
    """URL of a PostgreSQL server started for this session (skipped, with the reason, where none can start)."""
    pytest.importorskip("psycopg", reason="psycopg 3 is not installed (pip install 'torchgauge[postgres]')")
    try:
        context = local_postgres.local_postgres()
        url = context.__enter__()
    except local_postgres.PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL server could start: {exc}")
    yield url
    context.__exit__(None, None, None)


@pytest.fixture
def pg_url(pg_server):
    """A fresh empty database on the session's server."""
    return local_postgres.create_database(pg_server)
