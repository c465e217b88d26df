"""``torchgauge compare-backends``: candidate / baseline ratios of time and memory per model."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..workflows.compare_backends import DEFAULT_BASELINE, DEFAULT_CANDIDATE
from .params import (
    MEBIBYTES,
    SECONDS,
    bad_config,
    check_device,
    model_file_option,
    non_negative,
    positive,
    selected_models,
)


@click.command("compare-backends")
@click.argument("patterns", nargs=-1)
@click.option(
    "--baseline", default=None, help=f"Baseline backend [default: {DEFAULT_BASELINE}; with --from: every run of BASE]."
)
@click.option(
    "--candidate",
    default=None,
    help=f"Candidate backend [default: {DEFAULT_CANDIDATE}; with --from: every run of CAND].",
)
@click.option(
    "--from",
    "from_files",
    nargs=2,
    type=click.Path(dir_okay=False),
    default=None,
    metavar="BASE.json CAND.json",
    help="Compare two existing results files instead of running (they may be the same file).",
)
@click.option("--mode", type=click.Choice(["train", "eval", "both"]), default="both", show_default=True)
@click.option("--device", default="cpu", show_default=True, callback=check_device, help="cpu, cuda, cuda:N, ...")
@click.option("--size", type=click.Choice(["full", "smoke"]), default="full", show_default=True)
@click.option("--repeat", type=int, default=10, show_default=True, callback=positive, help="Timed iterations per run.")
@click.option(
    "--warmup",
    type=int,
    default=3,
    show_default=True,
    callback=non_negative,
    help="Untimed iterations first (compilation happens here).",
)
@click.option("--accuracy", is_flag=True, help="Check the candidate's outputs against an eager fp64 reference.")
@click.option(
    "--compile-scope",
    type=click.Choice(["forward", "step"]),
    default="forward",
    show_default=True,
    help="What the candidate compiles: the forward only, or the whole step (forward, loss, backward, "
    "optimizer step) as the dynamo harness and the HUD's training numbers do: use 'step' to compare "
    "with the HUD.",
)
@click.option(
    "--csv",
    "csv_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the dynamo harness's performance CSV (speedup, abs_latency, compilation_latency, "
    "compression_ratio, ...); with both modes, FILE_training.csv and FILE_inference.csv.",
)
@click.option("--timeout", type=SECONDS, default=900.0, show_default=True, help="Seconds per run before it is killed.")
@click.option(
    "--memory-limit", type=MEBIBYTES, default=None, help="MiB of resident memory per worker before status oom."
)
@model_file_option()
@click.option(
    "--results-dir",
    type=click.Path(file_okay=False),
    default="torchgauge-results",
    show_default=True,
    help="Where the two runs' results files are written.",
)
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write the comparison as JSON here."
)
@click.option(
    "--chart",
    type=click.Path(dir_okay=False),
    default=None,
    help="Bar chart file (.png, .svg or .pdf): one bar per model per metric, log scale, 1.0 marked.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON instead of tables.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def compare_backends_command(**kw: object) -> None:
    """Run PATTERNS with two backends (or read two results files) and compare them model by model.

    Speedup is baseline / candidate time: above 1 the candidate is faster (the HUD's
    direction). The "cand/base" columns are ratios candidate / baseline: below 1 the
    candidate is faster or uses less memory. To compare with the HUD's inductor numbers, use
    --compile-scope step (the dynamo harness compiles the whole training iteration).
    """
    from ..compare.backend_ratios import compare_backends
    from ..compare.matching import CompareError
    from ..config import ConfigError
    from ..results.schema import SchemaError
    from ..workflows.compare_backends import read_backend_pair
    from .terminal import Terminal

    term = Terminal(quiet=bool(kw["quiet"]))
    try:
        if kw["from_files"]:
            if kw["patterns"]:
                raise click.UsageError(
                    "give either PATTERNS (run both backends) or --from BASE.json CAND.json, not both"
                )
            if kw["compile_scope"] != "forward":
                raise click.UsageError("--compile-scope applies when running; results files record theirs in options")
            base_runs, cand_runs, baseline, candidate = read_backend_pair(
                *kw["from_files"], kw["baseline"], kw["candidate"]
            )
        else:
            if not kw["patterns"]:
                raise click.UsageError("give model PATTERNS to run, or --from BASE.json CAND.json")
            baseline = kw["baseline"] or DEFAULT_BASELINE
            candidate = kw["candidate"] or DEFAULT_CANDIDATE
            base_runs, cand_runs = _run_both(kw, baseline, candidate, term)
        cmp = compare_backends(base_runs, cand_runs, baseline=baseline, candidate=candidate)
    except ConfigError as exc:
        if exc.option in ("baseline", "candidate") and kw["from_files"]:  # a file with several backends
            raise click.UsageError(str(exc)) from None
        raise bad_config(exc) from None
    except (SchemaError, CompareError) as exc:
        raise click.ClickException(str(exc)) from None
    _report(cmp, kw, term)
    if kw["csv_path"]:
        paths = _write_csv(kw["csv_path"], base_runs, cand_runs)
        term.info("dynamo performance CSV written to " + ", ".join(str(p) for p in paths))


def _run_both(kw: dict, baseline: str, candidate: str, term) -> tuple[list, list]:
    """Run the selected models with both backends, interleaved; each backend's results file is kept."""
    from ..harness.env import collect_env
    from ..runner import RunnerOptions
    from ..workflows.compare_backends import plan_backend_pair

    models = selected_models(kw["patterns"], kw["model_files"])
    pair = plan_backend_pair(
        models,
        modes=("train", "eval") if kw["mode"] == "both" else (kw["mode"],),
        baseline=baseline,
        candidate=candidate,
        compile_scope=kw["compile_scope"],
        accuracy=bool(kw["accuracy"]),
        results_dir=kw["results_dir"],
        device=kw["device"],
        size=kw["size"],
        repeat=kw["repeat"],
        warmup=kw["warmup"],
    )
    runner_options = RunnerOptions(
        timeout_s=kw["timeout"],
        memory_limit_mb=kw["memory_limit"],
        model_files=tuple(str(Path(p).resolve()) for p in kw["model_files"]),
    )
    term.info(
        f"{len(pair.configs)} runs of {len(models)} models, {baseline} and {candidate} interleaved -> "
        f"{pair.paths[baseline]}, {pair.paths[candidate]}"
    )
    with term.progress() as progress:
        task = progress.add_task("compare-backends", total=len(pair.configs), current="")
        return pair.run(
            runner_options,
            collect_env(),
            on_result=lambda r: progress.advance(task),
            on_start=lambda c: progress.update(task, current=f"{c.model} {c.mode} {c.backend}"),
        )


def _report(cmp, kw: dict, term) -> None:
    from ..report.charts import ChartError
    from ..report.comparisons import (
        UNMATCHED_COLUMNS,
        backend_chart,
        backend_columns,
        backend_rows,
        compiler_summary_columns,
        compiler_summary_rows,
        unmatched_rows,
    )

    if kw["output"]:
        Path(kw["output"]).parent.mkdir(parents=True, exist_ok=True)
        Path(kw["output"]).write_text(json.dumps(cmp.to_dict(), indent=1) + "\n")
    if kw["chart"]:
        try:
            backend_chart(cmp, kw["chart"])
        except ChartError as exc:
            raise click.ClickException(str(exc)) from None
    if kw["as_json"]:
        term.json(cmp.to_dict())
    else:
        if cmp.rows:
            columns, justify = backend_columns()
            term.table(
                columns,
                backend_rows(cmp),
                title=f"{cmp.candidate} vs {cmp.baseline}: speedup = {cmp.baseline} / {cmp.candidate} time "
                f"(> 1: {cmp.candidate} faster); cand/base = {cmp.candidate} / {cmp.baseline} "
                f"(< 1: {cmp.candidate} better)",
                justify=justify,
            )
            columns, justify = compiler_summary_columns()
            term.table(
                columns,
                compiler_summary_rows(cmp),
                title=f"{cmp.candidate} summary (speedup and compression ratio > 1: {cmp.candidate} better)",
                justify=justify,
            )
        else:
            term.warning("no model could be compared: see the list below")
        if cmp.unmatched:
            term.table(
                UNMATCHED_COLUMNS,
                unmatched_rows(cmp.unmatched),
                title=f"not compared ({len(cmp.failed_candidate)} failed with {cmp.candidate})",
            )
        undecided = [f"{r.model}/{r.mode}" for r in cmp.rows if r.verdict == "inconclusive"]
        if undecided:
            term.warning(
                f"{len(undecided)} time verdict(s) inconclusive: too few samples for the rank test to reach "
                "its alpha, so a difference could not count (rerun with more --repeat): " + ", ".join(undecided)
            )
        if cmp.failed_accuracy:
            term.warning(
                f"failed the accuracy check with {cmp.candidate} (left out of the geometric means): "
                + ", ".join(f"{r.model}/{r.mode}" for r in cmp.failed_accuracy)
            )
    for flag, what in (("output", "comparison"), ("chart", "chart")):
        if kw[flag]:
            term.info(f"{what} written to {kw[flag]}")


def _write_csv(path: str, base_runs, cand_runs) -> list:
    """The dynamo harness's performance CSV of the candidate against the baseline; the paths written."""
    from ..compare.dynamo_perf import dynamo_performance_rows
    from ..report.dynamo_csv import write_performance_csv

    return write_performance_csv(path, dynamo_performance_rows(base_runs, cand_runs))
