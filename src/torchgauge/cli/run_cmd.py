"""``torchgauge run``: benchmark models, each run isolated, results saved as they finish."""

from __future__ import annotations

import re
from pathlib import Path

import click

_DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?|mps|xpu(:\d+)?)$")


def _check_device(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not _DEVICE_RE.match(value):
        raise click.BadParameter(f"{value!r} is not a device; accepted: cpu, cuda, cuda:N, mps, xpu")
    return value


def _split_csv(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _positive(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < (0 if param.name == "warmup" else 1):
        raise click.BadParameter(f"{value} is out of range; accepted: an integer >= {0 if param.name == 'warmup' else 1}")
    return value


def _parse_model_kwargs(items: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE; accepted: e.g. --model-arg embedding_dim=64",
                                     param_hint="--model-arg")
        for cast in (int, float):
            try:
                out[key] = cast(raw)
                break
            except ValueError:
                continue
        else:
            out[key] = {"true": True, "false": False}.get(raw.lower(), raw)
    return out


@click.command("run")
@click.argument("patterns", nargs=-1, required=True)
@click.option("--device", default="cpu", show_default=True, callback=_check_device, help="cpu, cuda, cuda:N, ...")
@click.option("--mode", type=click.Choice(["train", "eval", "both"]), default="both", show_default=True)
@click.option("--batch-size", type=int, default=None, callback=_positive, help="Override every model's default batch size.")
@click.option("--repeat", type=int, default=10, show_default=True, callback=_positive, help="Timed iterations per run.")
@click.option("--warmup", type=int, default=3, show_default=True, callback=_positive, help="Untimed iterations first.")
@click.option("--size", type=click.Choice(["full", "smoke"]), default="full", show_default=True,
              help="'smoke' runs every model at tiny shapes (seconds on a CPU).")
@click.option("--precision", default="fp32", show_default=True, help="fp32, tf32, fp16, bf16, amp.")
@click.option("--backend", default="eager", show_default=True, help="eager, inductor, aot_eager, torchscript, cudagraphs, ...")
@click.option("--metrics", default="time,memory", show_default=True, help="Comma-separated metrics to collect.")
@click.option("--timeout", type=float, default=900.0, show_default=True, help="Seconds per run before it is killed.")
@click.option("--memory-limit", type=float, default=None, help="MiB of resident memory per worker before status oom.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Results JSON (default: torchgauge-results/run-<time>.json).")
@click.option("--model-file", "model_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Python file registering extra models (repeatable).")
@click.option("--model-arg", "model_args", multiple=True, help="Architecture override KEY=VALUE passed to builders.")
@click.option("--exclude", multiple=True, help="fnmatch pattern of models to leave out (repeatable).")
@click.option("--domain", multiple=True, help="Only models of this domain (repeatable).")
@click.option("--tag", "tags", multiple=True, help="Only models carrying this tag (repeatable).")
@click.option("--shard", default=None, help="Run shard i of n of the selected models, e.g. 2/4 (CI sharding).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--in-process", is_flag=True, help="Run in this process (debugging: no isolation, no timeout).")
@click.option("--json", "as_json", is_flag=True, help="Print the results document as JSON instead of a table.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def run_command(**kw: object) -> None:
    """Benchmark models matching PATTERNS (names or wildcards such as 'resnet*')."""
    from ..report.table import RESULT_COLUMNS, RESULT_JUSTIFY, result_row, result_rows
    from ..suite import exit_code, plan, run_and_save
    from .terminal import Terminal

    term = Terminal(quiet=bool(kw["quiet"]))
    request, runner_options, output = _parse(kw)
    configs = plan(request)
    if not configs:
        raise click.ClickException("nothing to run: the shard or filters selected no model")
    term.info(f"running {len(configs)} configurations of {len(request.models)} models -> {output}")
    with term.progress() as progress:
        task = progress.add_task("torchgauge", total=len(configs), current="")
        results = run_and_save(
            configs,
            runner_options,
            output,
            on_start=lambda c: progress.update(task, current=f"{c.model} {c.mode}"),
            on_result=lambda r: (progress.advance(task), progress.console.print(_line(r, result_row), highlight=False)),
        )
    if kw["as_json"]:
        term.json(results.to_dict())
    else:
        term.table(RESULT_COLUMNS, result_rows(results.runs), justify=RESULT_JUSTIFY)
    term.info(f"results written to {output}")
    code = exit_code(results.runs)
    if code:
        raise click.exceptions.Exit(code)


def _line(record, result_row) -> str:
    """One progress line per finished run."""
    row = result_row(record)
    median = f"{row[4]:.3f} ms" if row[4] is not None else ""
    return f"  {record.config.model:<32} {record.config.mode:<5} {median:>14}  {row[-1]}"


def _parse(kw: dict) -> tuple:
    """Turn raw click values into (SuiteRequest, RunnerOptions, output path); one-line errors."""
    from ..configure import BACKENDS, PRECISIONS
    from ..harness.metrics import validate_metrics
    from ..registry import load_model_file
    from ..runner import RunnerOptions
    from ..suite import SelectionError, SuiteRequest, default_output_path, parse_shard, select_models

    for path in kw["model_files"]:
        load_model_file(path)
    if kw["precision"] not in PRECISIONS:
        raise click.BadParameter(f"{kw['precision']!r}; accepted: {', '.join(PRECISIONS)}", param_hint="--precision")
    if kw["backend"] not in BACKENDS:
        raise click.BadParameter(f"{kw['backend']!r}; accepted: {', '.join(BACKENDS)}", param_hint="--backend")
    try:
        metrics = validate_metrics(_split_csv(str(kw["metrics"])))
        shard = parse_shard(kw["shard"])
        models = select_models(kw["patterns"], exclude=kw["exclude"], domain=kw["domain"], tags=kw["tags"])
    except (ValueError, SelectionError) as exc:
        raise click.UsageError(str(exc)) from None
    modes = ("train", "eval") if kw["mode"] == "both" else (kw["mode"],)
    request = SuiteRequest(
        models=tuple(models),
        modes=modes,
        device=kw["device"],
        precision=kw["precision"],
        backend=kw["backend"],
        batch_size=kw["batch_size"],
        size=kw["size"],
        repeat=kw["repeat"],
        warmup=kw["warmup"],
        seed=kw["seed"],
        metrics=metrics,
        model_kwargs=_parse_model_kwargs(kw["model_args"]),
        shard=shard,
    )
    runner_options = RunnerOptions(
        timeout_s=kw["timeout"],
        memory_limit_mb=kw["memory_limit"],
        model_files=tuple(str(Path(p).resolve()) for p in kw["model_files"]),
        isolate=not kw["in_process"],
    )
    output = Path(kw["output"]) if kw["output"] else default_output_path()
    return request, runner_options, output
