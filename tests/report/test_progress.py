"""Suite progress bookkeeping: counts, ETA and summary on a fake clock."""

from __future__ import annotations

from torchgauge.report.progress import SuiteProgress, format_duration
from torchgauge.results.schema import RunConfig, RunRecord


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _record(model: str, status: str = "ok", median: float | None = 2.5, error: str | None = None) -> RunRecord:
    metrics = {"time_ms": {"median": median}} if median is not None else {}
    return RunRecord(RunConfig(model, mode="eval"), status, metrics=metrics, error=error, wall_s=1.25)


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 42.4, 60, 422, 3599.6, 4980)] == [
        "0s",
        "42s",
        "1m00s",
        "7m02s",
        "1h00m",
        "1h23m",
    ]


def test_eta_is_elapsed_per_finished_run_times_runs_left() -> None:
    clock = FakeClock()
    progress = SuiteProgress(total=4, clock=clock)
    assert progress.eta_s() is None  # nothing finished: no estimate
    clock.now += 10
    progress.add(_record("a"))
    assert progress.eta_s() == 30.0  # 10 s per run, 3 left
    clock.now += 30  # the machine got busier: 20 s per run over two runs
    progress.add(_record("b"))
    assert progress.eta_s() == 40.0


def test_count_line_and_summary() -> None:
    clock = FakeClock()
    progress = SuiteProgress(total=12, clock=clock)
    clock.now += 5
    progress.add(_record("resnet50"))
    line = progress.count_line(_record("resnet50"))
    assert line.startswith("[ 1/12] resnet50") and "2.500 ms" in line and "ok" in line and "eta 55s" in line
    progress.add(_record("broken", "error", None, "Traceback\nValueError: bad shape"))
    assert progress.count_line(_record("broken", "error", None, "Traceback\nValueError: bad shape")).endswith(
        "ValueError: bad shape"
    )
    progress.add(_record("gpu_only", "unsupported", None))
    assert progress.summary() == "3 of 12 runs in 5s: 1 ok, 1 error, 1 unsupported; 9 not run"


def test_last_line_says_done() -> None:
    progress = SuiteProgress(total=1, clock=FakeClock())
    progress.add(_record("a"))
    assert progress.count_line(_record("a")).rstrip().endswith("done")
    assert progress.summary() == "1 of 1 runs in 0s: 1 ok"
