"""Compiler comparison: candidate backend versus baseline backend, model by model.

The paper's Figures 3-4 (TorchInductor versus eager): per model and mode the ratios
candidate / baseline of median execution time, peak CPU memory and peak GPU memory, their
geometric means, the candidate's compile time (``metrics["compile"]``), the models whose
candidate run failed (to compile or to run) and those that failed the accuracy check.

Runs pair on (model, mode, device, precision, requested batch size); ratios below 1 mean
the candidate is faster or leaner. ``BackendRow.speedup`` and ``compression_ratio`` are the
reciprocals (baseline / candidate, above 1: the candidate is better), the HUD's direction,
and :func:`compiler_summary` gives the HUD's headline figures per mode. Runs with ``fail_accuracy`` keep their ratios in
the table but are left out of the geometric means: a fast wrong answer is not a speed-up.

Example:
    >>> cmp = compare_backends(eager_runs, inductor_runs, baseline="eager", candidate="inductor")  # doctest: +SKIP
    >>> cmp.geomeans["eval"]["time"]  # doctest: +SKIP
    {'geomean': 0.68, 'n': 12}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..harness.metrics import quantities
from ..results.schema import RunRecord
from ..stats.ratios import RatioRow, geomean_by, ratio_rows
from .matching import CompareError, Unmatched, config_key, config_label, match_runs, run_values, time_verdict

__all__ = [
    "BackendComparison",
    "BackendRow",
    "compare_backends",
    "compiler_summary",
    "ratio_metrics",
    "select_backend",
]


def ratio_metrics() -> dict[str, str]:
    """Compared metric (a key of :func:`run_values`: the registry's ratio keys) -> its title in tables and charts."""
    return {q.ratio_key: q.title or q.name for q in quantities() if q.ratio_key}


FAIL_ACCURACY = "fail_accuracy"


@dataclass(frozen=True)
class BackendRow:
    """One model in one mode: both sides' values and the ratios candidate / baseline."""

    model: str
    mode: str
    device: str
    precision: str
    batch_size: int | None  # the batch size both runs used
    baseline: dict[str, float | None]  # metric -> value (time in ms, memory in MB)
    candidate: dict[str, float | None]
    ratios: dict[str, float | None]  # metric -> candidate / baseline
    compile_s: float | None = None  # the candidate's compile time, from metrics["compile"]
    graph_breaks: int | None = None
    accuracy: str | None = None  # the candidate's accuracy status when checked
    # candidate time "faster" | "slower" | "same" | "inconclusive" (threshold + rank test; inconclusive: it cannot
    # reach alpha)
    verdict: str | None = None

    @property
    def failed_accuracy(self) -> bool:
        return self.accuracy == FAIL_ACCURACY

    @property
    def speedup(self) -> float | None:
        """Baseline time / candidate time: above 1 the candidate is faster (the HUD's speedup)."""
        r = self.ratios.get("time")
        return 1.0 / r if r else None

    @property
    def compression_ratio(self) -> float | None:
        """Baseline peak / candidate peak (GPU memory on CUDA, CPU resident set otherwise): above 1 leaner."""
        r = self.ratios.get("gpu_mem" if self.device.startswith("cuda") else "cpu_mem")
        return 1.0 / r if r else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup, "compression_ratio": self.compression_ratio}


@dataclass
class BackendComparison:
    """Everything ``compare-backends`` reports; :meth:`to_dict` is its JSON output."""

    baseline: str
    candidate: str
    rows: list[BackendRow]
    geomeans: dict[str, dict[str, dict[str, Any]]]  # mode -> metric -> {"geomean", "n"}
    unmatched: list[Unmatched] = field(default_factory=list)

    @property
    def failed_candidate(self) -> list[Unmatched]:
        """Configurations whose candidate run failed (compile errors, crashes, OOM, ...)."""
        return [u for u in self.unmatched if u.reason == "failed" and u.side in (self.candidate, None)]

    @property
    def failed_accuracy(self) -> list[BackendRow]:
        return [r for r in self.rows if r.failed_accuracy]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "compare-backends",
            "baseline": self.baseline,
            "candidate": self.candidate,
            "ratio": "candidate / baseline",
            "speedup": "baseline time / candidate time",
            "rows": [r.as_dict() for r in self.rows],
            "geomeans": self.geomeans,
            "summary": compiler_summary(self),
            "failed_candidate": [u.as_dict() for u in self.failed_candidate],
            "failed_accuracy": [f"{r.model}/{r.mode}" for r in self.failed_accuracy],
            "unmatched": [u.as_dict() for u in self.unmatched],
        }


def select_backend(records: Sequence[RunRecord], backend: str | None, source: str) -> list[RunRecord]:
    """The runs of ``backend`` in ``records`` (all of them when ``backend`` is None).

    Raises:
        CompareError: no run of that backend; the message lists the backends present.
    """
    if backend is None:
        return list(records)
    chosen = [r for r in records if r.config.backend == backend]
    if not chosen:
        present = sorted({r.config.backend for r in records}) or ["none"]
        raise CompareError(f"{source} has no runs of backend {backend!r}; it has: {', '.join(present)}")
    return chosen


def _accuracy(record: RunRecord) -> str | None:
    if record.status in (FAIL_ACCURACY, "eager_nondeterministic"):
        return record.status
    acc = record.metrics.get("accuracy")
    return acc.get("status") if isinstance(acc, dict) else None


def compare_backends(
    baseline_runs: Sequence[RunRecord],
    candidate_runs: Sequence[RunRecord],
    *,
    baseline: str,
    candidate: str,
) -> BackendComparison:
    """Compare two backends' runs of the same models.

    Args:
        baseline_runs: runs of the baseline backend (e.g. eager), one per configuration.
        candidate_runs: runs of the candidate backend (e.g. inductor).
        baseline, candidate: names shown in the report (usually the backend names).

    Returns:
        A :class:`BackendComparison`: rows in baseline order, geometric means per mode
        and metric (accuracy failures excluded), and the runs that could not be compared.

    Raises:
        CompareError: a side has two runs of one configuration, or the names are equal.
    """
    if baseline == candidate:
        raise CompareError(f"baseline and candidate are both {baseline!r}; name two different backends or files")
    matching = match_runs(
        baseline_runs,
        candidate_runs,
        key=lambda r: config_key(r, without="backend"),
        label=lambda r: config_label(r, without="backend"),
        base_label=baseline,
        new_label=candidate,
    )
    values = {k: (run_values(b), run_values(c)) for k, b, c in matching.pairs}
    ratio_by_key = {row.key: row.ratios for row in ratio_rows(values, list(ratio_metrics()))}
    rows: list[BackendRow] = []
    for k, b, c in matching.pairs:
        compile_info = c.metrics.get("compile") if isinstance(c.metrics.get("compile"), dict) else {}
        rows.append(
            BackendRow(
                model=b.config.model,
                mode=b.config.mode,
                device=b.config.device,
                precision=b.config.precision,
                batch_size=b.batch_size if b.batch_size is not None else c.batch_size,
                baseline=values[k][0],
                candidate=values[k][1],
                ratios=dict(ratio_by_key[k]),
                compile_s=compile_info.get("compile_s"),
                graph_breaks=compile_info.get("graph_breaks"),
                accuracy=_accuracy(c),
                verdict=time_verdict(b, c),
            )
        )
    return BackendComparison(
        baseline=baseline,
        candidate=candidate,
        rows=rows,
        geomeans=_geomeans(rows),
        unmatched=matching.unmatched,
    )


def _geomeans(rows: Sequence[BackendRow]) -> dict[str, dict[str, dict[str, Any]]]:
    counted = [
        RatioRow(key=(r.model, r.mode), base=r.baseline, new=r.candidate, ratios=r.ratios)
        for r in rows
        if not r.failed_accuracy
    ]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for metric in ratio_metrics():
        for mode, (g, n) in geomean_by(counted, metric, group=lambda k: k[1]).items():
            out.setdefault(mode, {})[metric] = {"geomean": g, "n": n}
    return out


def compiler_summary(cmp: BackendComparison) -> dict[str, dict[str, Any]]:
    """Per mode, the TorchInductor paper's and the HUD's headline figures for the candidate.

    - ``pass_rate``: ``passed / total``: configurations the candidate ran and passed (not
      failed, not ``fail_accuracy``) among those it was asked to run (compared or failed);
    - ``speedup_geomean``: geometric mean of baseline / candidate time over the passing rows
      (not clipped: PyTorch's ``runner.py`` clips slowdowns to 1 before averaging);
    - ``compression_ratio``: mean of baseline / candidate peak memory over the passing rows
      (GPU memory on CUDA, resident set on CPU), as the HUD's memory column;
    - ``compilation_latency_s``: mean candidate compile time (s) over passing rows that compiled.
    """
    out: dict[str, dict[str, Any]] = {}
    failed_by_mode: dict[str, int] = {}
    for u in cmp.failed_candidate:
        failed_by_mode[u.mode] = failed_by_mode.get(u.mode, 0) + 1
    modes = list(dict.fromkeys([r.mode for r in cmp.rows] + list(failed_by_mode)))
    for mode in modes:
        rows = [r for r in cmp.rows if r.mode == mode]
        passing = [r for r in rows if not r.failed_accuracy]
        total = len(rows) + failed_by_mode.get(mode, 0)
        time_gm = cmp.geomeans.get(mode, {}).get("time", {}).get("geomean")
        memory = [r.compression_ratio for r in passing if r.compression_ratio]
        compile_s = [r.compile_s for r in passing if r.compile_s]
        out[mode] = {
            "passed": len(passing),
            "total": total,
            "pass_rate": len(passing) / total if total else None,
            "speedup_geomean": 1.0 / time_gm if time_gm else None,
            "compression_ratio": sum(memory) / len(memory) if memory else None,
            "compilation_latency_s": sum(compile_s) / len(compile_s) if compile_s else None,
        }
    return out
