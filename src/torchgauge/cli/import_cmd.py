"""``torchgauge import FILE...``: store results files in the history database."""

from __future__ import annotations

import click


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    default=None,
    help="History database, created if missing: a SQLite file or a postgresql:// URL "
    "(default: $TORCHGAUGE_DB or the XDG data dir).",
)
@click.option(
    "--merge",
    is_flag=True,
    help="Store all FILES as one run (the shards of one CI suite); refused when they ran on different hardware.",
)
@click.option(
    "--allow-mixed-hardware",
    is_flag=True,
    help="With --merge: store shards from different hardware as one run anyway; each run keeps its own "
    "environment and compare reports the mix.",
)
def import_command(files: tuple[str, ...], db: str | None, merge: bool, allow_mixed_hardware: bool) -> None:
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
        mixed = _hardware_groups(docs)
        if len(mixed) > 1 and not allow_mixed_hardware:
            groups = "; ".join(f"{hardware}: {', '.join(paths)}" for hardware, paths in mixed.items())
            raise click.ClickException(
                f"the shards ran on {len(mixed)} different hardware types ({groups}); their "
                "timings cannot be merged into one run. Import them separately, or pass "
                "--allow-mixed-hardware to merge them with each run's hardware recorded"
            )
        docs = [(" + ".join(files), _merge([r for _, r in docs]))]
        if len(mixed) > 1:
            term.warning(f"merged shards from {len(mixed)} hardware types; compare will report the mix")
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
    return ResultsFile(
        env=first.env, runs=runs, created_at=first.created_at, torchgauge_version=first.torchgauge_version
    )


def _hardware_groups(docs: list) -> dict[str, list[str]]:
    """Hardware description -> the files measured on it (fingerprints recomputed from the hardware fields)."""
    from ..harness.env import describe_hardware, machine_fingerprint

    groups: dict[str, tuple[str, list[str]]] = {}
    for path, results in docs:
        env = results.env
        key = machine_fingerprint(env) if env.get("cpu_model") else str(env.get("machine_fingerprint"))
        groups.setdefault(key, (describe_hardware(env), []))[1].append(str(path))
    return {f"{label} [{key}]": paths for key, (label, paths) in groups.items()}
