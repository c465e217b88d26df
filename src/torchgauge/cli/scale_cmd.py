"""``torchgauge scale``: run a model over a parameter grid and fit cost = a * x^b + c."""

from __future__ import annotations

import json
from pathlib import Path

import click

from .params import SECONDS, check_device, model_file_option, non_negative, positive, split_csv


@click.command("scale")
@click.argument("model")
@click.option(
    "--vary",
    "varies",
    multiple=True,
    required=True,
    help="NAME=V1,V2,... (repeatable; the grid is their product). batch_size or any numeric model argument.",
)
@click.option("--mode", type=click.Choice(["train", "eval", "both"]), default="train", show_default=True)
@click.option("--device", default="cpu", show_default=True, callback=check_device)
@click.option("--size", type=click.Choice(["full", "smoke"]), default="full", show_default=True)
@click.option("--repeat", type=int, default=10, show_default=True, callback=positive)
@click.option("--warmup", type=int, default=3, show_default=True, callback=non_negative)
@click.option(
    "--metrics",
    default="time,memory",
    show_default=True,
    help="Metrics per point; add 'flops' to fit FLOPs too (when that metric is available).",
)
@click.option("--timeout", type=SECONDS, default=900.0, show_default=True, help="Seconds per point.")
@click.option(
    "--results",
    "results_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Raw runs, saved as each point finishes (default: torchgauge-results/scale-<time>.json).",
)
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Fits and points as JSON.")
@click.option("--plot", type=click.Path(dir_okay=False), default=None, help="Log-log plot file (.png or .svg).")
@model_file_option()
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of tables.")
@click.option("--quiet", "-q", is_flag=True)
def scale_command(
    *,
    model,
    varies,
    mode,
    device,
    size,
    repeat,
    warmup,
    metrics,
    timeout,
    results_path,
    output,
    plot,
    model_files,
    as_json,
    quiet,
) -> None:
    """Sweep MODEL over --vary grids; fit a power law plus constant to time, throughput, memory (and FLOPs)."""
    from ..harness.metrics import validate_metrics
    from ..registry import get_spec, load_model_file
    from ..report.scaling import FIT_COLUMNS, fit_rows, write_scaling_plot
    from ..runner import RunnerOptions
    from ..suite import default_output_path
    from ..workflows.scale import parse_vary, plan_sweep, point_of, run_sweep
    from .terminal import Terminal

    term = Terminal(quiet=quiet)
    for path in model_files:
        load_model_file(path)
    try:
        get_spec(model)
        axes = [parse_vary(v) for v in varies]
        points = plan_sweep(
            model,
            axes,
            modes=("train", "eval") if mode == "both" else (mode,),
            device=device,
            size=size,
            repeat=repeat,
            warmup=warmup,
            metrics=validate_metrics(split_csv(metrics)),
        )
    except (KeyError, ValueError) as exc:
        raise click.UsageError(str(exc).strip("'\"")) from None
    results_path = (
        Path(results_path)
        if results_path
        else default_output_path().with_name(default_output_path().name.replace("run-", "scale-"))
    )
    term.info(f"{len(points)} points of {model} -> {results_path}")
    options = RunnerOptions(timeout_s=timeout, model_files=tuple(str(Path(p).resolve()) for p in model_files))
    with term.progress() as progress:
        task = progress.add_task("scale", total=len(points), current="")
        sweep = run_sweep(
            points,
            axes,
            options,
            results_path,
            on_result=lambda r: progress.advance(task),
            on_start=lambda c: progress.update(task, current=json.dumps(point_of(c, axes))),
        )
    doc, curves = sweep.to_dict(), sweep.curves
    if output:
        Path(output).write_text(json.dumps(doc, indent=1))
    if plot and curves:
        write_scaling_plot(curves, plot, title=f"{model}: cost = a * x^b + c")
    failed = [r for r in sweep.runs if not r.ok]
    if as_json:
        term.json(doc)
    else:
        for c in curves:
            if c.fit is not None and c.fit.b_interval_wide:
                term.warning(
                    f"{c.mode} {c.metric} vs {c.parameter}: the exponent is not determined by these points "
                    "(95% interval wider than 0.5, or none): add grid points or repeats before reading it"
                )
        term.table(
            FIT_COLUMNS,
            fit_rows(curves),
            title=f"{model}: scaling fits",
            justify=("left", "left", "left", "left", "right", "left", "right", "left", "right", "right"),
        )
    for r in failed:
        term.warning(
            f"{json.dumps(sweep.point(r))} {r.config.mode}: {r.status}: "
            f"{(r.error or '').strip().splitlines()[-1:] or ''}"
        )
    if failed:
        raise click.exceptions.Exit(1)
