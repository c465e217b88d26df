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
    yield from local_postgres.serve_or_skip()


@pytest.fixture
def pg_url(pg_server):
    """A fresh empty database on the session's server."""
    return local_postgres.create_database(pg_server)
