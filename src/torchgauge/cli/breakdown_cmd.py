"""``torchgauge breakdown``: per-domain time breakdown (paper's Table 2) and per-model bars."""

from __future__ import annotations

import click


@click.command("breakdown")
@click.argument("results_file", type=click.Path(dir_okay=False))
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Per-model stacked-bar chart (.png, .svg or .pdf).")
@click.option("--per-model", is_flag=True, help="Also print one row per run.")
@click.option("--json", "as_json", is_flag=True, help="Print per-run and per-domain figures as JSON.")
def breakdown_command(*, results_file: str, output: str | None, per_model: bool, as_json: bool) -> None:
    """Show the time breakdown recorded in RESULTS_FILE (runs made with --metrics breakdown)."""
    from dataclasses import asdict

    from ..report.breakdown import COMPONENT_LABELS, COMPONENTS, breakdown_rows, domain_table, write_breakdown_chart
    from ..results.schema import SchemaError, load_results
    from .terminal import Terminal

    term = Terminal()
    try:
        results = load_results(results_file)
    except SchemaError as exc:
        raise click.ClickException(str(exc)) from None
    rows = breakdown_rows(results.runs)
    if not rows:
        raise click.ClickException(f"no run in {results_file} has a breakdown; "
                                   "record one with: torchgauge run ... --metrics time,breakdown")
    kinds = [k for k in COMPONENTS if any(r.kind == k for r in rows)]
    if output:
        try:
            write_breakdown_chart(rows, output)
        except (ValueError, RuntimeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
    if as_json:
        doc = {"runs": [asdict(r) for r in rows], "domains": {}}
        for kind in kinds:
            columns, table = domain_table(rows, kind)
            doc["domains"][kind] = [dict(zip(columns, row)) for row in table]
        term.json(doc)
    else:
        for kind in kinds:
            columns, table = domain_table(rows, kind)
            title = "GPU time breakdown by domain (mean over models)" if kind == "cuda" else \
                "CPU time breakdown by domain: ATen operators vs framework overhead (mean over models)"
            term.table(columns, table, title=title, justify=["left", "left", *["right"] * (len(columns) - 2)])
            if per_model:
                names = COMPONENTS[kind]
                term.table(["model", "mode", "span ms", *(f"{COMPONENT_LABELS[n]} %" for n in names)],
                           [[r.model, r.mode, r.span_ms, *(100 * r.fractions[n] for n in names)]
                            for r in rows if r.kind == kind],
                           justify=["left", "left", *["right"] * (len(names) + 1)])
    if output:
        term.info(f"chart written to {output}")
