"""Power law plus constant, ``cost = a * x**b + c``, fitted to a scaling sweep.

Pure functions over floats (no torch, no numpy). For a fixed exponent ``b`` the model is
linear in ``(a, c)``, so the fit is a one-dimensional search over ``b`` with a closed-form
weighted least-squares solve inside. Residuals are relative (weights ``1 / y**2``): sweep
costs span orders of magnitude and a 10% miss should count the same at every point.
``c`` is a fixed cost (launch overhead, framework time) and is kept >= 0: when the free
solution is negative the fit falls back to a pure power law.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["EXPONENT_RANGE", "MIN_POINTS", "WIDE_EXPONENT_INTERVAL", "PowerLawFit", "fit_power_law"]

# Exponents searched: anything a cost-vs-size curve plausibly has (sub-linear to cubic+).
EXPONENT_RANGE = (-4.0, 4.0)
# Three parameters need at least three distinct x values; with exactly three the fit is exact.
MIN_POINTS = 3
# An exponent interval wider than this says the sweep does not determine the scaling
# (linear vs quadratic differ by 1.0; half of that is already a different story).
WIDE_EXPONENT_INTERVAL = 0.5
# Two-sided 97.5% Student t quantiles by degrees of freedom (1..10); 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
_GRID_STEPS = 801  # coarse grid over EXPONENT_RANGE (step 0.01) before golden-section refinement
_GOLDEN_ITERATIONS = 60


@dataclass(frozen=True)
class PowerLawFit:
    """``y = a * x**b + c`` with its quality on the points it was fitted to."""

    a: float
    b: float
    c: float
    n: int  # points fitted
    r2: float  # weighted (relative) coefficient of determination, 1.0 = perfect
    max_rel_residual: float  # largest |fit - y| / y over the points
    dof: int  # degrees of freedom left: n - 3 (n - 2 when c was pinned to 0)
    at_bound: bool = False  # b hit the edge of EXPONENT_RANGE: the data do not determine it (flat or noisy)
    # 95% profile interval of b (None: no degrees of freedom left, so no uncertainty estimate)
    b_low: float | None = None
    b_high: float | None = None

    @property
    def b_interval_wide(self) -> bool:
        """The exponent is not pinned down: no interval, or one wider than :data:`WIDE_EXPONENT_INTERVAL`."""
        return self.b_low is None or self.b_high is None or self.b_high - self.b_low > WIDE_EXPONENT_INTERVAL

    def predict(self, x: float) -> float:
        return self.a * x**self.b + self.c

    def describe(self, x_name: str = "x") -> str:
        """E.g. ``1.9e-03 * embedding_dim^1.02 + 0.41  (R^2 0.998, max residual 3.1%)``."""
        bound = ", exponent at search bound: ill-determined" if self.at_bound else ""
        interval = (
            "exponent 95% interval: none (no dof left)"
            if self.b_low is None or self.b_high is None
            else f"exponent 95% interval {self.b_low:.3g}..{self.b_high:.3g}"
        )
        wide = ", WIDE: the exponent is not determined by these points" if self.b_interval_wide else ""
        return (
            f"{self.a:.3g} * {x_name}^{self.b:.3g} + {self.c:.3g}  "
            f"(R^2 {self.r2:.4f}, max residual {self.max_rel_residual:.1%}, dof {self.dof}{bound}; {interval}{wide})"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _solve(xs: Sequence[float], ys: Sequence[float], b: float, free_c: bool) -> tuple[float, float, float]:
    """(a, c, weighted SSE) of the best fit at exponent ``b``; weights are 1/y^2."""
    u = [x**b for x in xs]
    w = [1.0 / (y * y) for y in ys]
    suu = sum(wi * ui * ui for wi, ui in zip(w, u))
    suy = sum(wi * ui * yi for wi, ui, yi in zip(w, u, ys))
    a, c = (suy / suu if suu > 0 else 0.0), 0.0
    if free_c:
        s1 = sum(w)
        su = sum(wi * ui for wi, ui in zip(w, u))
        sy = sum(wi * yi for wi, yi in zip(w, ys))
        det = suu * s1 - su * su
        if det > 1e-12 * suu * s1:  # well-conditioned: solve the 2x2 normal equations
            a_free = (suy * s1 - su * sy) / det
            c_free = (suu * sy - su * suy) / det
            if c_free >= 0:
                a, c = a_free, c_free
    sse = sum(wi * (a * ui + c - yi) ** 2 for wi, ui, yi in zip(w, u, ys))
    return a, c, sse


def fit_power_law(xs: Sequence[float], ys: Sequence[float], *, free_constant: bool = True) -> PowerLawFit:
    """Fit ``y = a * x**b + c`` (``c >= 0``) by relative least squares.

    Raises ValueError for fewer than :data:`MIN_POINTS` distinct x values, non-positive x
    (no power of them is defined for every b) or non-positive / non-finite y.
    """
    if len(xs) != len(ys):
        raise ValueError(f"xs and ys differ in length ({len(xs)} vs {len(ys)})")
    if any(not math.isfinite(x) or x <= 0 for x in xs):
        raise ValueError("every x must be a finite number > 0 for a power-law fit")
    if any(not math.isfinite(y) or y <= 0 for y in ys):
        raise ValueError("every y must be a finite number > 0 for a power-law fit")
    if len(set(xs)) < MIN_POINTS:
        raise ValueError(f"a power-law fit needs at least {MIN_POINTS} distinct x values; got {len(set(xs))}")
    xs, ys = [float(x) for x in xs], [float(y) for y in ys]

    def sse(b: float) -> float:
        return _solve(xs, ys, b, free_constant)[2]

    lo, hi = EXPONENT_RANGE
    step = (hi - lo) / (_GRID_STEPS - 1)
    grid = [lo + i * step for i in range(_GRID_STEPS)]
    best = min(range(len(grid)), key=lambda i: sse(grid[i]))
    # Golden-section search in the bracket around the best grid point.
    left, right = grid[max(best - 1, 0)], grid[min(best + 1, len(grid) - 1)]
    ratio = (math.sqrt(5) - 1) / 2
    p, q = right - ratio * (right - left), left + ratio * (right - left)
    fp, fq = sse(p), sse(q)
    for _ in range(_GOLDEN_ITERATIONS):
        if fp < fq:
            right, q, fq = q, p, fp
            p = right - ratio * (right - left)
            fp = sse(p)
        else:
            left, p, fp = p, q, fq
            q = left + ratio * (right - left)
            fq = sse(q)
    b = (left + right) / 2
    a, c, err = _solve(xs, ys, b, free_constant)
    # R^2 with the same 1/y^2 weights: 1 - SSE / total weighted variation about the weighted mean.
    w = [1.0 / (y * y) for y in ys]
    mean = sum(wi * yi for wi, yi in zip(w, ys)) / sum(w)
    total = sum(wi * (yi - mean) ** 2 for wi, yi in zip(w, ys))
    r2 = 1.0 - err / total if total > 0 else 1.0
    residual = max(abs(a * x**b + c - y) / y for x, y in zip(xs, ys))
    params = 3 if (free_constant and c > 0) else 2
    at_bound = min(b - EXPONENT_RANGE[0], EXPONENT_RANGE[1] - b) < 2 * step
    dof = len(xs) - params
    b_low = b_high = None
    if dof > 0:
        # Profile interval: the exponents whose best fit is not worse than the optimum by more
        # than an F(1, dof) test allows, SSE(b) <= SSE_min * (1 + t^2 / dof).
        t = _T975[dof - 1] if dof <= len(_T975) else 1.96
        limit = err * (1.0 + t * t / dof) + 1e-300
        inside = [g for g in grid if sse(g) <= limit] + [b]
        b_low, b_high = min(inside), max(inside)
    return PowerLawFit(
        a=a,
        b=b,
        c=c,
        n=len(xs),
        r2=r2,
        max_rel_residual=residual,
        dof=dof,
        at_bound=at_bound,
        b_low=b_low,
        b_high=b_high,
    )
