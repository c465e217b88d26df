"""``torchgauge export RUN``: a stored run as a results JSON file (or ``--list`` the stored runs)."""

from __future__ import annotations

import click


@click.command("export")
@click.argument("run", required=False)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default=None,
    help="Results JSON to write (default: print to stdout).",
)
@click.option("--list", "list_runs", is_flag=True, help="List the stored runs instead.")
@click.option("--machine", default=None, help="Machine fingerprint that latest/previous refer to (and --list shows).")
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    default=None,
    help="History database: a SQLite file or a postgresql:// URL (default: $TORCHGAUGE_DB or the XDG data dir).",
)
@click.option("--json", "as_json", is_flag=True, help="With --list: print JSON instead of a table.")
@click.option(
    "--include-incomplete",
    is_flag=True,
    help="latest/previous may name an interrupted run (by default they skip incomplete runs).",
)
def export_command(
    run: str | None,
    output: str | None,
    list_runs: bool,
    machine: str | None,
    db: str | None,
    as_json: bool,
    include_incomplete: bool,
) -> None:
    """Write stored RUN (an id, latest or previous) as a results file; --list shows the ids."""
    from dataclasses import asdict

    from ..results.store import StoreError
    from ..results.stores import open_store
    from .terminal import Terminal

    term = Terminal()
    if not list_runs and not run:
        raise click.UsageError("give a RUN (an id, latest or previous) or --list")
    try:
        with open_store(db, create=False, readonly=True) as store:
            if list_runs:
                suites = store.suites(machine=machine)
                if as_json:
                    term.json([asdict(s) for s in suites])
                else:
                    term.table(
                        ("run", "created", "runs", "torch", "git", "machine", "device", "source", "complete"),
                        [
                            [
                                s.id,
                                s.created_at,
                                s.runs,
                                s.torch_version,
                                (s.torch_git_version or "")[:10],
                                s.machine_fingerprint,
                                s.device_name,
                                s.source,
                                "yes" if s.complete else "no",
                            ]
                            for s in suites
                        ],
                    )
                return
            results = store.load(store.resolve(run, machine=machine, include_incomplete=include_incomplete))
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if output:
        results.write(output)
        term.info(f"{len(results.runs)} run(s) written to {output}")
    else:
        term.markdown(results.to_json())
