"""Accuracy check (``--accuracy``): does a precision or backend still compute the model?

In its own pass after measuring, fresh workloads are built from the run's seed (same
weights, same inputs) and each runs one step:

1. the reference: eager, every floating tensor in float64;
2. eager in the run's precision, twice: if those two differ beyond the tolerance the model
   is nondeterministic and nothing can be judged (``eager_nondeterministic``);
3. the candidate: the run's precision and backend (skipped when the backend is eager:
   then the eager run is the candidate).

What is compared: for eval the step's outputs, for train the loss the step returned and
every parameter's gradient after the step. Outputs may be tensors or any nesting of
tuples, lists, dicts and dataclasses (HF ``ModelOutput``); non-floating leaves (ids,
labels, indices) are not compared.

A leaf passes when it meets its precision's :class:`Tolerance` (:data:`TOLERANCES`:
elementwise, relative to the tensor's scale, or by cosine similarity) or, for a non-eager
backend, when its largest error is
no more than :data:`EAGER_ERROR_MULTIPLIER` times the eager run's own error in the same
precision (the precision, not the compiler, is then what is inexact; TorchBench's
dynamo runner judges the same way). The record names the worst leaf.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # pragma: no cover
    from .results.schema import RunConfig
    from .workload import Workload

__all__ = [
    "ACCURACY_STATUSES",
    "EAGER_ERROR_MULTIPLIER",
    "TOLERANCES",
    "Tolerance",
    "check_accuracy",
    "compare_leaves",
    "flatten_outputs",
]

ACCURACY_STATUSES = ("pass", "fail_accuracy", "eager_nondeterministic")


@dataclass(frozen=True)
class Tolerance:
    """When a tensor matches its reference (any one suffices).

    Elementwise ``|a - ref| <= atol + rtol * |ref|``; or ``max |a - ref| <= rtol * max |ref|``;
    or cosine similarity of the flattened tensors ``>= cosine`` (the criterion of
    ``torch._dynamo.utils.same(cos_similarity=True)``: ill-conditioned gradients, such as
    BatchNorm over a batch of 2, differ elementwise in every precision but keep their direction).
    """

    rtol: float
    atol: float
    cosine: float = 1.0  # 1.0: the cosine criterion alone never passes an inexact tensor

    def as_dict(self) -> dict[str, float]:
        return {"rtol": self.rtol, "atol": self.atol, "cosine": self.cosine}


# Per precision, against the fp64 reference. fp32 leaves room for reordered reductions
# over a whole train step; fp16 has ~3 decimal digits, bf16 ~2.
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(rtol=1e-3, atol=1e-4, cosine=0.999),
    "tf32": Tolerance(rtol=1e-2, atol=1e-3, cosine=0.999),
    "fp16": Tolerance(rtol=1e-2, atol=1e-2, cosine=0.99),
    "bf16": Tolerance(rtol=5e-2, atol=5e-2, cosine=0.99),
    "amp": Tolerance(rtol=5e-2, atol=5e-2, cosine=0.99),
}
# Used for a precision registered later without an entry in TOLERANCES.
DEFAULT_TOLERANCE = Tolerance(rtol=5e-2, atol=5e-2, cosine=0.99)
# A compiled candidate may be this many times as far from fp64 as eager in its precision.
EAGER_ERROR_MULTIPLIER = 2.0
# Guards the relative error against all-zero references.
_TINY = 1e-12


def tolerance_for(precision: str) -> Tolerance:
    """The tolerance used for ``precision``."""
    return TOLERANCES.get(precision, DEFAULT_TOLERANCE)


# -- flattening ----------------------------------------------------------------------------------
def flatten_outputs(obj: Any, prefix: str = "out") -> list[tuple[str, torch.Tensor]]:
    """``(path, tensor)`` for every tensor or number inside ``obj``, in a stable order.

    Example:
        >>> [p for p, _ in flatten_outputs({"a": torch.ones(1), "b": (torch.ones(1), None)})]
        ['out.a', 'out.b[0]']
    """
    return list(_walk(obj, prefix, set()))


def _walk(obj: Any, path: str, seen: set[int]) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(obj, torch.Tensor):
        yield path, obj
        return
    if isinstance(obj, bool) or obj is None or isinstance(obj, (str, bytes)):
        return
    if isinstance(obj, (int, float)):
        yield path, torch.tensor(obj, dtype=torch.float64 if isinstance(obj, float) else torch.long)
        return
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, Mapping):  # dicts and HF ModelOutput (an OrderedDict of its non-None fields)
        for key, value in obj.items():
            yield from _walk(value, f"{path}.{key}", seen)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _walk(getattr(obj, f.name), f"{path}.{f.name}", seen)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _walk(value, f"{path}[{i}]", seen)


def _is_compared(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _as_f64(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.layout != torch.strided:  # sparse embedding gradients (DLRM) compare densely
        t = t.to_dense()
    if t.is_complex():
        t = torch.view_as_real(t)
    return t.to(device="cpu", dtype=torch.float64)


@dataclass(frozen=True)
class LeafError:
    """How far one leaf is from its reference."""

    path: str
    max_abs: float  # max |a - ref|; inf for NaN where ref is finite, or a shape mismatch
    max_rel: float  # max_abs / max |ref|: relative to the leaf's scale, not elementwise
    within: bool  # any criterion of the Tolerance holds
    cosine: float | None = None  # cosine similarity with the reference (None: fewer than 2 elements or a zero norm)


def compare_leaves(
    actual: list[tuple[str, torch.Tensor]], reference: list[tuple[str, torch.Tensor]], tol: Tolerance
) -> list[LeafError]:
    """Per-leaf errors of ``actual`` against ``reference`` (matched by path).

    A leaf missing from ``actual`` or of another shape gets an infinite error.
    """
    got = dict(actual)
    errors: list[LeafError] = []
    for path, ref_t in reference:
        if not _is_compared(ref_t):
            continue
        a_t = got.get(path)
        if a_t is None or tuple(a_t.shape) != tuple(ref_t.shape):
            errors.append(LeafError(path, math.inf, math.inf, False))
            continue
        ref, a = _as_f64(ref_t), _as_f64(a_t)
        if ref.numel() == 0:
            errors.append(LeafError(path, 0.0, 0.0, True))
            continue
        both_nan = torch.isnan(ref) & torch.isnan(a)
        diff = torch.where(both_nan, torch.zeros_like(ref), (a - ref).abs())
        diff = torch.nan_to_num(diff, nan=math.inf)
        bound = tol.atol + tol.rtol * ref.abs().nan_to_num(nan=0.0)
        max_abs = float(diff.max())
        scale = float(ref.abs().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).max())
        max_rel = max_abs / max(scale, _TINY)
        cosine = _cosine(a, ref)
        # Elementwise, relative to the tensor's scale (low-precision gradients carry absolute
        # noise that elementwise bounds punish on near-zero entries), or by direction.
        within = bool((diff <= bound).all()) or max_rel <= tol.rtol or (cosine is not None and cosine >= tol.cosine)
        errors.append(LeafError(path, max_abs, max_rel, within, cosine))
    return errors


def _cosine(a: torch.Tensor, ref: torch.Tensor) -> float | None:
    a, ref = a.flatten(), ref.flatten()
    if a.numel() < 2 or not (torch.isfinite(a).all() and torch.isfinite(ref).all()):
        return None
    norms = float(a.norm() * ref.norm())
    return float(a @ ref) / norms if norms > 0 else None


# -- running one step ----------------------------------------------------------------------------
def _observe(workload: Workload, seed: int) -> list[tuple[str, torch.Tensor]]:
    """One step from the seeded RNG state; eval: its outputs, train: loss and gradients."""
    from .workload import seed_everything

    seed_everything(seed)
    out = workload.step()
    if workload.mode != "train":
        return flatten_outputs(out)
    leaves = flatten_outputs(out, "loss")
    for name, p in workload.module.named_parameters():
        if p.grad is not None:  # torch.compile-wrapped networks add "_orig_mod." to the names
            leaves.append((f"grad.{name.replace('_orig_mod.', '')}", p.grad))
    return leaves


def _build(config: RunConfig, *, precision: str | None, backend: str) -> Workload:
    """A fresh workload for ``config``; ``precision=None`` means the fp64 eager reference."""
    from .configure import apply_config, build_workload
    from .precision import apply_channels_last, apply_precision, cast_workload

    workload = build_workload(config)
    if precision is None:
        apply_precision(workload, "fp32")  # TF32 off
        cast_workload(workload, torch.float64)
        if config.options.channels_last:
            apply_channels_last(workload)
        return workload
    return apply_config(workload, config.with_(precision=precision, backend=backend))


def _run(config: RunConfig, *, precision: str | None, backend: str) -> list[tuple[str, torch.Tensor]]:
    workload = _build(config, precision=precision, backend=backend)
    leaves = [(p, t.detach().clone()) for p, t in _observe(workload, config.seed)]
    del workload
    return leaves


def _summary(errors: list[LeafError]) -> tuple[float, float, str | None]:
    if not errors:
        return 0.0, 0.0, None
    worst = max(errors, key=lambda e: (e.max_rel, e.max_abs))
    return max(e.max_abs for e in errors), max(e.max_rel for e in errors), worst.path


def check_accuracy(config: RunConfig) -> dict[str, Any]:
    """Check ``config``'s precision and backend against an eager fp64 reference.

    Returns:
        The ``metrics["accuracy"]`` record: ``status`` (one of :data:`ACCURACY_STATUSES`),
        ``max_abs_err``, ``max_rel_err``, ``worst`` (path of the worst leaf), ``compared``
        (number of leaves), ``eager_max_abs_err``, ``tolerance`` and ``reason``.

    Example:
        >>> check_accuracy(RunConfig("resnet18", mode="eval", size="smoke", backend="inductor"))  # doctest: +SKIP
        {'status': 'pass', 'max_abs_err': 3.1e-06, ...}
    """
    tol = tolerance_for(config.precision)
    tolerance = {**tol.as_dict(), "eager_multiplier": EAGER_ERROR_MULTIPLIER}
    reference = _run(config, precision=None, backend="eager")
    eager = _run(config, precision=config.precision, backend="eager")
    eager_again = _run(config, precision=config.precision, backend="eager")
    record: dict[str, Any] = {
        "tolerance": tolerance,
        "reference": "eager fp64",
        "compared": sum(1 for _, t in reference if _is_compared(t)),
    }

    repeat_errors = compare_leaves(eager_again, eager, tol)
    if not all(e.within for e in repeat_errors):
        max_abs, max_rel, worst = _summary(repeat_errors)
        return {
            **record,
            "status": "eager_nondeterministic",
            "max_abs_err": max_abs,
            "max_rel_err": max_rel,
            "worst": worst,
            "eager_max_abs_err": max_abs,
            "reason": f"two eager {config.precision} runs differ (worst {worst}: {max_abs:.3g})",
        }

    eager_errors = compare_leaves(eager, reference, tol)
    if config.backend == "eager":
        cand_errors, judged = eager_errors, [e.within for e in eager_errors]
    else:
        candidate = _run_candidate(config)
        cand_errors = compare_leaves(candidate, reference, tol)
        eager_by_path = {e.path: e.max_abs for e in eager_errors}
        judged = [c.within or c.max_abs <= EAGER_ERROR_MULTIPLIER * eager_by_path.get(c.path, 0.0) for c in cand_errors]
    max_abs, max_rel, worst = _summary(cand_errors)
    passed = all(judged)
    failing = [c for c, ok in zip(cand_errors, judged) if not ok]
    reason = None
    if failing:
        bad = max(failing, key=lambda e: (e.max_rel, e.max_abs))
        reason = (
            f"{len(failing)} of {len(cand_errors)} tensors beyond tolerance; "
            f"worst {bad.path}: abs {bad.max_abs:.3g}, rel {bad.max_rel:.3g}"
        )
        worst = bad.path
    return {
        **record,
        "status": "pass" if passed else "fail_accuracy",
        "max_abs_err": max_abs,
        "max_rel_err": max_rel,
        "worst": worst,
        "eager_max_abs_err": _summary(eager_errors)[0],
        "reason": reason,
    }


def _run_candidate(config: RunConfig) -> list[tuple[str, torch.Tensor]]:
    if config.backend != "inductor":
        return _run(config, precision=config.precision, backend=config.backend)
    # Inductor generates its own random numbers; eager-compatible RNG makes dropout comparable.
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fallback_random=True):
        return _run(config, precision=config.precision, backend=config.backend)
