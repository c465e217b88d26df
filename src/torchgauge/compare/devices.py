"""Hardware comparison: the same models measured on two devices, machines or torch builds.

The paper's Figure 5 (A100 versus MI210): per model and mode the ratio of median execution
times A / B (< 1: A is faster), the geometric mean per mode, and how many models each side
wins (ratios within :data:`~torchgauge.stats.ratios.DEFAULT_TIE_BAND` of 1 are ties).

Runs pair on (model, mode, precision, backend, requested batch size); the device is what
differs. Whatever could not be paired is listed with the reason (missing on one side,
failed on one side, different batch sizes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..results.schema import ResultsFile, RunRecord
from ..stats.ratios import DEFAULT_TIE_BAND, count_wins, geomean_by, ratio_rows
from .matching import Unmatched, config_key, config_label, match_runs, run_values, time_verdict

__all__ = ["DeviceComparison", "DeviceRow", "compare_devices", "describe_env"]


@dataclass(frozen=True)
class DeviceRow:
    """One model in one mode on both sides."""

    model: str
    mode: str
    precision: str
    backend: str
    batch_size: int | None
    a_device: str
    b_device: str
    a_ms: float | None  # median step time on side A
    b_ms: float | None
    ratio: float | None  # a_ms / b_ms: < 1 means A is faster
    # A against B: "faster" | "slower" | "same" | "inconclusive" (threshold + rank test; inconclusive: it cannot
    # reach alpha)
    verdict: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class DeviceComparison:
    """Everything ``compare-devices`` reports; :meth:`to_dict` is its JSON output."""

    a: str  # label of side A
    b: str
    a_env: str  # one-line description of A's hardware and torch
    b_env: str
    rows: list[DeviceRow]
    geomeans: dict[str, dict[str, Any]]  # mode -> {"geomean": A/B, "n": rows counted}
    wins: dict[str, dict[str, int]]  # mode -> {"a": n, "b": n, "ties": n}
    tie_band: float
    unmatched: list[Unmatched] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "compare-devices",
            "a": self.a,
            "b": self.b,
            "a_env": self.a_env,
            "b_env": self.b_env,
            "ratio": "A / B (median time; < 1: A is faster)",
            "rows": [r.as_dict() for r in self.rows],
            "geomeans": self.geomeans,
            "wins": self.wins,
            "tie_band": self.tie_band,
            "unmatched": [u.as_dict() for u in self.unmatched],
        }


def describe_env(env: dict[str, Any]) -> str:
    """One line naming the hardware and torch build of a results file's environment."""
    gpu = env.get("gpu_name")
    cpu = env.get("cpu_model") or "unknown CPU"
    hw = f"{gpu} (host {cpu})" if gpu else f"{cpu} x{env.get('cpu_count', '?')}"
    return f"{hw}, torch {env.get('torch_version', '?')}"


def compare_devices(
    a: ResultsFile | Sequence[RunRecord],
    b: ResultsFile | Sequence[RunRecord],
    *,
    a_label: str = "A",
    b_label: str = "B",
    tie_band: float = DEFAULT_TIE_BAND,
) -> DeviceComparison:
    """Compare the times of the same configurations in two result sets.

    Args:
        a, b: results files (or plain lists of records) from the two devices or builds.
        a_label, b_label: names of the sides in the report (e.g. the file names).
        tie_band: relative band around 1 within which neither side wins.

    Returns:
        A :class:`DeviceComparison` with rows in A's order.

    Raises:
        CompareError: a side has two runs of one configuration (e.g. on two devices).
    """
    a_runs = a.runs if isinstance(a, ResultsFile) else list(a)
    b_runs = b.runs if isinstance(b, ResultsFile) else list(b)
    matching = match_runs(
        a_runs,
        b_runs,
        key=lambda r: config_key(r, without="device"),
        label=lambda r: config_label(r, without="device"),
        base_label=a_label,
        new_label=b_label,
    )
    # ratio_rows gives new / base; A / B is wanted, so B is the base.
    times = {k: ({"time": run_values(rb)["time"]}, {"time": run_values(ra)["time"]}) for k, ra, rb in matching.pairs}
    ratios = {row.key: row for row in ratio_rows(times, ["time"])}
    rows = [
        DeviceRow(
            model=ra.config.model,
            mode=ra.config.mode,
            precision=ra.config.precision,
            backend=ra.config.backend,
            batch_size=ra.batch_size if ra.batch_size is not None else rb.batch_size,
            a_device=ra.config.device,
            b_device=rb.config.device,
            a_ms=times[k][1]["time"],
            b_ms=times[k][0]["time"],
            ratio=ratios[k].ratios["time"],
            verdict=time_verdict(rb, ra),
        )
        for k, ra, rb in matching.pairs
    ]
    geomeans = {
        mode: {"geomean": g, "n": n}
        for mode, (g, n) in geomean_by(ratios.values(), "time", group=lambda k: k[1]).items()
    }
    wins: dict[str, dict[str, int]] = {}
    for mode in geomeans:
        # count_wins: "new" (the numerator, A) wins below 1, "base" (B) above.
        w = count_wins([r.ratio for r in rows if r.mode == mode], band=tie_band)
        wins[mode] = {"a": w.new, "b": w.base, "ties": w.ties}
    return DeviceComparison(
        a=a_label,
        b=b_label,
        a_env=describe_env(a.env) if isinstance(a, ResultsFile) else "",
        b_env=describe_env(b.env) if isinstance(b, ResultsFile) else "",
        rows=rows,
        geomeans=geomeans,
        wins=wins,
        tie_band=tie_band,
        unmatched=matching.unmatched,
    )
