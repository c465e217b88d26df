"""Coverage analysis over per-model API and operator sets: suite union, a tagged subset
(``mlperf``), marginal contributions, a greedy covering order and per-domain counts.

Pure set arithmetic on plain Python values (no torch); the recorders that produce the sets
live in :mod:`torchgauge.harness.api_recorders`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_COVER_TARGET",
    "KINDS",
    "ModelCoverage",
    "greedy_order",
    "smallest_cover",
    "summarize_coverage",
    "unique_to_each",
    "write_domain_chart",
]

KINDS = ("apis", "ops")
# Fraction of the suite's surface the "fast CI subset" must cover.
DEFAULT_COVER_TARGET = 0.90


@dataclass(frozen=True)
class ModelCoverage:
    """The surface one model reaches, over the modes that ran."""

    model: str
    domain: str
    tags: frozenset[str] = frozenset()
    apis: frozenset[str] = frozenset()
    ops: frozenset[str] = frozenset()
    modules: frozenset[str] = frozenset()
    modes: tuple[str, ...] = ()

    def items(self, kind: str) -> frozenset[str]:
        if kind not in KINDS:
            raise ValueError(f"unknown coverage kind {kind!r}; accepted: {', '.join(KINDS)}")
        return getattr(self, kind)


def _union(entries: Iterable[ModelCoverage], kind: str) -> set[str]:
    out: set[str] = set()
    for e in entries:
        out |= e.items(kind)
    return out


def unique_to_each(entries: Sequence[ModelCoverage], kind: str) -> dict[str, list[str]]:
    """For each model, the items no other model in ``entries`` reaches (its marginal contribution)."""
    counts: dict[str, int] = {}
    for e in entries:
        for item in e.items(kind):
            counts[item] = counts.get(item, 0) + 1
    return {e.model: sorted(i for i in e.items(kind) if counts[i] == 1) for e in entries}


def greedy_order(entries: Sequence[ModelCoverage], kind: str) -> list[tuple[str, int, int]]:
    """Models ordered by the new items each adds (greedy set cover).

    Returns ``(model, new_items, cumulative_items)`` triples; ties break by model name so the
    order is deterministic. Models adding nothing come last with ``new_items == 0``.
    """
    remaining = {e.model: set(e.items(kind)) for e in entries}
    covered: set[str] = set()
    order: list[tuple[str, int, int]] = []
    while remaining:
        model = min(remaining, key=lambda m: (-len(remaining[m] - covered), m))
        new = remaining.pop(model) - covered
        covered |= new
        order.append((model, len(new), len(covered)))
    return order


def smallest_cover(order: Sequence[tuple[str, int, int]], target: float = DEFAULT_COVER_TARGET) -> list[str]:
    """The greedy prefix that reaches ``target`` of the total items (a fast CI subset)."""
    if not 0 < target <= 1:
        raise ValueError(f"invalid cover target {target}; accepted: a fraction in (0, 1]")
    total = order[-1][2] if order else 0
    chosen: list[str] = []
    for model, _new, cumulative in order:
        chosen.append(model)
        if cumulative >= target * total:
            break
    return chosen


def summarize_coverage(
    entries: Sequence[ModelCoverage],
    *,
    universe: frozenset[str] | set[str],
    against_tag: str = "mlperf",
    target: float = DEFAULT_COVER_TARGET,
) -> dict[str, Any]:
    """Suite-level numbers: unions, fraction of the API universe, the tagged subset and ratio,
    marginal contributions, greedy order, the smallest covering subset, per-domain counts."""
    tagged = [e for e in entries if against_tag in e.tags]
    out: dict[str, Any] = {
        "models": len(entries),
        "against": against_tag,
        "tagged_models": sorted(e.model for e in tagged),
    }
    for kind in KINDS:
        suite = _union(entries, kind)
        sub = _union(tagged, kind)
        if kind == "apis":
            suite_n, sub_n = len(suite & set(universe)), len(sub & set(universe))
        else:
            suite_n, sub_n = len(suite), len(sub)
        order = greedy_order(entries, kind)
        out[kind] = {
            "suite": suite_n,
            "tagged": sub_n,
            "ratio": (suite_n / sub_n) if sub_n else None,
            "unique": {m: items for m, items in unique_to_each(entries, kind).items() if items},
            "greedy": [{"model": m, "new": n, "cumulative": c} for m, n, c in order],
            "cover_subset": smallest_cover(order, target),
        }
    out["apis"]["universe"] = len(universe)
    out["apis"]["fraction_of_universe"] = out["apis"]["suite"] / len(universe) if universe else None
    out["cover_target"] = target
    out["modules"] = len(_union_modules(entries))
    out["per_domain"] = {
        domain: {
            "models": len(group),
            "apis": len(_union(group, "apis") & set(universe)),
            "ops": len(_union(group, "ops")),
        }
        for domain, group in sorted(_by_domain(entries).items())
    }
    return out


def _union_modules(entries: Iterable[ModelCoverage]) -> set[str]:
    out: set[str] = set()
    for e in entries:
        out |= e.modules
    return out


def _by_domain(entries: Iterable[ModelCoverage]) -> dict[str, list[ModelCoverage]]:
    groups: dict[str, list[ModelCoverage]] = {}
    for e in entries:
        groups.setdefault(e.domain, []).append(e)
    return groups


def write_domain_chart(per_domain: dict[str, dict[str, int]], path: str) -> str:
    """Grouped bar chart (APIs and ops per domain) to ``path`` (.png or .svg); returns the path."""
    from ..report.plotting import pyplot

    plt = pyplot()
    domains = list(per_domain)
    xs = range(len(domains))
    width = 0.4
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(domains)), 4))
    ax.bar([x - width / 2 for x in xs], [per_domain[d]["apis"] for d in domains], width, label="Python APIs")
    ax.bar([x + width / 2 for x in xs], [per_domain[d]["ops"] for d in domains], width, label="ATen operators")
    ax.set_xticks(list(xs), domains)
    ax.set_ylabel("distinct items reached")
    ax.set_title("PyTorch surface covered, by domain")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
