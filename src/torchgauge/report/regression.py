"""Present a :class:`~torchgauge.compare.regression.Comparison`: Markdown (a GitHub issue body) and JSON.

The Markdown is self-contained so ``gh issue create --body-file report.md`` needs nothing
else: a summary line, the regression table (model, config, metric, base, new, change,
p-value), improvements, new failures and fixes, configurations that could not be compared,
and both environments side by side.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..compare.regression import Comparison, Finding, StatusChange
from ..harness.metrics import Quantity, quantities
from .escape import markdown_code, markdown_text

__all__ = [
    "ENV_KEYS",
    "FINDING_COLUMNS",
    "comparison_json",
    "finding_rows",
    "flagged_by_line",
    "format_value",
    "render_markdown",
    "signal_name",
    "time_signal_line",
]

FINDING_COLUMNS = ("model", "config", "metric", "signal", "base", "new", "change", "p-value")
# Environment fields shown side by side, in this order (the JSON keeps the whole env).
ENV_KEYS = (
    "torch_version",
    "torch_git_version",
    "python_version",
    "cuda_version",
    "gpu_name",
    "gpu_driver",
    "cpu_model",
    "cpu_count",
    "memory_gib",
    "torch_num_threads",
    "hostname",
    "machine_fingerprint",
    "platform",
)


def _judged(metric: str) -> Quantity | None:
    """The quantity a finding's metric (a record key) names: the one ``compare`` judges."""
    return next((q for q in quantities() if q.record_key == metric and q.rule != "none"), None)


def format_value(metric: str, value: float | None) -> str:
    """A value with its unit: ``12.35 ms``, ``512 MiB``, ``1,234,567`` for counts."""
    if value is None:
        return "-"
    q = _judged(metric)
    if q is None or q.rule == "exact":  # deterministic counts
        return f"{value:,.0f}"
    if q.unit == "MiB":
        return f"{value:,.1f} {q.unit}"
    return f"{value:.4g} {q.unit}"


def _change(f: Finding) -> str:
    q = _judged(f.metric)
    if q is not None and q.rule == "flag":
        return "leak" if f.detail.get("new_leaking") else "no leak"
    return "-" if f.change is None else f"{f.change:+.1%}"


# How each tested signal is named for people.
_SIGNAL_NAMES = {"cpu": "per-step process CPU time", "wall": "wall time"}


def signal_name(f: Finding) -> str:
    """What judged a finding, from the registry's facts: the time series a rank test read, or a
    quantity and its rule (``ATen operators per step, deterministic count``). No Markdown
    punctuation, so that it reads the same escaped in a table."""
    if "signal" in f.detail:
        return f"{_SIGNAL_NAMES.get(f.detail['signal'], f.detail['signal'])}, rank test"
    q = _judged(f.metric)
    if q is None:
        return f.metric
    title = q.title or q.name
    if q.rule == "rank_test":  # a finding made before the signal was recorded
        return f"{title}, rank test"
    if q.rule == "exact":
        return f"{title}, deterministic count"
    if q.rule == "memory":
        return f"{title}, deterministic" if q.deterministic else f"{title}, process peak over a spread floor"
    if q.rule == "flag":
        return f"{title}, leak flag" if q.record_key == "leak" else f"{title}, flag"
    return title


def _p(p: float | None) -> str:
    return "-" if p is None else f"{p:.2g}"


def _config(f: Finding | StatusChange) -> str:
    c = f.config
    bs = "" if c.batch_size is None else f" bs={c.batch_size}"
    return f"{c.mode}/{c.device}/{c.precision}/{c.backend}{bs}"


def finding_rows(findings: Iterable[Finding]) -> list[list[str]]:
    """Rows of :data:`FINDING_COLUMNS`, formatted for people (Markdown and terminal)."""
    return [
        [
            f.config.model,
            _config(f),
            f.metric,
            signal_name(f),
            format_value(f.metric, f.base),
            format_value(f.metric, f.new),
            _change(f),
            _p(f.p_value),
        ]
        for f in findings
    ]


def _table(columns: Iterable[str], rows: list[list[str]]) -> list[str]:
    # every cell is escaped: model names, errors, labels and env values come from files
    cols = [markdown_text(c) for c in columns]
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    out += ["| " + " | ".join(markdown_text(v) for v in row) + " |" for row in rows]
    return out


# Changed operators listed per finding in the Markdown (the JSON keeps them all).
MAX_OPS_SHOWN = 12


def _ops_lines(findings: Iterable[Finding]) -> list[str]:
    out = []
    for f in findings:
        ops = f.detail.get("ops")
        if ops:
            shown = [
                f"{markdown_code(op)} {markdown_text(v.get('base'))} -> {markdown_text(v.get('new'))}"
                for op, v in list(ops.items())[:MAX_OPS_SHOWN]
            ]
            more = f" and {len(ops) - MAX_OPS_SHOWN} more" if len(ops) > MAX_OPS_SHOWN else ""
            out.append(f"- {markdown_code(f.config.model)} {markdown_text(_config(f))}: " + ", ".join(shown) + more)
    return out


def flagged_by_line(findings: Iterable[Finding]) -> str | None:
    """``3 by per-step process CPU time, rank test; 1 by ATen operators per step, deterministic count``:
    which signals flagged these findings, most first (None for none)."""
    counts: dict[str, int] = {}
    for f in findings:
        name = signal_name(f)
        counts[name] = counts.get(name, 0) + 1
    if not counts:
        return None
    return "; ".join(f"{n} by {name}" for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def time_signal_line(cmp: Comparison) -> str | None:
    """Which per-step time series the rank tests read, per configuration, and why wall time
    where CPU time was asked for (None when no time was tested)."""
    counts = cmp.time_signals
    if not counts:
        return None
    parts = []
    for (signal, note), n in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        parts.append(f"{_SIGNAL_NAMES.get(signal, signal)} in {n} configuration(s)" + (f" ({note})" if note else ""))
    return f"time tested on {'; '.join(parts)} [--time-signal {cmp.time_signal}]"


def render_markdown(cmp: Comparison, *, base_label: str = "base", new_label: str = "new") -> str:
    """The comparison as a Markdown document (a GitHub issue body).

    Args:
        cmp: from :func:`~torchgauge.compare.regression.compare_results`.
        base_label, new_label: how the two sides are named (file names, run ids).
    """
    n_reg, n_imp = len(cmp.regressions), len(cmp.improvements)
    verdict = (
        "regressions found"
        if n_reg
        else "inconclusive changes"
        if cmp.inconclusive_beyond_threshold
        else "no regression"
    )
    lines = [
        f"# torchgauge: {verdict} ({markdown_text(new_label)} vs {markdown_text(base_label)})",
        "",
        f"**{n_reg} regression(s), {n_imp} improvement(s), {len(cmp.new_failures)} new failure(s), "
        f"{len(cmp.fixes)} fix(es), {len(cmp.inconclusive)} inconclusive** "
        f"across {cmp.compared} compared configuration(s); "
        f"threshold {cmp.threshold:.1%}, alpha {cmp.alpha:g} after {cmp.correction} correction "
        f"(time: median change and one-sided Mann-Whitney U; memory and counts: threshold only).",
        "",
    ]
    missing = {
        label: sum(1 for u in cmp.unmatched if u.reason == "missing" and u.side == side)
        for side, label in (("base", base_label), ("new", new_label))
    }
    for label, count in missing.items():
        if count:  # a partial run: say so up front, not only inside "Not compared"
            lines += [
                f"**Warning: {count} configuration(s) missing from {markdown_text(label)}** (not compared; see below).",
                "",
            ]
    signal_line = time_signal_line(cmp)
    if signal_line:
        lines += [markdown_text(signal_line[0].upper() + signal_line[1:]) + ".", ""]
    for note in (cmp.hardware_note, cmp.threads_note):
        if note:
            lines += [f"**Warning: {markdown_text(note)}**", ""]
    flagged = flagged_by_line(cmp.regressions)
    if flagged:  # which signal gates: a noise-free count, a rank test on CPU or wall time, a memory floor
        lines += [f"**Regressions flagged by:** {markdown_text(flagged)}.", ""]
    if cmp.inconclusive:
        lines += ["## Inconclusive (the test cannot reach alpha, or one side's records disagree)", ""]
        lines += _table(
            (*FINDING_COLUMNS, "reason"),
            [[*row, f.detail.get("reason", "")] for row, f in zip(finding_rows(cmp.inconclusive), cmp.inconclusive)],
        )
        lines.append("")
    for title, findings in (("Regressions", cmp.regressions), ("Improvements", cmp.improvements)):
        lines.append(f"## {title}")
        lines.append("")
        lines += _table(FINDING_COLUMNS, finding_rows(findings)) if findings else ["None."]
        ops = _ops_lines(findings)
        if ops:
            lines += ["", "Operators whose counts changed:", *ops]
        lines.append("")
    lines += ["## New failures and fixes", ""]
    status_rows = [
        [s.config.model, _config(s), s.base_status, s.new_status, kind, (s.error or "")[:120]]
        for kind, group in (("new failure", cmp.new_failures), ("fix", cmp.fixes))
        for s in group
    ]
    lines += (
        _table(("model", "config", base_label, new_label, "kind", "error"), status_rows) if status_rows else ["None."]
    )
    lines.append("")
    if cmp.unmatched:
        lines += [f"<details><summary>Not compared ({len(cmp.unmatched)})</summary>", ""]
        lines += _table(("model", "config", "reason"), [[u.model, u.config, u.detail] for u in cmp.unmatched])
        lines += ["", "</details>", ""]
    lines += ["## Environments", ""]
    env_rows = [
        [k, str(cmp.base_env.get(k, "-")), str(cmp.new_env.get(k, "-"))]
        for k in ENV_KEYS
        if k in cmp.base_env or k in cmp.new_env
    ]
    lines += _table(("", base_label, new_label), env_rows) if env_rows else ["No environment recorded."]
    return "\n".join(lines) + "\n"


def comparison_json(cmp: Comparison, *, base_label: str = "base", new_label: str = "new") -> str:
    """The comparison as strict JSON (``regressions``/``improvements`` entries start with FINDING_KEYS)."""
    doc: dict[str, Any] = {"base": base_label, "new": new_label, **cmp.to_dict()}
    return json.dumps(_finite(doc), indent=1, allow_nan=False, default=str)


def _finite(obj: Any) -> Any:
    # inf (a change from 0) and NaN are not JSON: they become null
    if isinstance(obj, float):
        return obj if obj == obj and abs(obj) != float("inf") else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
