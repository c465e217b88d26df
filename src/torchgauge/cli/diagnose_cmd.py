"""``torchgauge diagnose``: find launch storms, tiny copies, syncs, heavy traffic and idle gaps
in a model profiled here, or in trace files captured elsewhere (``--trace``)."""

from __future__ import annotations

import click

from ..workflows.diagnose import DIAGNOSE_STEPS
from .params import check_device, model_file_option, positive, selected_models


@click.command("diagnose")
@click.argument("model", required=False)
@click.option(
    "--trace",
    "traces",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Chrome/Kineto trace (.json or .json.gz) to diagnose instead of profiling MODEL; repeatable. "
    "Source lines need a trace recorded with_stack=True.",
)
@click.option("--mode", type=click.Choice(["train", "eval", "both"]), default="both", show_default=True)
@click.option("--device", default="cpu", show_default=True, callback=check_device, help="cpu, cuda, cuda:N, ...")
@click.option("--size", type=click.Choice(["full", "smoke"]), default="full", show_default=True)
@click.option("--batch-size", type=int, default=None, callback=positive, help="Override the model's batch size.")
@click.option(
    "--steps", type=int, default=DIAGNOSE_STEPS, show_default=True, callback=positive, help="Profiled iterations."
)
@click.option(
    "--profile",
    "profile_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Also write the profiled pass as a Chrome/Perfetto trace into this directory.",
)
@model_file_option()
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages.")
def diagnose_command(
    *,
    model: str | None,
    traces: tuple[str, ...],
    mode: str,
    device: str,
    size: str,
    batch_size: int | None,
    steps: int,
    profile_dir: str | None,
    model_files: tuple[str, ...],
    as_json: bool,
    quiet: bool,
) -> None:
    """Profile MODEL (or read --trace files) and report performance bugs, each with its operator,
    count and cost per step and source line."""
    from .terminal import Terminal

    term = Terminal(quiet=quiet)
    if bool(model) == bool(traces):
        raise click.UsageError("give either MODEL or --trace FILE (repeatable), not both or neither")
    if traces:
        _diagnose_traces(term, traces, model_files, as_json)
        return
    from ..workflows.diagnose import diagnose_modes

    matches = selected_models([model], model_files)
    if matches != [model]:
        raise click.UsageError(
            f"{model!r} matches {len(matches)} models; accepted: one registered name, e.g. {matches[0]}"
        )
    modes = ("train", "eval") if mode == "both" else (mode,)
    results = diagnose_modes(
        model,
        modes,
        device,
        size=size,
        batch_size=batch_size,
        steps=steps,
        profile_dir=profile_dir,
        on_event=term.info,
        on_unsupported=term.warning,
    )
    if as_json:
        term.json({"runs": [d.to_dict() for d in results]})
        return
    for d in results:
        _print_findings(
            term,
            f"{d.model} {d.mode} on {d.device} (batch {d.batch_size}): {d.span_ms / d.steps:.2f} ms per profiled step",
            d.findings,
        )
        if d.trace_path:
            term.info(f"trace written to {d.trace_path}")


def _print_findings(term, title: str, findings: list) -> None:
    if not findings:
        term.success(f"{title}: no findings")
        return
    term.table(
        ("rule", "operator", "per step", "ms / step", "source"),
        [[f.rule, f.operator, f.count, f.time_ms, f.source or "-"] for f in findings],
        title=title,
        justify=("left", "left", "right", "right", "left"),
    )
    for f in findings:
        term.info(f"  [{f.rule}] {f.message}")


def _diagnose_traces(term, paths: tuple[str, ...], model_files: tuple[str, ...], as_json: bool) -> None:
    import functools

    from ..workflows.trace_analysis import TraceFileError, diagnose_trace_file, map_trace_files

    try:
        results = map_trace_files(paths, functools.partial(diagnose_trace_file, model_files=model_files))
    except TraceFileError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        term.json({"traces": [d.to_dict() for d in results]})
        return
    for d in results:
        _print_findings(term, f"{d.label}: {d.steps} steps, {d.span_ms / d.steps:.2f} ms per step", d.findings)
