"""The dynamo harness's performance CSV: values, units, files, and PyTorch's own parsing rules.

``_dynamo_checkers_accept`` re-implements (it does not copy) how PyTorch's scripts read
this file, so a file written here is held to the same rules:

- ``benchmarks/dynamo/runner.py``: ``Parser.has_header`` (the first line contains "dev"),
  ``ParsePerformanceLogs.extract_df`` (columns dev, name, batch_size and the metric;
  ``batch_size.astype(int)``), and its ``passrate`` (speedup > 0), ``geomean`` (passing
  speedups clipped at 1), ``comp_time`` (mean of positive compilation_latency) and
  ``memory`` (mean of positive compression_ratio) summaries;
- ``benchmarks/dynamo/check_perf_csv.py``: ``check_perf_csv`` with ``_read_required_float``
  for the checked metric and ``_read_optional_float`` for the others (NaN allowed, any
  present value must be a float; a non-zero compression_ratio is inverted);
- ``benchmarks/dynamo/check_memory_compression_ratio.py``: ``main`` takes
  ``float(rows of that name)["compression_ratio"]``, so each name must occur exactly once;
- ``benchmarks/dynamo/common.py``: ``output_csv`` appends later rows to an existing file and
  pads them to the header's length, so the header must already name every column.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path

import pytest

from torchgauge.compare.dynamo_perf import BYTES_PER_GB, dynamo_performance_rows
from torchgauge.report.dynamo_csv import PERFORMANCE_HEADERS, format_performance_csv, write_performance_csv
from torchgauge.results.schema import RunRecord

_spec = importlib.util.spec_from_file_location(
    "results_factory", Path(__file__).parents[1] / "fixtures" / "results_factory.py"
)
factory = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(factory)

MIB_IN_GB = 1024 * 1024 / BYTES_PER_GB


def _run(model, mode="eval", *, warmup=None, **kw) -> RunRecord:
    doc = factory.run(model, mode, **kw)
    if warmup is not None:
        doc["metrics"]["time_ms"]["warmup_samples"] = warmup
    return RunRecord.from_dict(doc)


def _pandas_cell(text: str) -> float | str | None:
    """What pandas.read_csv makes of a cell: empty is NaN (None here), numbers are floats."""
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def _dynamo_checkers_accept(path: Path, metric: str = "speedup") -> dict[str, str]:
    """Apply the parsing rules of PyTorch's checking scripts (see the module docstring) to
    ``path``; raise AssertionError where one of them would fail. Returns runner.py's summary."""
    text = path.read_text()
    first_line = text.split("\n", 1)[0]
    assert "dev" in first_line, "runner.py Parser.has_header: no header, the file would be read as headerless"
    table = list(csv.reader(text.splitlines()))
    header, body = table[0], table[1:]
    records = []
    for line in body:
        assert len(line) == len(header), f"pandas.read_csv: row of {len(line)} fields under {len(header)} columns"
        records.append({h: _pandas_cell(v) for h, v in zip(header, line)})
    # runner.py ParsePerformanceLogs.extract_df
    for column in ("dev", "name", "batch_size"):
        assert column in header, f"extract_df selects {column!r}"
    for row in records:
        assert isinstance(row["batch_size"], float) and row["batch_size"] == int(row["batch_size"]), (
            "extract_df: batch_size.astype(int)"
        )
    # check_perf_csv.check_perf_csv: required metric, optional others
    for row in records:
        value = row.get(metric)
        assert value is not None, f"_read_required_float: missing {metric}"
        assert isinstance(value, float), f"_read_required_float: float({value!r})"
        for column in (
            "speedup",
            "abs_latency",
            "compilation_latency",
            "compression_ratio",
            "eager_peak_mem",
            "dynamo_peak_mem",
        ):
            optional = row.get(column)
            assert optional is None or isinstance(optional, float), f"_read_optional_float: float({optional!r})"
        if row.get("compression_ratio"):
            assert math.isfinite(1 / row["compression_ratio"])
    # check_memory_compression_ratio.main: float(one row per name)
    names = [row["name"] for row in records]
    assert len(names) == len(set(names)), "check_memory_compression_ratio: a name on several rows"
    # common.output_csv: later rows are padded to the header's length
    assert len(header) >= len(PERFORMANCE_HEADERS)
    # runner.py's executive summary
    speedups = [row["speedup"] for row in records]
    passing = [s for s in speedups if s > 0]
    clipped = [max(s, 1.0) for s in passing]
    comp = [row["compilation_latency"] for row in records if row["speedup"] > 0 and row["compilation_latency"] > 0]
    mem = [row["compression_ratio"] for row in records if row["speedup"] > 0 and (row["compression_ratio"] or 0) > 0]
    return {
        "passrate": f"{round(100 * len(passing) / len(speedups)) if speedups else 0}%, {len(passing)}/{len(speedups)}",
        "geomean": f"{math.exp(sum(map(math.log, clipped)) / len(clipped)):.2f}x" if clipped else "0.0x",
        "comp_time": f"{sum(comp) / len(comp):.2f}" if comp else "0.0",
        "memory": f"{sum(mem) / len(mem):.2f}x" if mem else "0.0x",
    }


def _sides():
    base = [
        _run("m1", time_ms=10.0, cpu_mb=200.0, warmup=[12.0, 11.0, 10.0]),
        _run("m2", time_ms=4.0, cpu_mb=100.0, warmup=[5.0, 4.0, 4.0]),
        _run("m3", time_ms=5.0),
        _run("m4", time_ms=5.0, status="unsupported"),
    ]
    cand = [
        _run("m1", backend="inductor", time_ms=5.0, cpu_mb=100.0, warmup=[2012.0, 6.0, 5.0]),
        _run("m2", backend="inductor", time_ms=8.0, cpu_mb=50.0, warmup=[5.0, 8.0, 8.0]),
        _run("m3", backend="inductor", status="error", error="boom"),
        _run("m4", backend="inductor", status="unsupported"),
    ]
    return base, cand


def test_rows_have_the_harness_meanings_and_units() -> None:
    base, cand = _sides()
    rows = dynamo_performance_rows(base, cand)
    assert list(rows) == ["inference"]
    m1, m2, m3 = rows["inference"]  # m4 is unsupported on both sides: no row, as the harness
    assert (m1.dev, m1.name, m1.batch_size) == ("cpu", "m1", 4)
    assert m1.speedup == pytest.approx(2.0) and m2.speedup == pytest.approx(0.5)  # eager / compiled
    assert m1.abs_latency == pytest.approx(5.0)  # compiled median, ms
    assert m1.compilation_latency == pytest.approx((2023.0 - 33.0) / 1e3)  # s: compiled warm-up - eager warm-up
    assert m1.eager_peak_mem == pytest.approx(200 * MIB_IN_GB) and m1.dynamo_peak_mem == pytest.approx(100 * MIB_IN_GB)
    assert m1.compression_ratio == pytest.approx(2.0)  # eager / compiled peak
    assert (m3.batch_size, m3.speedup, m3.abs_latency, m3.compression_ratio) == (0, 0.0, 0.0, 0.0)  # failed
    assert [r.passed for r in (m1, m2, m3)] == [True, True, False]


def test_compilation_latency_falls_back_to_compile_s_without_matching_warmups() -> None:
    base = [_run("m1", time_ms=10.0, warmup=[10.0])]
    cand = [_run("m1", backend="inductor", time_ms=5.0, compile={"compile_s": 3.5})]
    assert dynamo_performance_rows(base, cand)["inference"][0].compilation_latency == pytest.approx(3.5)


def test_eager_only_run_is_its_own_baseline() -> None:
    runs = [_run("m1", time_ms=10.0, warmup=[11.0, 10.0])]
    (row,) = dynamo_performance_rows(runs, runs)["inference"]
    assert (row.speedup, row.compilation_latency, row.compression_ratio) == (1.0, 0.0, 1.0)


def test_gpu_runs_report_the_allocator_peak() -> None:
    base = [_run("m1", time_ms=10.0, device="cuda", cpu_mb=5000.0, gpu_mb=1000.0)]
    cand = [_run("m1", backend="inductor", time_ms=5.0, device="cuda", cpu_mb=5000.0, gpu_mb=500.0)]
    (row,) = dynamo_performance_rows(base, cand)["inference"]
    assert row.dev == "cuda" and row.eager_peak_mem == pytest.approx(1000 * MIB_IN_GB) and row.compression_ratio == 2.0


def test_text_follows_output_csv() -> None:
    base, cand = _sides()
    text = format_performance_csv(dynamo_performance_rows(base, cand)["inference"])
    lines = text.split("\n")
    assert lines[0] == (
        "dev,name,batch_size,speedup,abs_latency,compilation_latency,compression_ratio,eager_peak_mem,dynamo_peak_mem"
    )
    assert lines[1].startswith("cpu,m1,4,2.000000,5.000000,1.990000,2.000000,0.209715,0.104858")
    assert lines[3] == "cpu,m3,0,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000"
    assert text.endswith("\n") and "\r" not in text


def test_written_file_passes_the_pytorch_checkers_parsing(tmp_path) -> None:
    base, cand = _sides()
    (path,) = write_performance_csv(
        tmp_path / "inductor_torchgauge_float32_inference_cpu_performance.csv", dynamo_performance_rows(base, cand)
    )
    summary = _dynamo_checkers_accept(path)
    # m1 compiles 1.990 s, m2 0.008 s; geomean clips m2's 0.5x slowdown to 1 as runner.py does
    assert summary == {"passrate": "67%, 2/3", "geomean": "1.41x", "comp_time": "1.00", "memory": "2.00x"}
    _dynamo_checkers_accept(path, metric="abs_latency")


def test_both_modes_write_one_file_each(tmp_path) -> None:
    base = [_run("m1", "train", time_ms=10.0), _run("m1", "eval", time_ms=4.0)]
    cand = [_run("m1", "train", backend="inductor", time_ms=5.0), _run("m1", "eval", backend="inductor", time_ms=2.0)]
    paths = write_performance_csv(tmp_path / "perf.csv", dynamo_performance_rows(base, cand))
    assert [p.name for p in paths] == ["perf_training.csv", "perf_inference.csv"]
    for p in paths:
        _dynamo_checkers_accept(p)


def test_a_file_with_a_name_twice_is_rejected_by_the_checker_rules(tmp_path) -> None:
    # The re-implemented rules are not vacuous: a file the memory checker would choke on fails.
    path = tmp_path / "dup.csv"
    path.write_text(",".join(PERFORMANCE_HEADERS) + "\ncpu,m1,4,1.0,1.0,0,1,0,0\ncpu,m1,4,1.0,1.0,0,1,0,0\n")
    with pytest.raises(AssertionError, match="several rows"):
        _dynamo_checkers_accept(path)
    path.write_text(",".join(PERFORMANCE_HEADERS) + "\ncpu,m1,,1.0,1.0,0,1,0,0\n")
    with pytest.raises(AssertionError, match="astype"):
        _dynamo_checkers_accept(path)
