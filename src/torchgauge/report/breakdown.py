"""Time-breakdown reports: the per-domain table of the paper's Table 2 and per-model stacked bars.

Input is the ``metrics["breakdown"]`` record of each run (see
:mod:`torchgauge.harness.breakdown`); CUDA and CPU runs have different components and are
reported apart. A domain's figure is the unweighted mean over its models, as in Table 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..harness.breakdown import CPU_NAMES, CUDA_NAMES
from ..results.schema import RunRecord

__all__ = [
    "COMPONENTS",
    "COMPONENT_LABELS",
    "BreakdownRow",
    "breakdown_rows",
    "domain_table",
    "trace_breakdown_rows",
    "write_breakdown_chart",
]

COMPONENTS = {"cuda": CUDA_NAMES, "cpu": CPU_NAMES}
COMPONENT_LABELS = {
    "active": "GPU active",
    "data_movement_h2d": "H2D copy",
    "data_movement_d2h": "D2H copy",
    "data_movement_d2d": "D2D copy",
    "idle": "GPU idle",
    "aten": "ATen ops",
    "overhead": "overhead",
}
# "trace": rows made from trace files (one per device, then one per step).
_MODES = ("train", "eval", "trace")


@dataclass(frozen=True)
class BreakdownRow:
    """One run's breakdown."""

    model: str
    domain: str
    mode: str
    kind: str  # "cuda" | "cpu"
    span_ms: float  # profiled wall time of the K steps
    steps: int
    fractions: dict[str, float]


def breakdown_rows(records: Iterable[RunRecord]) -> list[BreakdownRow]:
    """Rows of the runs that carry a breakdown, in file order."""
    out = []
    for r in records:
        b = r.metrics.get("breakdown")  # failed runs have no metrics; fail_accuracy keeps them
        if not b or b.get("kind") not in COMPONENTS:
            continue
        out.append(
            BreakdownRow(
                r.config.model,
                r.domain or "-",
                r.config.mode,
                b["kind"],
                float(b["span_ms"]),
                int(b["steps"]),
                {k: float(b["fractions"].get(k, 0.0)) for k in COMPONENTS[b["kind"]]},
            )
        )
    return out


def trace_breakdown_rows(analyses: Iterable[Any]) -> list[BreakdownRow]:
    """Rows for trace analyses (:class:`torchgauge.workflows.trace_analysis.DeviceAnalysis`): one per
    device over all its steps, then one per step; mode ``"trace"``, domain ``"trace"``."""
    out = []
    for a in analyses:
        records = [("", a.breakdown)] + [(f" step {i}", s) for i, s in enumerate(a.per_step)]
        for suffix, b in records:
            kind = b["kind"]
            out.append(
                BreakdownRow(
                    a.label + suffix,
                    "trace",
                    "trace",
                    kind,
                    float(b["span_ms"]),
                    int(b["steps"]),
                    {k: float(b["fractions"].get(k, 0.0)) for k in COMPONENTS[kind]},
                )
            )
    return out


def domain_table(rows: Sequence[BreakdownRow], kind: str) -> tuple[list[str], list[list[Any]]]:
    """(columns, rows) of mean percentages per (domain, mode) for runs of ``kind``, Table 2 style."""
    if kind not in COMPONENTS:
        raise ValueError(f"unknown breakdown kind {kind!r}; accepted: {', '.join(COMPONENTS)}")
    names = COMPONENTS[kind]
    columns = ["domain", "mode", "models", *(f"{COMPONENT_LABELS[n]} %" for n in names)]
    groups: dict[tuple[str, str], list[BreakdownRow]] = {}
    for row in rows:
        if row.kind == kind:
            groups.setdefault((row.domain, row.mode), []).append(row)
    order = sorted(groups, key=lambda dm: (dm[0], _MODES.index(dm[1]) if dm[1] in _MODES else 9))
    table = []
    for domain, mode in order:
        members = groups[(domain, mode)]
        means = [100.0 * sum(m.fractions[n] for m in members) / len(members) for n in names]
        table.append([domain, mode, len(members), *means])
    return columns, table


def write_breakdown_chart(rows: Sequence[BreakdownRow], path: str | Path) -> Path:
    """Per-model stacked bars (one panel per kind and mode present) to ``path`` (.png/.svg/.pdf)."""
    from .plotting import pyplot

    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ValueError(f"cannot write a chart to {path.name!r}; accepted extensions: .png, .svg, .pdf")
    panels = [(k, m) for k in COMPONENTS for m in _MODES if any(r.kind == k and r.mode == m for r in rows)]
    if not panels:
        raise ValueError("no run has a breakdown to draw; run with --metrics breakdown")
    plt = pyplot()
    most = max(sum(1 for r in rows if r.kind == k and r.mode == m) for k, m in panels)
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(10.5, 1.2 + 0.28 * most * len(panels) + 0.6 * len(panels)), squeeze=False
    )
    for ax, (kind, mode) in zip(axes[:, 0], panels):
        members = [r for r in rows if r.kind == kind and r.mode == mode]
        labels = [r.model if r.mode == "trace" else f"{r.model} ({r.domain})" for r in members]
        left = [0.0] * len(members)
        for name in COMPONENTS[kind]:
            widths = [100.0 * r.fractions[name] for r in members]
            ax.barh(labels, widths, left=left, label=COMPONENT_LABELS[name])
            left = [a + b for a, b in zip(left, widths)]
        ax.set_xlim(0, 100)
        ax.invert_yaxis()  # first model on top, as in the file
        ax.set_xlabel("% of profiled wall time")
        ax.set_title(f"{'GPU' if kind == 'cuda' else 'CPU'} time breakdown, {mode}")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
