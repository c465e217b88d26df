"""``torchgauge report``: the dashboard, a static HTML site of a history database or of results files."""

from __future__ import annotations

import click

from .params import threshold as _threshold


@click.command("report")
@click.argument("results_files", nargs=-1, type=click.Path(dir_okay=False))
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    default=None,
    help="History database to report (default without RESULTS_FILES: $TORCHGAUGE_DB or the XDG data dir).",
)
@click.option("--output", "-o", type=click.Path(file_okay=False), required=True, help="Folder of the site (created).")
@click.option(
    "--coverage",
    "coverage_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="A `torchgauge coverage --output` JSON file for the coverage figure.",
)
@click.option(
    "--threshold",
    default="7%",
    show_default=True,
    callback=_threshold,
    help="Relative change that counts, for the verdicts and the step markers.",
)
@click.option(
    "--machine", default=None, help="Machine fingerprint whose latest run the index shows (default: the newest run's)."
)
@click.option("--title", default=None, help="Title shown on every page.")
def report_command(
    *,
    results_files: tuple[str, ...],
    db: str | None,
    output: str,
    coverage_file: str | None,
    threshold: float,
    machine: str | None,
    title: str | None,
) -> None:
    """Write a dashboard of RESULTS_FILES (oldest first; the last is the latest run) or of --db into --output.

    The site opens from the file system with no network: index.html (the latest run, sortable and
    filterable), one page per model (each metric's history with steps marked) and figures.html
    (breakdown, compiler and device comparisons, coverage).
    """
    import json

    from ..report.site import DEFAULT_TITLE, SiteError, build_site, build_site_from_results
    from ..results.schema import SchemaError
    from ..results.store import Store, StoreError, default_db_path
    from .terminal import Terminal

    term = Terminal()
    if results_files and db:
        raise click.UsageError("give RESULTS_FILES or --db, not both")
    coverage = None
    if coverage_file:
        try:
            with open(coverage_file) as fh:
                coverage = json.load(fh)
        except (OSError, json.JSONDecodeError) as exc:
            raise click.BadParameter(
                f"cannot read {coverage_file}: {exc}; accepted: the JSON of `torchgauge coverage --output`",
                param_hint="--coverage",
            ) from None
        if not isinstance(coverage, dict) or "summary" not in coverage:
            raise click.BadParameter(
                f"{coverage_file} has no 'summary'; accepted: the JSON of `torchgauge coverage --output`",
                param_hint="--coverage",
            )
    options = {"title": title or DEFAULT_TITLE, "threshold": threshold, "coverage": coverage, "machine": machine}
    try:
        if results_files:
            built = build_site_from_results(results_files, output, **options)
        else:
            with Store(db or default_db_path(), create=False) as store:
                built = build_site(store, output, **options)
    except (SchemaError, StoreError, SiteError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    term.success(
        f"wrote {built.pages} pages ({built.models} models, {built.bytes / 1e6:.1f} MB) to {built.path}; "
        f"open {built.path / 'index.html'}"
    )
