import pytest


@pytest.fixture(scope="session")
def pg_server(fixture_module):
    """URL of a PostgreSQL server started for this session (skipped, with the reason, where none can start)."""
    yield from fixture_module("local_postgres").serve_or_skip()


@pytest.fixture
def pg_url(pg_server, fixture_module):
    """A fresh empty database on the session's server."""
    return fixture_module("local_postgres").create_database(pg_server)
