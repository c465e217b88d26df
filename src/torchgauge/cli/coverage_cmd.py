"""``torchgauge coverage``: which PyTorch APIs and ATen operators the suite exercises."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from .params import SECONDS, fraction, model_file_option, selected_models


@click.command("coverage")
@click.argument("patterns", nargs=-1)
@click.option("--mode", type=click.Choice(["train", "eval", "both"]), default="both", show_default=True)
@click.option("--size", type=click.Choice(["full", "smoke"]), default="smoke", show_default=True)
@click.option(
    "--against",
    "against_tag",
    default="mlperf",
    show_default=True,
    help="Compare the suite with the models carrying this tag.",
)
@click.option(
    "--target", default="90%", show_default=True, callback=fraction, help="Coverage the suggested CI subset must reach."
)
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write the full JSON here.")
@click.option("--chart", type=click.Path(dir_okay=False), default=None, help="Per-domain bar chart (.png or .svg).")
@click.option("--timeout", type=SECONDS, default=300.0, show_default=True, help="Seconds per model and mode.")
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=min(4, os.cpu_count() or 1),
    show_default=True,
    help="Models recorded at once (coverage does not time anything, so parallel runs are safe); "
    "the CPUs are shared out between them.",
)
@model_file_option()
@click.option("--exclude", multiple=True, help="fnmatch pattern of models to leave out.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of tables.")
@click.option("--quiet", "-q", is_flag=True)
def coverage_command(
    *, patterns, mode, size, against_tag, target, output, chart, timeout, jobs, model_files, exclude, as_json, quiet
) -> None:
    """Record the API and operator coverage of models matching PATTERNS (default: all)."""
    from ..runner import RunnerOptions
    from ..stats.coverage_sets import write_domain_chart
    from ..workflows.coverage import run_coverage
    from .terminal import Terminal

    term = Terminal(quiet=quiet)
    models = selected_models(patterns, model_files, exclude=exclude)
    modes = ("train", "eval") if mode == "both" else (mode,)
    files = tuple(str(Path(p).resolve()) for p in model_files)
    options = RunnerOptions(timeout_s=timeout, jobs=jobs, model_files=files)
    with term.progress() as progress:
        task = progress.add_task("coverage", total=len(models) * len(modes), current="")
        result = run_coverage(
            models,
            modes,
            options,
            size=size,
            against_tag=against_tag,
            target=target,
            on_result=lambda r: progress.update(task, advance=1, current=f"{r.config.model} {r.config.mode}"),
        )
    doc = result.to_dict()
    if output:
        Path(output).write_text(json.dumps(doc, indent=1))
    if chart:
        write_domain_chart(result.summary["per_domain"], chart)
    if as_json:
        term.json(doc)
        return
    _print_tables(term, result)
    if output:
        term.info(f"coverage written to {output}")


def _print_tables(term, result) -> None:
    s = result.summary
    rows = []
    for kind, label in (("apis", "Python APIs"), ("ops", "ATen operators")):
        k = s[kind]
        ratio = f"{k['ratio']:.2f}x" if k["ratio"] else "-"
        rows.append([label, k["suite"], k["tagged"], ratio, len(k["cover_subset"])])
    columns = ("surface", "suite", f"'{s['against']}' models", "suite / tagged", f"models for {s['cover_target']:.0%}")
    term.table(
        columns,
        rows,
        justify=("left", "right", "right", "right", "right"),
        title=f"{s['models']} models; {s['apis']['suite']} of {s['apis']['universe']} overridable APIs "
        f"({s['apis']['fraction_of_universe']:.1%}); {result.wall_s:.0f} s",
    )
    term.table(
        ("domain", "models", "APIs", "ops"),
        [[d, v["models"], v["apis"], v["ops"]] for d, v in s["per_domain"].items()],
        justify=("left", "right", "right", "right"),
    )
    unique = s["apis"]["unique"]
    top = sorted(unique.items(), key=lambda kv: -len(kv[1]))[:15]
    term.table(
        ("model", "APIs only it reaches", "examples"),
        [[m, len(items), ", ".join(i.replace("torch.", "") for i in items[:4])] for m, items in top],
        justify=("left", "right", "left"),
        title="Irreplaceable models (marginal API contribution)",
    )
    subset = ", ".join(s["apis"]["cover_subset"])
    term.info(f"suggested CI subset ({s['cover_target']:.0%} of the API surface): {subset}")
    for r in result.failures:
        term.warning(f"{r.config.model} {r.config.mode}: {r.status}: {(r.error or '').strip().splitlines()[-1:]}")
