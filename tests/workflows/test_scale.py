"""Grid planning and per-slice fitting of scaling sweeps, on synthetic costs."""

from __future__ import annotations

import pytest

from torchgauge.results.schema import RunConfig, RunRecord
from torchgauge.workflows.scale import Axis, fit_curves, parse_vary, plan_sweep, point_costs


def test_parse_vary() -> None:
    assert parse_vary("embedding_dim=16, 32,64") == Axis("embedding_dim", (16, 32, 64))
    assert parse_vary("dropout=0.1,0.2").values == (0.1, 0.2)


def test_plan_sweep_splits_run_and_model_parameters() -> None:
    base = RunConfig(model="dlrm", size="smoke", model_kwargs={"num_tables": 4})
    points = plan_sweep("dlrm", [Axis("embedding_dim", (8, 16)), Axis("batch_size", (2, 4))], base)
    assert [p for p, _ in points] == [
        {"embedding_dim": 8, "batch_size": 2},
        {"embedding_dim": 8, "batch_size": 4},
        {"embedding_dim": 16, "batch_size": 2},
        {"embedding_dim": 16, "batch_size": 4},
    ]
    _, last = points[-1]
    assert last.batch_size == 4 and last.model_kwargs == {"num_tables": 4, "embedding_dim": 16} and last.size == "smoke"


def test_point_costs_derive_throughput() -> None:
    record = RunRecord(
        RunConfig(model="m"),
        "ok",
        batch_size=8,
        metrics={"time_ms": {"median": 4.0}, "cpu_peak_mb": 100.0, "flops": {"total": 1e9}},
    )
    assert point_costs(record) == {"time_ms": 4.0, "throughput": 2000.0, "cpu_peak_mb": 100.0, "flops": 1e9}
    assert point_costs(RunRecord(RunConfig(model="m"), "error")) == {}


def test_point_costs_throughput_counts_the_samples_a_step_processed() -> None:
    # sam declares TorchBench's eval batch of 32 but a step segments one image: 1 / 0.5 s
    record = RunRecord(RunConfig(model="sam", mode="eval"), "ok", batch_size=32, metrics={"time_ms": {"median": 500.0}})
    assert point_costs(record)["throughput"] == 2.0
    drq = RunRecord(RunConfig(model="drq", mode="train"), "ok", batch_size=1, metrics={"time_ms": {"median": 4.0}})
    assert point_costs(drq)["throughput"] == 32_000.0  # its update samples 128 transitions


def test_fit_curves_fits_each_slice_of_a_grid() -> None:
    # time = 0.01 * dim^2 * batch + 1 : against dim, exponent 2 at every batch size; against batch, exponent 1.
    axes = [Axis("dim", (8, 16, 32, 64)), Axis("batch", (1, 2, 4))]
    measured = [
        ({"dim": d, "batch": b}, "train", {"time_ms": 0.01 * d**2 * b + 1})
        for d in axes[0].values
        for b in axes[1].values
    ]
    curves = fit_curves(measured, axes)
    by_dim = [c for c in curves if c.parameter == "dim"]
    by_batch = [c for c in curves if c.parameter == "batch"]
    assert len(by_dim) == 3 and len(by_batch) == 4
    assert all(c.fit.b == pytest.approx(2.0, abs=1e-3) for c in by_dim)
    assert all(c.fit.b == pytest.approx(1.0, abs=1e-3) for c in by_batch)
    assert {tuple(c.fixed.items()) for c in by_dim} == {(("batch", 1),), (("batch", 2),), (("batch", 4),)}


def test_fit_curves_explains_missing_fits() -> None:
    measured = [
        ({"dim": 8}, "eval", {"time_ms": 1.0}),
        ({"dim": 16}, "eval", {"time_ms": 2.0}),
        ({"dim": 32}, "eval", {}),
    ]
    (curve,) = fit_curves(measured, [Axis("dim", (8, 16, 32))])
    assert curve.fit is None and "a fit needs 3" in curve.note
