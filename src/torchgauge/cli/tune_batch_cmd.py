"""``torchgauge tune-batch``: search each model's inference batch size with the highest throughput."""

from __future__ import annotations

from pathlib import Path

import click

from .params import MEBIBYTES, SECONDS, check_device, model_file_option, non_negative, positive, selected_models


def _within(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not 0.0 <= value < 1.0:
        raise click.BadParameter(f"{value} is out of range; accepted: a fraction in [0, 1), e.g. 0.05")
    return value


@click.command("tune-batch")
@click.argument("patterns", nargs=-1, required=True)
@click.option("--device", default="cpu", show_default=True, callback=check_device, help="cpu, cuda, cuda:N, ...")
@click.option(
    "--max-batch",
    type=int,
    default=None,
    callback=positive,
    help="Largest batch size tried [default: tune_batch.DEFAULT_MAX_BATCH].",
)
@click.option(
    "--budget-s", type=SECONDS, default=None, help="Seconds of search per model [default: tune_batch.DEFAULT_BUDGET_S]."
)
@click.option("--repeat", type=int, default=10, show_default=True, callback=positive, help="Timed iterations per size.")
@click.option(
    "--warmup", type=int, default=3, show_default=True, callback=non_negative, help="Untimed iterations first."
)
@click.option("--size", type=click.Choice(["full", "smoke"]), default="full", show_default=True)
@click.option(
    "--within",
    type=float,
    default=0.0,
    show_default=True,
    callback=_within,
    help="Pick the smallest size within this fraction of the best throughput (0: the best).",
)
@click.option(
    "--store",
    type=click.Path(dir_okay=False),
    default=None,
    help="Batch-size store file [default: $TORCHGAUGE_BATCH_STORE or the user data dir].",
)
@click.option("--no-save", is_flag=True, help="Print the curves without writing the store.")
@click.option("--timeout", type=SECONDS, default=900.0, show_default=True, help="Seconds per size at most.")
@click.option(
    "--memory-limit",
    type=MEBIBYTES,
    default=None,
    help="MiB of resident memory per worker before status oom (the CPU's out-of-memory point).",
)
@model_file_option()
@click.option("--json", "as_json", is_flag=True, help="Print the searches as JSON instead of tables.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def tune_batch_command(**kw: object) -> None:
    """Find the inference batch size with the highest throughput for models matching PATTERNS.

    Starts at 1 and doubles until out of memory, --max-batch or --budget-s; each size runs
    in a fresh worker. The choice is stored per model and device name for
    `torchgauge run --batch-size auto`.
    """
    from ..runner import RunnerOptions
    from ..workflows.tune_batch import (
        DEFAULT_BUDGET_S,
        DEFAULT_MAX_BATCH,
        BatchSizeStore,
        StoreError,
        device_name,
        tune_models,
    )
    from .terminal import Terminal

    term = Terminal(quiet=bool(kw["quiet"]))
    models = selected_models(kw["patterns"], kw["model_files"])
    try:
        name = device_name(str(kw["device"]))
        store = None if kw["no_save"] else BatchSizeStore(kw["store"])
    except (StoreError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    runner_options = RunnerOptions(
        timeout_s=kw["timeout"],
        memory_limit_mb=kw["memory_limit"],
        model_files=tuple(str(Path(p).resolve()) for p in kw["model_files"]),
    )
    term.info(f"tuning {len(models)} model(s) on {kw['device']} ({name}), size {kw['size']}")
    searches = tune_models(
        models,
        str(kw["device"]),
        store,
        max_batch=DEFAULT_MAX_BATCH if kw["max_batch"] is None else kw["max_batch"],
        budget_s=DEFAULT_BUDGET_S if kw["budget_s"] is None else kw["budget_s"],
        repeat=kw["repeat"],
        warmup=kw["warmup"],
        size=str(kw["size"]),
        within=kw["within"],
        runner_options=runner_options,
        on_point=lambda m, p: term.info(_point_line(m, p)),
    )
    if kw["as_json"]:
        term.json([s.as_dict() for s in searches])
    else:
        for s in searches:
            _print_curve(term, s)
    for s in searches:
        for doubt in s.doubts:
            term.warning(f"{s.model}: {doubt}; rerun with more --repeat on a quieter machine before relying on it")
        if s.choice is None:
            first = s.points[0]
            term.warning(f"{s.model}: no batch size ran ({first.status}: {first.error or 'no detail'}); nothing stored")
    if store is not None and any(s.choice for s in searches):
        term.info(f"batch sizes stored in {store.path}")
    if not any(s.choice for s in searches):
        raise click.exceptions.Exit(1)


def _point_line(model: str, p) -> str:
    if p.ok:
        return f"  {model:<32} batch {p.batch_size:>6}  {p.median_ms:10.3f} ms  {p.throughput:12.1f} samples/s"
    return f"  {model:<32} batch {p.batch_size:>6}  {p.status}" + (f": {p.error}" if p.error else "")


def _print_curve(term, search) -> None:
    chosen = search.choice.batch_size if search.choice else None
    rows = [
        [
            p.batch_size,
            p.status,
            p.median_ms,
            p.throughput,
            p.cpu_peak_mb,
            p.gpu_peak_mb,
            "<- chosen" if p.batch_size == chosen else "",
        ]
        for p in search.points
    ]
    title = (
        f"{search.model} on {search.device_name} ({search.size}): stopped by {search.stop}; "
        f"chosen {chosen if chosen is not None else 'none'} (default {search.default_batch_size})"
    )
    term.table(
        ("batch", "status", "median ms", "samples/s", "peak CPU MB", "peak GPU MB", ""),
        rows,
        title=title,
        justify=("right", "left", "right", "right", "right", "right", "left"),
    )
