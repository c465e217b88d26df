"""``torchgauge compare-devices``: time ratios A / B of the same models on two devices or builds."""

from __future__ import annotations

import json
from pathlib import Path

import click


def _tie_band(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not 0.0 <= value < 1.0:
        raise click.BadParameter(f"{value} is out of range; accepted: a fraction in [0, 1), e.g. 0.02")
    return value


@click.command("compare-devices")
@click.argument("a_file", metavar="A.json", type=click.Path(dir_okay=False))
@click.argument("b_file", metavar="B.json", type=click.Path(dir_okay=False))
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write the comparison as JSON here."
)
@click.option(
    "--chart",
    type=click.Path(dir_okay=False),
    default=None,
    help="Bar chart file (.png, .svg or .pdf): one bar per model, log scale, 1.0 marked.",
)
@click.option(
    "--tie-band",
    type=float,
    default=None,
    callback=_tie_band,
    help="Ratios within this fraction of 1 count as ties, not wins [default: stats.ratios.DEFAULT_TIE_BAND].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON instead of tables.")
def compare_devices_command(
    *, a_file: str, b_file: str, output: str | None, chart: str | None, tie_band: float | None, as_json: bool
) -> None:
    """Compare A.json and B.json: per-model time ratio A / B (< 1: A faster) for train and eval."""
    from ..compare.devices import compare_devices
    from ..compare.matching import CompareError
    from ..report.charts import ChartError
    from ..report.comparisons import (
        DEVICE_COLUMNS,
        DEVICE_JUSTIFY,
        UNMATCHED_COLUMNS,
        device_chart,
        device_rows,
        device_summary_rows,
        unmatched_rows,
    )
    from ..results.schema import SchemaError, load_results
    from ..stats.ratios import DEFAULT_TIE_BAND
    from .terminal import Terminal

    term = Terminal()
    try:
        a, b = load_results(a_file), load_results(b_file)
        a_label, b_label = Path(a_file).stem, Path(b_file).stem
        if a_label == b_label:
            a_label, b_label = f"A:{a_label}", f"B:{b_label}"
        cmp = compare_devices(
            a, b, a_label=a_label, b_label=b_label, tie_band=DEFAULT_TIE_BAND if tie_band is None else tie_band
        )
    except (SchemaError, CompareError) as exc:
        raise click.ClickException(str(exc)) from None
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps(cmp.to_dict(), indent=1) + "\n")
    if chart:
        try:
            device_chart(cmp, chart)
        except ChartError as exc:
            raise click.ClickException(str(exc)) from None
    if as_json:
        term.json(cmp.to_dict())
    else:
        term.info(f"A = {cmp.a}: {cmp.a_env}")
        term.info(f"B = {cmp.b}: {cmp.b_env}")
        if cmp.rows:
            term.table(
                DEVICE_COLUMNS,
                device_rows(cmp),
                justify=DEVICE_JUSTIFY,
                title="median time: A speedup = B / A (> 1: A faster); A / B (< 1: A faster)",
            )
            term.table(
                ("mode", "A speedup geomean", "geomean A / B", "A wins", "B wins", "ties"),
                device_summary_rows(cmp),
                title=f"summary (ties: within {cmp.tie_band:.0%} of 1)",
                justify=("left", "right", "right", "right", "right", "right"),
            )
        else:
            term.warning("no configuration could be matched between the two files")
        undecided = [f"{r.model}/{r.mode}" for r in cmp.rows if r.verdict == "inconclusive"]
        if undecided:
            term.warning(
                f"{len(undecided)} time verdict(s) inconclusive: too few samples for the rank test to reach "
                "its alpha, so a difference could not count (rerun with more --repeat): " + ", ".join(undecided)
            )
        if cmp.unmatched:
            term.table(UNMATCHED_COLUMNS, unmatched_rows(cmp.unmatched), title="not compared")
    if output:
        term.info(f"comparison written to {output}")
    if chart:
        term.info(f"chart written to {chart}")
