"""Suite coverage: run each model's step once per mode under the API and op recorders,
in isolated workers, and fold the records into per-model coverage sets."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import RunConfig, plan
from ..results.schema import RunRecord
from ..stats.coverage_sets import ModelCoverage, summarize_coverage

__all__ = ["CoverageRun", "coverage_configs", "entries_from_records", "run_coverage"]


@dataclass
class CoverageRun:
    """What ``torchgauge coverage`` produces."""

    entries: list[ModelCoverage]
    failures: list[RunRecord]  # runs that failed under the recorders (reported, skipped)
    summary: dict[str, Any]
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "wall_s": self.wall_s,
            "models": {
                e.model: {
                    "domain": e.domain,
                    "tags": sorted(e.tags),
                    "modes": list(e.modes),
                    "apis": sorted(e.apis),
                    "ops": sorted(e.ops),
                    "modules": sorted(e.modules),
                }
                for e in self.entries
            },
            "failures": [
                {"model": r.config.model, "mode": r.config.mode, "status": r.status, "error": r.error}
                for r in self.failures
            ],
        }


def coverage_configs(
    models: Sequence[str], modes: Sequence[str], size: str = "smoke", device: str = "cpu"
) -> list[RunConfig]:
    """One config per (model, mode): no warm-up, no timing, only the coverage pass."""
    return plan(models, modes=modes, device=device, size=size, warmup=0, repeat=1, metrics=("coverage",))


def entries_from_records(records: Sequence[RunRecord]) -> tuple[list[ModelCoverage], list[RunRecord]]:
    """Union each model's sets over its ok modes; non-ok runs are returned as failures
    (``unsupported`` modes are not failures: a model without train mode is still covered).

    API names are restricted to the overridable universe: internal helpers that also pass
    through ``__torch_function__`` (profiler hooks around ``optimizer.step``) are not API.
    """
    from ..harness.api_recorders import api_universe
    from ..registry import get_spec

    universe = api_universe()

    acc: dict[str, dict[str, Any]] = {}
    failures = []
    for r in records:
        cov = r.metrics.get("coverage")
        if r.status != "ok" or not cov:
            if r.status not in ("unsupported", "skipped"):
                failures.append(r)
            continue
        slot = acc.setdefault(r.config.model, {"apis": set(), "ops": set(), "modules": set(), "modes": []})
        slot["apis"] |= universe.intersection(cov["apis"])
        slot["ops"] |= set(cov["ops"])
        slot["modules"] |= set(cov["modules"])
        slot["modes"].append(r.config.mode)
    entries = []
    for model, slot in acc.items():
        spec = get_spec(model)
        entries.append(
            ModelCoverage(
                model,
                spec.domain,
                spec.tags,
                frozenset(slot["apis"]),
                frozenset(slot["ops"]),
                frozenset(slot["modules"]),
                tuple(slot["modes"]),
            )
        )
    return entries, failures


def run_coverage(
    models: Sequence[str],
    modes: Sequence[str],
    runner_options: Any,
    *,
    size: str = "smoke",
    against_tag: str = "mlperf",
    target: float = 0.9,
    on_result: Callable[[RunRecord], None] | None = None,
) -> CoverageRun:
    """Record the coverage of ``models`` in ``modes`` and summarise it."""
    from ..harness.api_recorders import api_universe
    from ..runner import run_suite

    t0 = time.perf_counter()
    records = run_suite(coverage_configs(models, modes, size), runner_options, on_result=on_result)
    entries, failures = entries_from_records(records)
    summary = summarize_coverage(entries, universe=api_universe(), against_tag=against_tag, target=target)
    return CoverageRun(entries, failures, summary, round(time.perf_counter() - t0, 1))
