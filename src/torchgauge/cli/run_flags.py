"""``torchgauge run``'s flags turned into what the run needs: planned configurations (through
:func:`torchgauge.config.plan`), the runner's options and the output path. Parsing only."""

from __future__ import annotations

from pathlib import Path

import click

from .params import bad_config, split_csv

__all__ = ["batch_size_flag", "parse_run_flags"]


def batch_size_flag(ctx: click.Context, param: click.Parameter, value: str | None) -> int | str | None:
    if value is None or value == "auto":
        return value
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise click.BadParameter(f"{value!r}; accepted: an integer >= 1 or 'auto'")
    return size


def _parse_model_kwargs(items: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.isidentifier():
            raise click.BadParameter(
                f"{item!r} is not KEY=VALUE; accepted: e.g. --model-arg embedding_dim=64", param_hint="--model-arg"
            )
        for cast in (int, float):
            try:
                out[key] = cast(raw)
                break
            except ValueError:
                continue
        else:
            out[key] = {"true": True, "false": False}.get(raw.lower(), raw)
    return out


def _options(kw: dict, metrics: tuple[str, ...]):
    """RunOptions from the flags, checked against the backend: (options, metrics with breakdown if profiling)."""
    from ..config import Adaptive, backend_options

    extras: dict[str, object] = {}
    if kw["profile_dir"]:  # the trace comes from the breakdown's profiled pass
        extras["profile_dir"] = str(Path(kw["profile_dir"]).resolve())
        metrics = metrics if "breakdown" in metrics else (*metrics, "breakdown")
    if kw["adaptive"] is not None:
        extras["adaptive"] = Adaptive(kw["adaptive"], kw["max_repeat"])
    if kw["stable_warmup"] is not None:
        extras["stable_warmup"] = kw["stable_warmup"]
    options = backend_options(
        str(kw["backend"]),
        warmup=kw["warmup"],
        compile_scope=kw["compile_scope"],
        channels_last=bool(kw["channels_last"]),
        compile_mode=kw["compile_mode"],
        dynamic=kw["dynamic"],
        accuracy=bool(kw["accuracy"]),
        leak_iterations=kw["leak_iterations"],
        instruction_steps=kw["instruction_steps"],
        **extras,
    )
    return options, metrics


def parse_run_flags(kw: dict, term) -> tuple:
    """Raw click values -> (planned RunConfigs, number of selected models, RunnerOptions, output path)."""
    from ..compare.dynamo_perf import with_eager_baseline
    from ..config import ConfigError, check_names, plan
    from ..harness.metrics import validate_metrics
    from ..harness.threads import parse_threads
    from ..registry import load_model_file
    from ..runner import RunnerOptions
    from ..suite import Selection, SelectionError, default_output_path, parse_shard
    from ..workflows.tune_batch import StoreError

    for path in kw["model_files"]:
        load_model_file(path)
    try:
        check_names(str(kw["precision"]), str(kw["backend"]))
        options, metrics = _options(kw, validate_metrics(split_csv(str(kw["metrics"]))))
    except ConfigError as exc:
        raise bad_config(exc) from None
    except ValueError as exc:  # an unknown metric
        raise click.UsageError(str(exc)) from None
    try:
        selection = Selection(
            tuple(kw["patterns"]),
            tuple(kw["exclude"]),
            tuple(kw["domain"]),
            tuple(kw["tags"]),
            parse_shard(kw["shard"]),
        )
        threads = parse_threads(kw["threads"])
        selected = len(selection.matching())
    except (ValueError, SelectionError) as exc:
        raise click.UsageError(str(exc)) from None
    model_kwargs = _parse_model_kwargs(kw["model_args"])
    try:
        configs = plan(
            selection,
            modes=("train", "eval") if kw["mode"] == "both" else (kw["mode"],),
            rounds=kw["rounds"],
            batch_size=kw["batch_size"],
            batch_store=kw["batch_store"],
            on_note=term.warning,
            device=kw["device"],
            precision=kw["precision"],
            backend=kw["backend"],
            size=kw["size"],
            repeat=kw["repeat"],
            warmup=kw["warmup"],
            seed=kw["seed"],
            metrics=metrics,
            options=options,
            model_kwargs=model_kwargs,
        )
    except ConfigError as exc:
        raise bad_config(exc) from None
    except (StoreError, ValueError) as exc:  # the batch store, or no CUDA device for its name
        raise click.ClickException(str(exc)) from None
    if kw["csv_path"]:
        configs = with_eager_baseline(configs)
    runner_options = RunnerOptions(
        timeout_s=kw["timeout"],
        memory_limit_mb=kw["memory_limit"],
        model_files=tuple(str(Path(p).resolve()) for p in kw["model_files"]),
        isolate=not kw["in_process"],
        log_dir=str(Path(kw["keep_logs"]).resolve()) if kw["keep_logs"] else None,
        threads_per_worker=0 if threads is None else threads,
        pin_threads=bool(kw["pin_threads"]),
        jobs=kw["jobs"],
        isolation=kw["isolation"],
    )
    output = Path(kw["output"]) if kw["output"] else default_output_path()
    return configs, selected, runner_options, output
