"""``torchgauge history MODEL``: a model's stored series, with level changes marked."""

from __future__ import annotations

import click


class _QuantityChoice(click.Choice):
    """The metric registry's quantities, read when first needed (``torchgauge --help`` stays torch-free)."""

    def __init__(self) -> None:
        super().__init__(())

    @property  # type: ignore[override]
    def choices(self) -> tuple[str, ...]:
        from ..harness.metrics import quantities

        return tuple(q.name for q in quantities())

    @choices.setter
    def choices(self, _: object) -> None:  # click.Choice.__init__ assigns it; the registry is the source
        pass


@click.command("history")
@click.argument("model")
@click.option(
    "--metric",
    type=_QuantityChoice(),
    default="time",
    show_default=True,
    help="Which value to follow (time: median ms per step).",
)
@click.option("--mode", type=click.Choice(["train", "eval"]), default=None, help="Only this mode (default: both).")
@click.option("--device", default=None, help="Only this device, e.g. cpu or cuda.")
@click.option("--precision", default=None, help="Only this precision.")
@click.option("--backend", default=None, help="Only this backend.")
@click.option("--machine", default=None, help="Only this machine fingerprint.")
@click.option("--threshold", default="7%", show_default=True, help="Smallest level change marked as a step.")
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    default=None,
    help="History database: a SQLite file or a postgresql:// URL (default: $TORCHGAUGE_DB or the XDG data dir).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the series and steps as JSON.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also draw the series to this file (.png, .svg or .pdf; needs matplotlib): one line per "
    "configuration, detected levels dashed, steps marked.",
)
def history_command(**kw: object) -> None:
    """Show MODEL's stored runs of one metric in time order, with detected steps."""
    from ..compare.regression import parse_threshold
    from ..harness.metrics import quantity
    from ..report.history import HISTORY_COLUMNS, history_tables, sparkline, write_history_plot
    from ..results.store import StoreError
    from ..results.stores import open_store
    from .terminal import Terminal

    term = Terminal()
    try:
        threshold = parse_threshold(str(kw["threshold"]))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--threshold") from None
    try:
        with open_store(kw["db"], create=False, readonly=True) as store:
            points = store.series(
                str(kw["model"]),
                mode=kw["mode"],
                device=kw["device"],
                precision=kw["precision"],
                backend=kw["backend"],
                machine=kw["machine"],
            )
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    if not points:
        raise click.ClickException(f"no stored run of {kw['model']!r} matches; see `torchgauge export --list`")
    tables = history_tables(points, str(kw["metric"]), threshold=threshold)
    if kw["plot"]:
        try:
            metric = str(kw["metric"])
            write_history_plot(
                tables, str(kw["plot"]), title=f"{kw['model']}: {metric}", ylabel=f"{metric} ({quantity(metric).unit})"
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise click.BadParameter(str(exc), param_hint="--plot") from None
        term.info(f"plot written to {kw['plot']}")
    if kw["as_json"]:
        term.json(
            [{"config": t.label, "columns": list(HISTORY_COLUMNS), "rows": t.rows, "steps": t.steps} for t in tables]
        )
        return
    for t in tables:
        spark = sparkline([row[5] for row in t.rows])
        term.table(
            HISTORY_COLUMNS,
            t.rows,
            title=f"{kw['model']} {t.label}: {kw['metric']}  {spark}",
            justify=("right", "left", "left", "left", "left", "right", "right", "left"),
        )
