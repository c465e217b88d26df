"""``torchgauge import FILE...``: store results files in the history database."""

from __future__ import annotations

import click


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--db", type=click.Path(dir_okay=False), default=None,
              help="History database, created if missing: a SQLite file or a postgresql:// URL "
                   "(default: $TORCHGAUGE_DB or the XDG data dir).")
@click.option("--merge", is_flag=True, help="Store all FILES as one run (the shards of one CI suite).")
def import_command(files: tuple[str, ...], db: str | None, merge: bool) -> None:
    """Store each results FILE as one run (atomically: a file is stored whole or not at all)."""
    from ..results.schema import SchemaError, load_results
    from ..results.store import StoreError
    from ..results.stores import open_store
    from .terminal import Terminal

    term = Terminal()
    try:
        docs = [(path, load_results(path)) for path in files]  # validate every file before storing any
    except SchemaError as exc:
        raise click.ClickException(str(exc)) from None
    if merge and len(docs) > 1:
        docs = [(" + ".join(files), _merge([r for _, r in docs]))]
    try:
        with open_store(db) as store:
            for path, results in docs:
                suite = store.save(results, source=f"import:{path}")
                term.info(f"{path}: {len(results.runs)} run(s) stored as run {suite} in {store.path}")
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


def _merge(parts: list) -> object:
    """One ResultsFile from shards: the first shard's env; runs from another env carry theirs."""
    from ..results.schema import ResultsFile

    first = parts[0]
    runs = []
    for part in parts:
        for record in part.runs:
            if record.env is None and part.env != first.env:
                record.env = part.env
            runs.append(record)
    return ResultsFile(env=first.env, runs=runs, created_at=first.created_at, torchgauge_version=first.torchgauge_version)
