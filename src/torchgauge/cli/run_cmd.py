"""``torchgauge run``: benchmark models, each run isolated, results saved as they finish."""

from __future__ import annotations

import contextlib
import signal
import warnings
from collections.abc import Iterator
from pathlib import Path

import click

from .params import MEBIBYTES, SECONDS, SEED, check_device, model_file_option, non_negative, positive
from .run_flags import batch_size_flag, parse_run_flags


@click.command("run")
@click.argument("patterns", nargs=-1, required=True)
@click.option("--device", "-d", default="cpu", show_default=True, callback=check_device, help="cpu, cuda, cuda:N, ...")
@click.option(
    "--mode",
    "-t",
    "--test",
    type=click.Choice(["train", "eval", "both"]),
    default="both",
    show_default=True,
    help="-t/--test as TorchBench's run.py.",
)
@click.option(
    "--batch-size",
    "--bs",
    default=None,
    callback=batch_size_flag,
    help="Override every model's default batch size: N, or 'auto' for the eval size found by tune-batch.",
)
@click.option(
    "--batch-store",
    type=click.Path(dir_okay=False),
    default=None,
    help="Batch-size store read by --batch-size auto [default: $TORCHGAUGE_BATCH_STORE or the user data dir].",
)
@click.option("--repeat", type=int, default=10, show_default=True, callback=positive, help="Timed iterations per run.")
@click.option(
    "--adaptive",
    type=float,
    default=None,
    help="Adaptive repeats: time until the median's 95%% interval is narrower than this fraction of it "
    "(e.g. 0.05), with --repeat as the minimum and --max-repeat as the maximum; every sample kept.",
)
@click.option(
    "--max-repeat",
    type=int,
    default=200,
    show_default=True,
    callback=positive,
    help="Most timed iterations with --adaptive.",
)
@click.option(
    "--warmup", type=int, default=3, show_default=True, callback=non_negative, help="Untimed iterations first."
)
@click.option(
    "--stable-warmup",
    type=float,
    default=None,
    help="Warm up until two consecutive steps agree within this fraction (e.g. 0.1): at least 2 steps, "
    "--warmup at most; every warm-up step kept, the rule recorded.",
)
@click.option(
    "--size",
    type=click.Choice(["full", "smoke"]),
    default="full",
    show_default=True,
    help="'smoke' runs every model at tiny shapes (seconds on a CPU).",
)
@click.option(
    "--precision",
    default="fp32",
    show_default=True,
    help="fp32, tf32, fp16, bf16, amp, or torchbench: TorchBench run.py's default for each model, device "
    "and mode (fp16 or amp for some CUDA runs, else fp32); every record stores the concrete precision.",
)
@click.option(
    "--backend", default="eager", show_default=True, help="eager, inductor, aot_eager, torchscript, cudagraphs, ..."
)
@click.option("--channels-last", is_flag=True, help="channels_last memory format (convolutional models).")
@click.option(
    "--compile-mode", default=None, help="torch.compile mode for inductor: default, reduce-overhead, max-autotune."
)
@click.option("--dynamic/--no-dynamic", default=None, help="torch.compile dynamic shapes (default: torch decides).")
@click.option(
    "--compile-scope",
    type=click.Choice(["forward", "step"]),
    default="forward",
    show_default=True,
    help="Compile the forward only, or the whole step (forward, loss, backward, optimizer step) as the "
    "dynamo harness does.",
)
@click.option(
    "--csv",
    "csv_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the dynamo harness's performance CSV; a compiling --backend then also runs eager "
    "(interleaved) for the speedup, as the harness's --performance does.",
)
@click.option("--accuracy", is_flag=True, help="Check each run against an eager fp64 reference (status fail_accuracy).")
@click.option("--metrics", default="time,memory", show_default=True, help="Comma-separated metrics to collect.")
@click.option(
    "--profile",
    "profile_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write a Chrome/Perfetto trace per run (shapes, stacks) into this directory; implies breakdown.",
)
@click.option(
    "--leak-iterations",
    type=int,
    default=None,
    help="Steps the leak metric runs and samples memory after (default 50).",
)
@click.option(
    "--instruction-steps",
    type=int,
    default=None,
    help="Steps the instructions metric counts under callgrind (default 3).",
)
@click.option(
    "--threads",
    default="1",
    show_default=True,
    help="torch intra-op threads per run: N, or 'all' (one per CPU). 1 stays stable on a shared machine "
    "(docs/regression-detection.md, 'Thread settings'); recorded in every run.",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Measure each configuration in this many fresh processes, interleaved over the suite (asv's "
    "rounds); compare then tests process medians. Deterministic metrics (op_counts, flops, ...) and "
    "--accuracy run in the first round only (docs/regression-detection.md).",
)
@click.option("--pin-threads", is_flag=True, help="Restrict each run to as many CPUs as it has threads.")
@click.option("--timeout", type=SECONDS, default=900.0, show_default=True, help="Seconds per run before it is killed.")
@click.option(
    "--memory-limit", type=MEBIBYTES, default=None, help="MiB of resident memory per worker before status oom."
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default=None,
    help="Results JSON (default: torchgauge-results/run-<time>.json).",
)
@click.option(
    "--keep-logs",
    type=click.Path(file_okay=False),
    default=None,
    help="Keep each worker's full stdout/stderr in this directory (default: only the error's last lines).",
)
@model_file_option()
@click.option("--model-arg", "model_args", multiple=True, help="Architecture override KEY=VALUE passed to builders.")
@click.option("--exclude", multiple=True, help="fnmatch pattern of models to leave out (repeatable).")
@click.option("--domain", multiple=True, help="Only models of this domain (repeatable).")
@click.option("--tag", "tags", multiple=True, help="Only models carrying this tag (repeatable).")
@click.option("--shard", default=None, help="Run shard i of n of the selected models, e.g. 2/4 (CI sharding).")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs at once. Above 1 the runs disturb each other's timings: for smoke checks where only the "
    "outcome matters (the CPUs are shared out between workers, as in `coverage --jobs`).",
)
@click.option(
    "--isolation",
    type=click.Choice(["per-run", "per-model"]),
    default="per-run",
    show_default=True,
    help="per-model: one worker runs a model's eager fp32 configurations in turn (each built fresh) "
    "instead of one worker each; saves a worker start per configuration.",
)
@click.option("--in-process", is_flag=True, help="Run in this process (debugging: no isolation, no timeout).")
@click.option("--json", "as_json", is_flag=True, help="Print the results document as JSON instead of a table.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="TORCHGAUGE_DB",
    metavar="PATH|URL",
    help="Also store each finished run in this history database, a SQLite file or a postgresql:// URL "
    "(env TORCHGAUGE_DB; opt-in).",
)
@click.option("--no-db", is_flag=True, help="Do not store in the history database even if TORCHGAUGE_DB is set.")
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where runs execute: this machine, or a Ray cluster (pip install 'torchgauge[ray]').",
)
@click.option("--address", default=None, help="Ray cluster address host:port [--executor ray; default: $RAY_ADDRESS].")
@click.option(
    "--cpus-per-run",
    type=int,
    default=None,
    callback=positive,
    help="Whole CPUs (pinned cores) each run holds on the cluster [--executor ray; default 1].",
)
@click.option(
    "--mix-hardware",
    is_flag=True,
    help="Let one suite use cluster nodes of different hardware (each run keeps its own fingerprint).",
)
def run_command(**kw: object) -> None:
    """Benchmark models matching PATTERNS (names or wildcards such as 'resnet*')."""
    from ..executors.ray_cluster import ClusterError
    from ..report.escape import terminal_text
    from ..report.progress import SuiteProgress
    from ..report.table import RESULT_COLUMNS, RESULT_JUSTIFY, result_rows
    from ..suite import DEVICE_MISSING_EXIT_CODE, exit_code
    from . import interrupt_exit_code
    from .terminal import Terminal

    term = Terminal(quiet=bool(kw["quiet"]))
    configs, selected, runner_options, output = parse_run_flags(kw, term)
    if not configs:
        raise click.ClickException("nothing to run: the shard or filters selected no model")
    term.info(f"running {len(configs)} configurations of {selected} models -> {output}")
    if runner_options.jobs > 1:
        term.warning(
            f"--jobs {runner_options.jobs}: runs overlap and share the CPUs, so their timings are not "
            "comparable with each other or with a --jobs 1 run; use it for smoke checks of outcomes only"
        )
    executor = _executor(kw, term)
    try:
        env = executor.environment()
    except ClusterError as exc:
        executor.close()
        raise click.ClickException(str(exc)) from None
    suite = _suite_run(kw, configs, output, env)
    counts = SuiteProgress(total=len(configs))
    try:
        with term.progress() as progress, _warnings_to(term):
            task = progress.add_task("torchgauge", total=len(configs), current="")

            def on_result(r, mark: str) -> None:
                counts.add(r)
                progress.advance(task)
                progress.console.print(
                    terminal_text(counts.count_line(r)) + mark, highlight=False, markup=False, soft_wrap=True
                )

            results = suite.run(
                runner_options,
                env=env,
                executor=executor,
                on_result=on_result,
                on_start=lambda c: progress.update(task, current=terminal_text(f"{c.model} {c.mode}")),
                warn=term.warning,
                info=term.info,
            )
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: say what was kept
        code = interrupt_exit_code(exc)
        term.error(suite.saved_message(f"interrupted by {signal.Signals(code - 128).name}"))
        raise click.exceptions.Exit(code) from None
    finally:
        executor.close()
        suite.close()
    if kw["executor"] != "local":
        from ..executors import count_runs_by_host

        hosts = count_runs_by_host(results.runs).items()
        term.info("runs per host: " + ", ".join(f"{terminal_text(h)}: {n}" for h, n in hosts))
    if kw["as_json"]:
        term.json(results.to_dict())
    else:
        term.table(RESULT_COLUMNS, result_rows(results.runs), justify=RESULT_JUSTIFY)
    term.info(counts.summary())
    term.info(f"results written to {output}")
    if kw["csv_path"]:
        from ..compare.dynamo_perf import suite_performance_rows
        from ..report.dynamo_csv import write_performance_csv

        paths = write_performance_csv(kw["csv_path"], suite_performance_rows(results.runs))
        term.info("dynamo performance CSV written to " + ", ".join(str(p) for p in paths))
    crowded = [r for r in results.runs if (r.threads or {}).get("oversubscribed")]
    if crowded:
        names = list(dict.fromkeys(f"{r.config.model}/{r.config.mode}" for r in crowded))  # rounds repeat a name
        term.warning(
            f"{len(crowded)} run(s) were oversubscribed (their threads plus other processes' work exceeded "
            f"the CPUs): their timings are unreliable; see each record's 'threads' ({', '.join(names[:5])}"
            f"{', ...' if len(names) > 5 else ''})"
        )
    code = exit_code(results.runs)
    if code == DEVICE_MISSING_EXIT_CODE:
        skipped = next(r for r in results.runs if r.status == "skipped")
        term.error(
            f"no run was measured: {skipped.error}; "
            f"failing (exit {code}) so that a job on the wrong machine does not pass"
        )
    if code:
        raise click.exceptions.Exit(code)


@contextlib.contextmanager
def _warnings_to(term) -> Iterator[None]:
    """Show Python warnings (e.g. the runner's "reporting a run failed") as warning lines."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", RuntimeWarning)
        warnings.showwarning = lambda message, *args, **kwargs: term.warning(str(message))
        yield


def _executor(kw: dict, term):
    """The executor --executor names; cluster options only with the ray executor."""
    from ..executors import create_executor

    given = [
        flag
        for key, flag in (
            ("address", "--address"),
            ("cpus_per_run", "--cpus-per-run"),
            ("mix_hardware", "--mix-hardware"),
        )
        if kw[key]
    ]
    if kw["executor"] == "local":
        if given:
            raise click.UsageError(f"{', '.join(given)} apply only with --executor ray")
        return create_executor("local")
    if kw["in_process"]:
        raise click.UsageError("--in-process runs in this process; it does not combine with --executor ray")
    try:
        return create_executor(
            "ray",
            on_note=term.warning,
            address=kw["address"],
            cpus_per_run=kw["cpus_per_run"] or 1,
            mix_hardware=bool(kw["mix_hardware"]),
            device=kw["device"],
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--device") from None


def _suite_run(kw: dict, configs: list, output: Path, env: dict):
    """The SuiteRun, storing in the history database when --db (or TORCHGAUGE_DB) asks for it."""
    from ..results.store import StoreError
    from ..workflows.suite_run import SuiteRun, open_history

    if not kw["db"] or kw["no_db"]:
        return SuiteRun(configs, output)
    try:
        store, suite_id = open_history(kw["db"], env)
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None
    return SuiteRun(configs, output, store, suite_id)
