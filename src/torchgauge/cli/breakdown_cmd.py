"""``torchgauge breakdown``: per-domain time breakdown (paper's Table 2) and per-model bars, or the
breakdown and kernel tables of trace files captured elsewhere (``--trace``)."""

from __future__ import annotations

import click

from .params import positive


@click.command("breakdown")
@click.argument("results_file", type=click.Path(dir_okay=False), required=False)
@click.option(
    "--trace",
    "traces",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Chrome/Kineto trace (.json or .json.gz, CUDA or ROCm) to analyse instead of a results file; repeatable.",
)
@click.option(
    "--top",
    type=int,
    default=10,
    show_default=True,
    callback=positive,
    help="With --trace: kernels listed in the top-kernels table.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default=None,
    help="Per-model (with --trace: per-device and per-step) stacked-bar chart (.png, .svg or .pdf).",
)
@click.option("--per-model", is_flag=True, help="Also print one row per run (with --trace: per step).")
@click.option("--json", "as_json", is_flag=True, help="Print per-run and per-domain figures as JSON.")
def breakdown_command(
    *, results_file: str | None, traces: tuple[str, ...], top: int, output: str | None, per_model: bool, as_json: bool
) -> None:
    """Show the time breakdown recorded in RESULTS_FILE (runs made with --metrics breakdown),
    or, with --trace, of profiler traces captured elsewhere."""
    from dataclasses import asdict

    if bool(results_file) == bool(traces):
        raise click.UsageError("give either RESULTS_FILE or --trace FILE (repeatable), not both or neither")
    if traces:
        _trace_breakdown(traces, top=top, output=output, per_step=per_model, as_json=as_json)
        return

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
        raise click.ClickException(
            f"no run in {results_file} has a breakdown; record one with: torchgauge run ... --metrics time,breakdown"
        )
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
            title = (
                "GPU time breakdown by domain (mean over models)"
                if kind == "cuda"
                else "CPU time breakdown by domain: ATen operators vs framework overhead (mean over models)"
            )
            term.table(columns, table, title=title, justify=["left", "left", *["right"] * (len(columns) - 2)])
            if per_model:
                names = COMPONENTS[kind]
                term.table(
                    ["model", "mode", "span ms", *(f"{COMPONENT_LABELS[n]} %" for n in names)],
                    [
                        [r.model, r.mode, r.span_ms, *(100 * r.fractions[n] for n in names)]
                        for r in rows
                        if r.kind == kind
                    ],
                    justify=["left", "left", *["right"] * (len(names) + 1)],
                )
    if output:
        term.info(f"chart written to {output}")


def _trace_breakdown(paths: tuple[str, ...], *, top: int, output: str | None, per_step: bool, as_json: bool) -> None:
    import functools

    from ..harness.breakdown import CPU_NAMES, CUDA_NAMES
    from ..report.breakdown import COMPONENT_LABELS, trace_breakdown_rows, write_breakdown_chart
    from ..workflows.trace_analysis import TraceFileError, analyse_trace_file, map_trace_files
    from .terminal import Terminal

    term = Terminal()
    try:
        analyses = map_trace_files(paths, functools.partial(analyse_trace_file, top=top))
    except TraceFileError as exc:
        raise click.ClickException(str(exc)) from None
    if output:
        try:
            write_breakdown_chart(trace_breakdown_rows(analyses), output)
        except (ValueError, RuntimeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
    if as_json:
        term.json({"traces": [a.to_dict() for a in analyses]})
        return
    for a in analyses:
        b = a.breakdown
        names = CUDA_NAMES if b["kind"] == "cuda" else CPU_NAMES
        skipped = sum(a.skipped.values())
        rank = f", rank {a.rank}" if a.rank is not None else ""
        steps = f"{b['steps']} steps" if a.steps_annotated else "no step annotations: one window"
        term.info(
            f"{a.label}: {a.platform}{rank}, {steps}, {b['span_ms']:.3f} ms; "
            f"{skipped} events skipped ({', '.join(f'{k}: {v}' for k, v in sorted(a.skipped.items()))})"
        )
        rows = [["all", b["span_ms"], *(100 * b["fractions"][n] for n in names)]]
        if per_step:
            rows += [
                [f"step {i}", s["span_ms"], *(100 * s["fractions"][n] for n in names)] for i, s in enumerate(a.per_step)
            ]
        title = f"{'GPU' if b['kind'] == 'cuda' else 'CPU (no device activity in the trace)'} time breakdown, {a.label}"
        term.table(
            ["window", "span ms", *(f"{COMPONENT_LABELS[n]} %" for n in names)],
            rows,
            title=title,
            justify=["left", *["right"] * (len(names) + 1)],
        )
        if b["kind"] != "cuda":
            continue
        shares = b["kernel_types"]
        term.info(
            "  device busy with (% of window, overlaps counted once per type): "
            + ", ".join(f"{k} {100 * v:.2f}" for k, v in shares.items())
        )
        term.table(
            ["kernel type", "time ms", "% of device time", "count"],
            [[k, v["time_us"] / 1e3, 100 * v["share"], v["count"]] for k, v in a.kernel_types.items()],
            title=f"Kernel types, {a.label}",
            justify=["left", "right", "right", "right"],
        )
        term.table(
            ["kernel", "type", "calls", "total ms", "mean us", "%"],
            [
                [
                    r.name if len(r.name) <= 80 else r.name[:77] + "...",
                    r.kind,
                    r.calls,
                    r.total_us / 1e3,
                    r.mean_us,
                    100 * r.share,
                ]
                for r in a.top_kernels
            ],
            title=f"Top {len(a.top_kernels)} kernels by total time, {a.label}",
            justify=["left", "left", "right", "right", "right", "right"],
        )
        term.table(
            ["step", "kernels", "memcpy", "memset", "device ms"],
            [[r["step"], r["kernels"], r["memcpy"], r["memset"], r["device_us"] / 1e3] for r in a.launches],
            title=f"Launches per step, {a.label}",
            justify=["right"] * 5,
        )
    if output:
        term.info(f"chart written to {output}")
