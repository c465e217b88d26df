"""The executor interface: the local executor is the runner, names and options are checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchgauge.executors import LocalExecutor, count_runs_by_host, create_executor
from torchgauge.results.schema import RunConfig, RunRecord
from torchgauge.runner import RunnerOptions

PLANTED = str(Path(__file__).resolve().parents[1] / "fixtures" / "planted_models.py")


def test_local_executor_runs_isolated_and_streams() -> None:
    executor = create_executor("local")
    assert isinstance(executor, LocalExecutor) and executor.environment()["machine_fingerprint"]
    seen: list = []
    records = executor.run(
        [
            RunConfig("planted_raises", size="smoke"),
            RunConfig("planted_ok", mode="eval", size="smoke", repeat=2, warmup=1),
        ],
        RunnerOptions(timeout_s=120, model_files=(PLANTED,)),
        on_result=seen.append,
    )
    assert [r.status for r in records] == ["error", "ok"] and len(seen) == 2


def test_unknown_executor_and_stray_options_are_one_line() -> None:
    with pytest.raises(ValueError, match="unknown executor 'dask'; accepted: local, ray"):
        create_executor("dask")
    with pytest.raises(ValueError, match="the local executor takes no options; got address"):
        create_executor("local", address="head:6379")


def test_runs_counted_per_host() -> None:
    def rec(env):
        return RunRecord(RunConfig("m"), "ok", env=env)

    records = [
        rec(None),
        rec({"hostname": "a", "ray_node_id": "0123456789"}),
        rec({"hostname": "a", "ray_node_id": "0123456789"}),
        rec({"hostname": "b"}),
    ]
    assert count_runs_by_host(records) == {"a (node 01234567)": 2, "b": 1, "local": 1}
