"""``torchgauge run``: benchmark models, each run isolated, results saved as they finish."""

from __future__ import annotations

from pathlib import Path

import click

from .params import check_device, non_negative, positive, split_csv

def _batch_size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | str | None:
    if value is None or value == "auto":
        return value
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise click.BadParameter(f"{value!r}; accepted: an integer >= 1 or 'auto'")
    return size


def _tuned_batch_sizes(configs: list, kw: dict, term) -> list:
    """--batch-size auto: eval runs take the size stored by tune-batch for this device."""
    from ..tune_batch import BatchSizeStore, StoreError, apply_tuned_batch_sizes, device_name

    try:
        name = device_name(str(kw["device"]))
        configs, missing = apply_tuned_batch_sizes(configs, BatchSizeStore(kw["batch_store"]), name)
    except (StoreError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if missing:
        term.warning(f"no tuned batch size on {name} ({configs[0].size}) for {', '.join(missing)}; "
                     "using the default (run `torchgauge tune-batch` first)")
    return configs


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
@click.option("--device", default="cpu", show_default=True, callback=check_device, help="cpu, cuda, cuda:N, ...")
@click.option("--mode", type=click.Choice(["train", "eval", "both"]), default="both", show_default=True)
@click.option("--batch-size", default=None, callback=_batch_size,
              help="Override every model's default batch size: N, or 'auto' for the eval size found by tune-batch.")
@click.option("--batch-store", type=click.Path(dir_okay=False), default=None,
              help="Batch-size store read by --batch-size auto [default: $TORCHGAUGE_BATCH_STORE or the user data dir].")
@click.option("--repeat", type=int, default=10, show_default=True, callback=positive, help="Timed iterations per run.")
@click.option("--adaptive", type=float, default=None,
              help="Adaptive repeats: time until the median's 95%% interval is narrower than this fraction of it "
                   "(e.g. 0.05), with --repeat as the minimum and --max-repeat as the maximum; every sample kept.")
@click.option("--max-repeat", type=int, default=200, show_default=True, callback=positive,
              help="Most timed iterations with --adaptive.")
@click.option("--warmup", type=int, default=3, show_default=True, callback=non_negative, help="Untimed iterations first.")
@click.option("--size", type=click.Choice(["full", "smoke"]), default="full", show_default=True,
              help="'smoke' runs every model at tiny shapes (seconds on a CPU).")
@click.option("--precision", default="fp32", show_default=True, help="fp32, tf32, fp16, bf16, amp.")
@click.option("--backend", default="eager", show_default=True, help="eager, inductor, aot_eager, torchscript, cudagraphs, ...")
@click.option("--channels-last", is_flag=True, help="channels_last memory format (convolutional models).")
@click.option("--compile-mode", default=None, help="torch.compile mode for inductor: default, reduce-overhead, max-autotune.")
@click.option("--dynamic/--no-dynamic", default=None, help="torch.compile dynamic shapes (default: torch decides).")
@click.option("--accuracy", is_flag=True, help="Check each run against an eager fp64 reference (status fail_accuracy).")
@click.option("--metrics", default="time,memory", show_default=True, help="Comma-separated metrics to collect.")
@click.option("--profile", "profile_dir", type=click.Path(file_okay=False), default=None,
              help="Write a Chrome/Perfetto trace per run (shapes, stacks) into this directory; implies breakdown.")
@click.option("--leak-iterations", type=int, default=None,
              help="Steps the leak metric runs and samples memory after (default 50).")
@click.option("--instruction-steps", type=int, default=None,
              help="Steps the instructions metric counts under callgrind (default 3).")
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
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs at once. Above 1 the runs disturb each other's timings: for smoke checks where only the "
                   "outcome matters (the CPUs are shared out between workers, as in `coverage --jobs`).")
@click.option("--isolation", type=click.Choice(["per-run", "per-model"]), default="per-run", show_default=True,
              help="per-model: one worker runs a model's eager fp32 configurations in turn (each built fresh) "
                   "instead of one worker each; saves a worker start per configuration.")
@click.option("--in-process", is_flag=True, help="Run in this process (debugging: no isolation, no timeout).")
@click.option("--json", "as_json", is_flag=True, help="Print the results document as JSON instead of a table.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--db", type=click.Path(dir_okay=False), default=None, envvar="TORCHGAUGE_DB",
              help="Also store each finished run in this history database (env TORCHGAUGE_DB; opt-in).")
@click.option("--no-db", is_flag=True, help="Do not store in the history database even if TORCHGAUGE_DB is set.")
def run_command(**kw: object) -> None:
    """Benchmark models matching PATTERNS (names or wildcards such as 'resnet*')."""
    from ..report.progress import SuiteProgress
    from ..report.table import RESULT_COLUMNS, RESULT_JUSTIFY, result_rows
    from ..suite import exit_code, plan, run_and_save
    from .terminal import Terminal

    term = Terminal(quiet=bool(kw["quiet"]))
    request, runner_options, output = _parse(kw)
    configs = plan(request)
    if kw["batch_size"] == "auto":
        configs = _tuned_batch_sizes(configs, kw, term)
    if not configs:
        raise click.ClickException("nothing to run: the shard or filters selected no model")
    term.info(f"running {len(configs)} configurations of {len(request.models)} models -> {output}")
    if runner_options.jobs > 1:
        term.warning(f"--jobs {runner_options.jobs}: runs overlap and share the CPUs, so their timings are not "
                     "comparable with each other or with a --jobs 1 run; use it for smoke checks of outcomes only")
    store, suite_id, env = _open_store(kw)
    counts = SuiteProgress(total=len(configs))
    with term.progress() as progress:
        task = progress.add_task("torchgauge", total=len(configs), current="")

        def on_result(r) -> None:
            if store is not None:  # each run in its own transaction: a crash keeps the finished ones
                store.add_run(suite_id, r)
            counts.add(r)
            progress.advance(task)
            progress.console.print(counts.count_line(r), highlight=False, markup=False, soft_wrap=True)

        try:
            results = run_and_save(
                configs,
                runner_options,
                output,
                env=env,
                on_start=lambda c: progress.update(task, current=f"{c.model} {c.mode}"),
                on_result=on_result,
            )
        finally:
            if store is not None:
                store.close()
    if store is not None:
        term.info(f"stored as run {suite_id} in {store.path}")
    if kw["as_json"]:
        term.json(results.to_dict())
    else:
        term.table(RESULT_COLUMNS, result_rows(results.runs), justify=RESULT_JUSTIFY)
    term.info(counts.summary())
    term.info(f"results written to {output}")
    code = exit_code(results.runs)
    if code:
        raise click.exceptions.Exit(code)


def _open_store(kw: dict) -> tuple:
    """(Store, run id, env) when --db (or TORCHGAUGE_DB) asks for storing, else (None, None, None)."""
    if not kw["db"] or kw["no_db"]:
        return None, None, None
    from .. import __version__
    from ..harness.env import collect_env
    from ..results.store import Store, StoreError

    env = collect_env()
    try:
        store = Store(kw["db"])
        return store, store.begin_suite(env, source="run", torchgauge_version=__version__), env
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


def _backend_options(kw: dict) -> dict[str, object]:
    """The precision/backend keys of RunConfig.options, validated against the backend registry."""
    from ..backends import COMPILE_MODES, get_backend

    spec = get_backend(str(kw["backend"]))
    if spec.compiles and kw["warmup"] < 1:
        raise click.BadParameter(f"{kw['warmup']}: backend {spec.name} compiles during warm-up; accepted: >= 1",
                                 param_hint="--warmup")
    options: dict[str, object] = {}
    if kw["channels_last"]:
        options["channels_last"] = True
    if kw["compile_mode"] is not None:
        if kw["compile_mode"] not in COMPILE_MODES:
            raise click.BadParameter(f"{kw['compile_mode']!r}; accepted: {', '.join(COMPILE_MODES)}", param_hint="--compile-mode")
        options["compile_mode"] = kw["compile_mode"]
    if kw["dynamic"] is not None:
        options["dynamic"] = kw["dynamic"]
    for key, flag in (("compile_mode", "--compile-mode"), ("dynamic", "--dynamic")):
        if key in options and key not in spec.accepts:
            raise click.BadParameter(f"does not apply to backend {spec.name}", param_hint=flag)
    if kw["accuracy"]:
        options["accuracy"] = True
    return options


def _counting_options(kw: dict) -> dict[str, object]:
    """``leak_iterations`` / ``instruction_steps`` for RunConfig.options, validated (ValueError)."""
    from ..harness.instructions import instruction_steps
    from ..harness.leak import leak_iterations

    options: dict[str, object] = {}
    if kw.get("leak_iterations") is not None:
        options["leak_iterations"] = leak_iterations({"leak_iterations": kw["leak_iterations"]})
    if kw.get("instruction_steps") is not None:
        options["instruction_steps"] = instruction_steps({"instruction_steps": kw["instruction_steps"]})
    return options


def _adaptive_options(kw: dict) -> dict[str, object]:
    """``adaptive`` for RunConfig.options, validated by the rule itself (ValueError)."""
    if kw.get("adaptive") is None:
        return {}
    from ..stats.adaptive import AdaptiveRule

    rule = AdaptiveRule(target=kw["adaptive"], min_repeat=kw["repeat"], max_repeat=kw["max_repeat"])
    return {"adaptive": {"target": rule.target, "max_repeat": rule.max_repeat}}


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
    options: dict[str, object] = _backend_options(kw)
    try:
        metrics = validate_metrics(split_csv(str(kw["metrics"])))
        if kw.get("profile_dir"):  # the trace comes from the breakdown's profiled pass
            options["profile_dir"] = str(Path(kw["profile_dir"]).resolve())
            metrics = metrics if "breakdown" in metrics else (*metrics, "breakdown")
        options.update(_counting_options(kw))
        options.update(_adaptive_options(kw))
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
        batch_size=None if kw["batch_size"] == "auto" else kw["batch_size"],
        size=kw["size"],
        repeat=kw["repeat"],
        warmup=kw["warmup"],
        seed=kw["seed"],
        metrics=metrics,
        model_kwargs=_parse_model_kwargs(kw["model_args"]),
        shard=shard,
        options=options,
    )
    runner_options = RunnerOptions(
        timeout_s=kw["timeout"],
        memory_limit_mb=kw["memory_limit"],
        model_files=tuple(str(Path(p).resolve()) for p in kw["model_files"]),
        isolate=not kw["in_process"],
        jobs=kw["jobs"],
        isolation=kw["isolation"],
    )
    output = Path(kw["output"]) if kw["output"] else default_output_path()
    return request, runner_options, output
