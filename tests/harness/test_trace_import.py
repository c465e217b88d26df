"""Reading Chrome/Kineto traces: the real GPU traces, and synthetic ones for each format corner."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from torchgauge.harness import json_stream
from torchgauge.harness.breakdown import breakdown
from torchgauge.harness.json_stream import TraceFormatError, iter_trace_json
from torchgauge.harness.trace_import import read_trace


# -- the real traces (facts from shared/reference/gpu-traces/README.md) ----------------------------
def _kernels(trace):
    return [e for e in trace.events if e.category == "kernel"]


def test_rocm_trace_has_its_steps_stream_kernels_and_copies(gpu_traces) -> None:
    t = read_trace(gpu_traces / "rocm-mi250-toy-train.json.gz")
    assert t.platform == "rocm" and t.has_step_annotations and list(t.traces) == ["cuda:2"]
    tr = t.traces["cuda:2"]
    assert len(tr.steps) == 2 and len(_kernels(tr)) == 14
    copies = [e for e in tr.events if e.category == "memcpy"]
    assert len(copies) == 2 and {e.direction for e in copies} == {"h2d"}
    assert {e.thread for e in tr.events if e.on_device} == {0}
    assert any(e.start_us != int(e.start_us) for e in _kernels(tr))  # sub-microsecond times kept
    assert t.skipped["category gpu_user_annotation"] == 2


def test_alexnet_trace_without_steps_is_one_window_over_two_streams(gpu_traces) -> None:
    t = read_trace(gpu_traces / "cuda-a100-alexnet.json.gz")
    assert t.platform == "cuda" and not t.has_step_annotations and t.rank == 0
    tr = t.traces["cuda:0"]
    assert len(tr.steps) == 1 and len(_kernels(tr)) == 79
    assert {e.thread for e in _kernels(tr)} == {7, 20}
    device = [e for e in tr.events if e.device != "cpu"]
    assert tr.steps[0] == (min(e.start_us for e in device), max(e.end_us for e in device))
    syncs = [e for e in device if e.category == "sync"]
    assert len(syncs) == 41 and not any(e.on_device for e in syncs)  # device sync records are not work
    assert t.skipped["flow"] == 500 and t.skipped["metadata"] == 38


def test_training_trace_assigns_device_work_to_the_launching_step(gpu_traces) -> None:
    t = read_trace(gpu_traces / "cuda-a100-training-rank3.json.gz")
    assert t.rank == 3 and list(t.traces) == ["cuda:3"]
    tr = t.traces["cuda:3"]
    assert len(tr.steps) == 6 and len(_kernels(tr)) == 8568
    assert {e.thread for e in tr.events if e.on_device} == {7, 20, 21, 22}
    launched = [e for e in _kernels(tr) if e.parent is not None]
    assert len(launched) == len(_kernels(tr))  # every kernel links to its runtime launch
    assert all(tr.events[e.parent].step == e.step for e in launched)
    per_step = [sum(1 for e in _kernels(tr) if e.step == i) for i in range(6)]
    assert per_step == [1428] * 6


def test_counters_only_trace_has_no_device_activity_and_gives_a_cpu_trace(gpu_traces) -> None:
    t = read_trace(gpu_traces / "cuda-a100-counters-only.json.gz")
    assert t.platform == "cpu" and list(t.traces) == ["cpu"]
    assert t.skipped["category cuda_profiler_range"] == 77
    b = breakdown(t.traces["cpu"])
    assert b["kind"] == "cpu" and sum(b["fractions"].values()) == pytest.approx(1.0)


def test_triton_launch_is_a_host_op_and_its_kernel_is_the_only_device_work(gpu_traces) -> None:
    t = read_trace(gpu_traces / "cuda-a100-triton.json.gz")
    tr = t.traces["cuda:0"]
    (k,) = [e for e in tr.events if e.on_device]
    assert k.name == "triton_poi_fused_add_cos_sin_0" and k.duration_us == pytest.approx(1.76)
    assert any(e.category == "cpu_op" and e.name == k.name for e in tr.events)  # the launch op stays on the host
    assert tr.events[k.parent].name == "cuLaunchKernel"


def test_every_real_trace_is_read_with_a_bounded_breakdown(gpu_traces) -> None:
    for path in sorted(gpu_traces.glob("*.json.gz")):
        for tr in read_trace(path).traces.values():
            b = breakdown(tr)
            assert sum(b["fractions"].values()) == pytest.approx(1.0), path.name
            assert all(0.0 <= v <= 1.0 + 1e-9 for v in b["fractions"].values()), path.name


# -- synthetic traces ----------------------------------------------------------------------------------
def _small(kineto) -> list[dict]:
    ev = [kineto.step(0, 0, 100), kineto.step(1, 100, 100)]
    ev += kineto.launched("k0", 10, 12, 30, corr=1)
    ev += kineto.launched("k1", 90, 95, 40, corr=2)  # launched in step 0, runs into step 1
    ev += kineto.launched("k2", 110, 140, 20, corr=3, stream=20)
    return ev


def test_plain_and_gzipped_files_read_the_same(kineto, tmp_path) -> None:
    plain = read_trace(kineto.write_trace(tmp_path / "t.json", _small(kineto)))
    zipped = read_trace(kineto.write_trace(tmp_path / "t.json.gz", _small(kineto), gz=True))
    assert plain.traces["cuda:0"].events == zipped.traces["cuda:0"].events
    k1 = next(e for e in plain.traces["cuda:0"].events if e.name == "k1")
    assert k1.step == 0  # its launch was in step 0, though it ran into step 1


def test_bare_event_array_and_trailing_comma_are_accepted(kineto, tmp_path) -> None:
    path = tmp_path / "bare.json"
    path.write_text("[" + ",".join(json.dumps(e) for e in _small(kineto)) + ",]")
    assert len(_kernels(read_trace(path).traces["cuda:0"])) == 3


def test_missing_fields_and_unknown_categories_are_skipped_and_counted(kineto, tmp_path) -> None:
    ev = _small(kineto) + [
        {"ph": "X", "cat": "kernel", "name": "no_ts", "dur": 3, "args": {"device": 0}},
        {"ph": "X", "cat": "kernel", "ts": 5, "dur": 3},  # no name
        {"ph": "X", "cat": "mystery_cat", "name": "x", "ts": 5, "dur": 3},
        {"ph": "X", "name": "no_cat", "ts": 5, "dur": 3},
        {"ph": "X", "cat": "kernel", "name": "nodev", "pid": "GPU", "ts": 5, "dur": 3, "args": {}},
        {"ph": "B", "cat": "cpu_op", "name": "begin", "ts": 1},
        {"ph": "C", "name": "counter", "ts": 1, "args": {"v": 1}},
        "not an object",
    ]
    t = read_trace(kineto.write_trace(tmp_path / "t.json", ev))
    assert t.skipped == {
        "missing or invalid name/ts/dur": 2,
        "unknown category mystery_cat": 1,
        "unknown category (none)": 1,
        "device event without a device index": 1,
        "begin/end pair (unsupported)": 1,
        "counter": 1,
        "not an object": 1,
    }
    assert len(_kernels(t.traces["cuda:0"])) == 3
    assert t.events_read == len(ev)


def test_float_timestamps_keep_their_fractions(kineto, tmp_path) -> None:
    ev = [kineto.step(0, 1000.25, 100.5)] + kineto.launched("k", 1010.125, 1020.375, 2.5, corr=1)
    tr = read_trace(kineto.write_trace(tmp_path / "t.json", ev)).traces["cuda:0"]
    (k,) = _kernels(tr)
    assert (k.start_us % 1, k.duration_us) == (0.375, 2.5)
    assert tr.steps == [(0.25, 100.75)]


def test_several_devices_give_one_trace_each_sharing_the_host_steps(kineto, tmp_path) -> None:
    ev = (
        [kineto.step(0, 0, 100)]
        + kineto.launched("a", 1, 5, 10, corr=1)
        + kineto.launched("b", 2, 6, 20, corr=2, device=1)
    )
    t = read_trace(kineto.write_trace(tmp_path / "t.json", ev))
    assert list(t.traces) == ["cuda:0", "cuda:1"]
    for dev, name in (("cuda:0", "a"), ("cuda:1", "b")):
        tr = t.traces[dev]
        assert [e.name for e in tr.events if e.on_device] == [name] and tr.steps == [(0, 100)]
        assert tr.events[next(e for e in tr.events if e.on_device).parent].category == "runtime"


def test_torchgauge_step_annotations_are_steps(kineto, tmp_path) -> None:
    ev = [
        kineto.host_op("torchgauge.step#0", 0, 50, cat="user_annotation"),
        kineto.host_op("torchgauge.step#1", 50, 50, cat="user_annotation"),
        kineto.host_op("aten::mm", 60, 10),
    ]
    t = read_trace(kineto.write_trace(tmp_path / "t.json", ev))
    assert t.platform == "cpu" and t.traces["cpu"].steps == [(0, 50), (50, 100)]


def test_cut_short_or_foreign_files_raise_one_clear_error(kineto, tmp_path) -> None:
    text = json.dumps({"traceEvents": _small(kineto)})
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(TraceFormatError, match="cut short"):
        read_trace(cut)
    other = tmp_path / "other.json"
    other.write_text('"just a string"')
    with pytest.raises(TraceFormatError, match="accepted: Chrome trace JSON"):
        read_trace(other)
    empty = tmp_path / "empty.json.gz"
    with gzip.open(empty, "wt") as fh:
        fh.write('{"traceEvents": []}')
    with pytest.raises(TraceFormatError, match="no profiler events"):
        read_trace(empty)


def test_stream_reader_matches_json_load_across_any_chunk_boundary(kineto, monkeypatch) -> None:
    doc = {
        "deviceProperties": [{"id": 0, "name": "A100"}],
        "traceEvents": _small(kineto),
        "baseTimeNanoseconds": 1727743122000000000,
        "displayTimeUnit": "ms",
    }
    text = json.dumps(doc, indent=1)
    for chunk in (1, 2, 7, 64):
        monkeypatch.setattr(json_stream, "CHUNK_CHARS", chunk)
        meta = {}
        events = list(iter_trace_json(io.StringIO(text), meta.__setitem__))
        assert events == doc["traceEvents"]
        assert meta == {k: v for k, v in doc.items() if k != "traceEvents"}
