"""History backends behind one interface: :func:`open_store` picks one from a path or URL.

``results/store.py`` is the embedded SQLite store (a file path); ``stores/postgres.py`` keeps
the same tables, transactions and queries in a PostgreSQL server (a ``postgresql://`` URL),
which a fleet of machines can share. Both are :class:`~torchgauge.results.store.Store`\\ s.
"""

from __future__ import annotations

import os

from ..store import DB_ENV_VAR, Store, default_db_path

__all__ = ["POSTGRES_SCHEMES", "is_server_url", "open_store"]

# URL schemes that name a PostgreSQL server (libpq's spellings).
POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_server_url(location: str | os.PathLike) -> bool:
    """True when ``location`` names a PostgreSQL server rather than a SQLite file."""
    return str(location).startswith(POSTGRES_SCHEMES)


def open_store(location: str | os.PathLike | None = None, *, create: bool = True, readonly: bool = False) -> Store:
    """The history store at ``location``: a SQLite file path or a ``postgresql://`` URL.

    Args:
        location: ``history.sqlite`` or ``postgresql://user@host:5432/torchgauge``; None:
            ``$TORCHGAUGE_DB`` (either kind), else the default SQLite file.
        create: False to refuse a store that does not exist yet (readers); for PostgreSQL,
            a database without torchgauge's tables.
        readonly: open for reading only (SQLite ``mode=ro``; PostgreSQL: never creates or migrates
            tables, as ``create=False``): read-only commands never alter a history.

    Raises:
        StoreError: the store cannot be opened (missing, unreachable, newer schema).

    Example:
        >>> with open_store("postgresql://bench@db.lab:5432/torchgauge") as store:  # doctest: +SKIP
        ...     print(store.suites()[-1])
    """
    if location is None or str(location) == "":
        location = os.environ.get(DB_ENV_VAR) or default_db_path()
    if is_server_url(location):
        from .postgres import PostgresStore

        return PostgresStore(str(location), create=create and not readonly)
    return Store(location, create=create, readonly=readonly)
