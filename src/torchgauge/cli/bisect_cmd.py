"""``torchgauge bisect``: find the commit or version that changed a model's speed."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

import click

from .params import (
    PROBABILITY,
    SECONDS,
    bad_config,
    check_device,
    fraction,
    model_file_option,
    non_negative,
    positive,
    selected_models,
    split_csv,
    threshold,
)


@click.command("bisect")
@click.argument("patterns", nargs=-1, required=True)
@click.option("--repo", type=click.Path(exists=True, file_okay=False), help="Git repository to bisect.")
@click.option("--good", help="Known good commit (git range).")
@click.option("--bad", help="Known bad commit, a descendant of --good (git range).")
@click.option(
    "--build",
    "build_cmd",
    help="Shell command building/installing each commit, run in its worktree "
    "with the scratch venv active (env TORCHGAUGE_BISECT_WORKTREE, _COMMIT, _VENV, _PYTHON).",
)
@click.option(
    "--python",
    "python",
    default=None,
    help="Interpreter that measures each commit; relative paths are inside the worktree "
    "(default: the scratch venv's, which sees this interpreter's packages).",
)
@click.option(
    "--pythonpath",
    "pythonpath",
    multiple=True,
    help="Worktree-relative directory put on the measuring PYTHONPATH (repeatable), e.g. src.",
)
@click.option(
    "--versions",
    default=None,
    help="Comma-separated requirements or wheel/sdist files, good first, bad last, "
    "e.g. torch==2.12.0,torch==2.13.0 (instead of a git range).",
)
@click.option("--pip-args", default="", help="Extra 'pip install' arguments for --versions, e.g. '--no-index'.")
@model_file_option()
@click.option("--mode", type=click.Choice(["train", "eval", "both"]), default="both", show_default=True)
@click.option("--device", default="cpu", show_default=True, callback=check_device)
@click.option("--precision", default="fp32", show_default=True)
@click.option("--backend", default="eager", show_default=True)
@click.option("--batch-size", type=int, default=None, callback=positive)
@click.option("--size", type=click.Choice(["full", "smoke"]), default="full", show_default=True)
@click.option(
    "--repeat", type=int, default=15, show_default=True, callback=positive, help="Timed iterations per point."
)
@click.option("--warmup", type=int, default=3, show_default=True, callback=non_negative)
@click.option(
    "--metric",
    default="time",
    show_default=True,
    help="What to follow: time (rank test on samples) or a deterministic count such as instructions, "
    "op_counts or flops (threshold only; immune to machine load; instructions needs valgrind). "
    "The metric registry decides which quantities qualify.",
)
@click.option(
    "--threshold",
    default=None,
    callback=threshold,
    help="Change that counts, e.g. 7% or 0.07 (default: compare's, 7% for time, 2% for "
    "instructions, 1% for operator counts and FLOPs).",
)
@click.option("--alpha", type=PROBABILITY, default=0.01, show_default=True, help="Significance level of the rank test.")
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Fresh re-measurements of a point that looks like neither endpoint.",
)
@click.option(
    "--fastest",
    default="100%",
    show_default=True,
    callback=fraction,
    help="Compare only this fraction of each point's fastest samples, e.g. 20% with --repeat 60 on a "
    "shared machine (load only adds time); 100% is compare's test.",
)
@click.option(
    "--threads",
    default="1",
    show_default=True,
    help="torch intra-op threads of every measurement: N or 'all'; 1 keeps samples unimodal on a shared "
    "CPU (part of the cache key).",
)
@click.option("--multiple", is_flag=True, help="Find every change in the range, not only the first bad point.")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Measurement cache (default: ~/.cache/torchgauge/bisect).",
)
@click.option("--no-cache", is_flag=True, help="Neither read nor write cached measurements.")
@click.option(
    "--build-timeout",
    type=SECONDS,
    default=3 * 3600.0,
    show_default=True,
    help="Seconds before a build counts as failed (skip).",
)
@click.option("--timeout", type=SECONDS, default=1800.0, show_default=True, help="Seconds per point's measurement.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def bisect_command(**kw: object) -> None:
    """Find the first commit or version where PATTERNS' models got slower (or faster).

    \b
    Git range:  torchgauge bisect resnet50 --mode eval --repo ~/pytorch --good A --bad B \\
                    --build "python -m pip install --no-deps --no-build-isolation -e ."
    Versions:   torchgauge bisect resnet50 --versions torch==2.12.0,torch==2.13.0
    """
    import functools

    from ..stats.range_search import BisectionError
    from ..workflows.bisect import (
        BisectSetupError,
        BuildFailed,
        Judging,
        measure_in_subprocess,
        report_summary,
        resolve_cache_dir,
        run_bisect,
    )
    from .terminal import Terminal

    term = Terminal(quiet=bool(kw["quiet"]))
    try:
        spec = _spec(kw)
    except BisectSetupError as exc:
        raise click.UsageError(str(exc)) from None
    cache_dir = resolve_cache_dir(kw["cache_dir"], no_cache=bool(kw["no_cache"]))
    with tempfile.TemporaryDirectory(prefix="torchgauge-bisect-") as workdir:
        try:
            source = _source(kw, workdir)
            report = run_bisect(
                source,
                spec,
                measure=functools.partial(measure_in_subprocess, timeout_s=float(kw["timeout"])),
                judging=Judging.for_metric(
                    spec.metric,
                    threshold=kw["threshold"],
                    alpha=float(kw["alpha"]),
                    retries=int(kw["retries"]),
                    fastest=float(kw["fastest"]),
                ),
                multiple=bool(kw["multiple"]),
                cache_dir=cache_dir,
                on_event=term.info,
            )
        except (BisectSetupError, BisectionError, BuildFailed) as exc:
            raise click.ClickException(str(exc)) from None
    if kw["as_json"]:
        term.json(report.to_dict())
    else:
        _print_report(term, report)
    term.info(report_summary(report))
    if not report.ok:
        raise click.exceptions.Exit(1)


def _spec(kw: dict):
    from ..config import ConfigError, check_names
    from ..harness.threads import parse_threads
    from ..workflows.bisect import MeasureSpec

    try:
        check_names(str(kw["precision"]), str(kw["backend"]))
    except ConfigError as exc:
        raise bad_config(exc) from None
    if not 0 < kw["alpha"] < 1:
        raise click.BadParameter(f"{kw['alpha']} is out of range; accepted: 0 < alpha < 1", param_hint="--alpha")
    try:
        threads = parse_threads(kw["threads"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--threads") from None
    models = selected_models(kw["patterns"], kw["model_files"])
    return MeasureSpec.of(
        models,
        ("train", "eval") if kw["mode"] == "both" else (kw["mode"],),
        device=kw["device"],
        precision=kw["precision"],
        backend=kw["backend"],
        batch_size=kw["batch_size"],
        size=kw["size"],
        repeat=kw["repeat"],
        warmup=kw["warmup"],
        model_files=tuple(str(Path(p).resolve()) for p in kw["model_files"]),
        metric=kw["metric"],
        threads=threads,
    )


def _source(kw: dict, workdir: str):
    from ..workflows.bisect import GitRange, VersionRange

    git_opts = {name: kw[name] for name in ("repo", "good", "bad", "build_cmd")}
    given = [f"--{n.replace('_cmd', '').replace('_', '-')}" for n, v in git_opts.items() if v]
    if kw["versions"]:
        if given:
            raise click.UsageError(
                f"--versions cannot be combined with {', '.join(given)}; choose a git range or versions"
            )
        return VersionRange(
            split_csv(str(kw["versions"])),
            workdir=workdir,
            pip_args=tuple(shlex.split(kw["pip_args"])),
            build_timeout_s=float(kw["build_timeout"]),
        )
    missing = [f"--{n.replace('_cmd', '')}" for n, v in git_opts.items() if not v]
    if missing:
        raise click.UsageError(f"missing {', '.join(missing)}; accepted: --repo/--good/--bad/--build, or --versions")
    return GitRange(
        kw["repo"],
        kw["good"],
        kw["bad"],
        kw["build_cmd"],
        workdir=workdir,
        python=kw["python"],
        pythonpath=kw["pythonpath"],
        build_timeout_s=float(kw["build_timeout"]),
    )


def _print_report(term, report) -> None:
    from ..workflows.bisect import REPORT_COLUMNS, report_rows, report_warnings

    term.table(list(REPORT_COLUMNS), report_rows(report), justify=["left", "left", "left", "right", "left"])
    for warning in report_warnings(report):
        term.warning(warning)
