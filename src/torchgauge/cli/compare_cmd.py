"""``torchgauge compare BASE NEW``: regressions and improvements between two builds (exit 1 on a regression)."""

from __future__ import annotations

from pathlib import Path

import click

from ..compare.time_signal import DEFAULT_TIME_SIGNAL, TIME_SIGNAL_CHOICES
from .params import SECONDS, model_file_option, threshold


def _load_side(
    ref: str, db: str | None, machine: str | None, store_cache: dict, include_incomplete: bool = False
) -> tuple:
    """(ResultsFile, label) from a results file path, a stored run id, ``latest`` or ``previous``."""
    from ..results.schema import SchemaError, load_results
    from ..results.store import StoreError
    from ..results.stores import open_store

    path = Path(ref)
    if path.suffix == ".json" or path.exists():
        try:
            return load_results(path), path.name
        except SchemaError as exc:
            raise click.ClickException(str(exc)) from None
    if "store" not in store_cache:
        try:
            store_cache["store"] = open_store(db, create=False, readonly=True)
        except StoreError as exc:
            raise click.ClickException(f"{ref!r} is not a results file, and {exc}") from None
    store = store_cache["store"]
    try:
        suite = store.resolve(ref, machine=machine, include_incomplete=include_incomplete)
        return store.load(suite), f"run {suite}"
    except StoreError as exc:
        raise click.ClickException(str(exc)) from None


def _alpha(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not 0 < value < 1:
        raise click.BadParameter(f"{value} is not a probability; accepted: 0 < alpha < 1, e.g. 0.01")
    return value


# Configurations named in the missing-configurations warning (the JSON and Markdown list all).
MISSING_SHOWN = 10


def _warn_missing(cmp, labels: dict[str, str], term) -> None:
    """Say loudly which configurations one side has and the other lacks (a partial run)."""
    missing: dict[str, list[str]] = {}
    for u in cmp.unmatched:
        if u.reason == "missing":
            missing.setdefault(labels.get(u.side or "", u.side or "?"), []).append(u.config)
    for label, configs in missing.items():
        shown = ", ".join(configs[:MISSING_SHOWN]) + (
            f" and {len(configs) - MISSING_SHOWN} more" if len(configs) > MISSING_SHOWN else ""
        )
        term.warning(
            f"{len(configs)} configuration(s) of the other side are MISSING from {label}, not compared: {shown}"
        )
    lost: dict[str, list[str]] = {}
    for u in cmp.unmatched:
        if u.reason == "metric_missing":
            lost.setdefault(labels.get(u.side or "", u.side or "?"), []).append(f"{u.metric} of {u.config}")
    for label, items in lost.items():
        shown = ", ".join(items[:MISSING_SHOWN]) + (
            f" and {len(items) - MISSING_SHOWN} more" if len(items) > MISSING_SHOWN else ""
        )
        term.warning(
            f"{len(items)} metric(s) measured on the other side are MISSING from {label}, not compared: {shown}"
        )


@click.command("compare")
@click.argument("base")
@click.argument("new")
@click.option(
    "--threshold",
    default="7%",
    show_default=True,
    callback=threshold,
    help="Relative change that counts: 7%, 0.07 or 7 (a bare number above 1 is a percentage).",
)
@click.option(
    "--count-threshold",
    default=None,
    callback=threshold,
    help="One threshold for deterministic counts (instructions, op_counts, flops); default 2% for "
    "instructions, 1% for the others.",
)
@click.option(
    "--alpha",
    type=float,
    default=0.01,
    show_default=True,
    callback=_alpha,
    help="Significance level of the one-sided Mann-Whitney U test after correction.",
)
@click.option(
    "--correction",
    type=click.Choice(["holm", "bh", "none"]),
    default="holm",
    show_default=True,
    help="Multiple-comparison correction: holm (family-wise) or bh (false discovery rate).",
)
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write the comparison as JSON.")
@click.option(
    "--markdown", type=click.Path(dir_okay=False), default=None, help="Write the Markdown report (an issue body)."
)
@click.option(
    "--db",
    type=click.Path(dir_okay=False),
    default=None,
    help="History database for run ids, latest and previous (default: $TORCHGAUGE_DB or the XDG data dir).",
)
@click.option(
    "--machine", default=None, help="Machine fingerprint that latest/previous refer to (default: any machine)."
)
@click.option(
    "--include-incomplete",
    is_flag=True,
    help="latest/previous may name an interrupted run (by default they skip incomplete runs).",
)
@click.option("--confirm", is_flag=True, help="Rerun flagged configurations in fresh processes; keep what fails again.")
@click.option(
    "--confirm-runs",
    type=click.IntRange(min=2),
    default=None,
    help="Fresh processes per side for --confirm (default: enough to reach --alpha after correction).",
)
@click.option(
    "--baseline-python", default=None, help="Interpreter with the base build (for --confirm; default: this one)."
)
@click.option(
    "--candidate-python", default=None, help="Interpreter with the new build (for --confirm; default: this one)."
)
@model_file_option("Python file registering extra models, for --confirm reruns (repeatable).")
@click.option("--timeout", type=SECONDS, default=900.0, show_default=True, help="Seconds per confirmation run.")
@click.option(
    "--time-signal",
    type=click.Choice(TIME_SIGNAL_CHOICES),
    default=DEFAULT_TIME_SIGNAL,
    show_default=True,
    help="Per-step series to test: wall time, each step's process CPU time (ignores time spent "
    "descheduled on a loaded machine), or auto: CPU time for CPU runs with one intra-op thread, else "
    "wall. Records without CPU samples are tested on wall time, with a note (docs/regression-detection.md).",
)
@click.option(
    "--allow-inconclusive",
    is_flag=True,
    help="Exit 0 even when a change beyond --threshold is inconclusive (the test cannot reach --alpha "
    "with these sample sizes); they are still listed first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON instead of tables.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def compare_command(**kw: object) -> int:
    """Compare NEW against BASE: results files, stored run ids, or latest/previous.

    A time regression needs a median slowdown of at least --threshold AND a significant
    one-sided rank test after --correction; memory and deterministic counts use the
    threshold alone. Exits 1 when a regression or a new failure is found, 3 when a change
    beyond the threshold is inconclusive (its test cannot reach --alpha; --allow-inconclusive
    exits 0 instead), 0 otherwise.
    """
    import sys

    from ..compare.code_changes import code_change_note, model_code_changes
    from ..compare.regression import EXIT_INCONCLUSIVE, compare_results, exit_code
    from ..report.regression import FINDING_COLUMNS, comparison_json, finding_rows, render_markdown, time_signal_line
    from .terminal import Terminal

    term = Terminal(quiet=bool(kw["quiet"]))
    if (kw["baseline_python"] or kw["candidate_python"] or kw["confirm_runs"]) and not kw["confirm"]:
        raise click.UsageError("--baseline-python, --candidate-python and --confirm-runs need --confirm")
    cache: dict = {}
    try:
        base, base_label = _load_side(str(kw["base"]), kw["db"], kw["machine"], cache, bool(kw["include_incomplete"]))
        new, new_label = _load_side(str(kw["new"]), kw["db"], kw["machine"], cache, bool(kw["include_incomplete"]))
    finally:
        if "store" in cache:
            cache["store"].close()
    for label, side in ((base_label, base), (new_label, new)):
        if not side.complete:
            term.warning(f"{label} is an interrupted run: the configurations it never reached are missing from it")
    cmp = compare_results(
        base,
        new,
        threshold=kw["threshold"],
        alpha=kw["alpha"],
        correction=kw["correction"],
        count_threshold=kw["count_threshold"],
        time_signal=kw["time_signal"],
    )
    for note in (cmp.hardware_note, cmp.threads_note, code_change_note(model_code_changes(base.runs, new.runs))):
        if note:
            term.warning(f"{new_label} vs {base_label}: {note}")
    _warn_missing(cmp, {"base": base_label, "new": new_label}, term)
    if kw["confirm"] and cmp.regressions:
        from ..workflows.confirm import ConfirmError, ConfirmRequest, confirm_comparison, recorded_intra_op_threads

        request = ConfirmRequest(
            baseline_python=str(kw["baseline_python"] or sys.executable),
            candidate_python=str(kw["candidate_python"] or sys.executable),
            rounds=kw["confirm_runs"],
            timeout_s=float(kw["timeout"]),
            model_files=tuple(str(Path(p).resolve()) for p in kw["model_files"]),
            threads=recorded_intra_op_threads([*base.runs, *new.runs]),
        )
        term.info(
            f"confirming {len({f.config.key() for f in cmp.regressions})} flagged configuration(s) in fresh processes"
        )
        try:
            cmp = confirm_comparison(cmp, request, on_round=lambda r, n: term.info(f"  confirmation round {r}/{n}"))
        except ConfirmError as exc:
            raise click.ClickException(str(exc)) from None
    if kw["output"]:
        Path(kw["output"]).write_text(comparison_json(cmp, base_label=base_label, new_label=new_label) + "\n")
    markdown = render_markdown(cmp, base_label=base_label, new_label=new_label)
    if kw["markdown"]:
        Path(kw["markdown"]).write_text(markdown)
    if kw["as_json"]:
        term.markdown(comparison_json(cmp, base_label=base_label, new_label=new_label))
    else:
        if cmp.inconclusive:
            term.table(
                FINDING_COLUMNS,
                finding_rows(cmp.inconclusive),
                title="inconclusive (cannot reach alpha, or one side's records disagree)",
            )
            for f in cmp.inconclusive_beyond_threshold:
                term.warning(f"inconclusive: {f.config.label()} {f.metric} {f.change:+.1%}: {f.detail.get('reason')}")
        for title, findings in (("regressions", cmp.regressions), ("improvements", cmp.improvements)):
            if findings:
                term.table(FINDING_COLUMNS, finding_rows(findings), title=title)
        for s in cmp.new_failures:
            term.warning(f"new failure: {s.config.label()} {s.base_status} -> {s.new_status}: {s.error or ''}")
        for s in cmp.fixes:
            term.info(f"fixed: {s.config.label()} {s.base_status} -> {s.new_status}")
        if cmp.dismissed:
            term.info(
                f"{len(cmp.dismissed)} flagged change(s) not confirmed by {cmp.confirm_rounds} fresh runs per side"
            )
    signal_line = time_signal_line(cmp)
    if signal_line:
        term.info(signal_line)
    summary = (
        f"{len(cmp.regressions)} regression(s), {len(cmp.improvements)} improvement(s), "
        f"{len(cmp.new_failures)} new failure(s), {len(cmp.fixes)} fix(es), "
        f"{len(cmp.inconclusive)} inconclusive in {cmp.compared} configuration(s) ({new_label} vs {base_label})"
    )
    code = exit_code(cmp, allow_inconclusive=bool(kw["allow_inconclusive"]))
    (term.failure if code else term.success)(summary)
    if code == EXIT_INCONCLUSIVE:
        term.failure(
            f"{len(cmp.inconclusive_beyond_threshold)} change(s) beyond the threshold could not be tested "
            f"(exit {EXIT_INCONCLUSIVE}); each reason above says why (too few samples: rerun with more --repeat "
            "or --rounds), or pass --allow-inconclusive"
        )
    if code:
        raise click.exceptions.Exit(code)
    return 0
