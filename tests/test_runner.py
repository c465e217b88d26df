"""Runner: planted misbehaving models become statuses while other results survive."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from torchgauge.harness.threads import DEFAULT_INTRA_OP_THREADS
from torchgauge.registry import load_model_file
from torchgauge.results.schema import RunConfig, RunRecord
from torchgauge.runner import RunnerOptions, classify_exception, execute, run_suite, worker_threads
from torchgauge.suite import run_and_save
from torchgauge.workload import UnsupportedError

PLANTED = str(Path("tests/fixtures/planted_models.py").resolve())
# Generous for a loaded 2-core CI machine, short enough to keep the test quick.
TIMEOUT_S = 20.0
MEMORY_LIMIT_MB = 1500.0


def _cfg(name: str, mode: str = "train") -> RunConfig:
    return RunConfig(name, mode=mode, size="smoke", repeat=3, warmup=1)


@pytest.fixture(scope="module")
def suite_records():
    names = [
        "planted_ok",
        "planted_raises",
        "planted_hangs",
        "planted_exits",
        "planted_allocates",
        "planted_unsupported",
        "planted_huge_alloc",
        "planted_eval_only",
        "planted_ok",
    ]
    streamed = []
    opts = RunnerOptions(timeout_s=TIMEOUT_S, memory_limit_mb=MEMORY_LIMIT_MB, model_files=(PLANTED,))
    records = run_suite([_cfg(n) for n in names], opts, on_result=streamed.append)
    return names, records, streamed


def test_every_misbehaviour_becomes_its_status(suite_records) -> None:
    names, records, _ = suite_records
    status = [r.status for r in records]
    assert status == ["ok", "error", "timeout", "error", "oom", "unsupported", "oom", "unsupported", "ok"]
    by_name = dict(zip(names, records))
    assert "planted failure in the builder" in by_name["planted_raises"].error
    assert "timed out after" in by_name["planted_hangs"].error
    assert "exited with code 3" in by_name["planted_exits"].error
    assert "memory limit" in by_name["planted_allocates"].error
    assert "needs hardware" in by_name["planted_unsupported"].error


def test_good_runs_survive_and_stream_in_order(suite_records) -> None:
    names, records, streamed = suite_records
    assert streamed == records
    for rec in (records[0], records[-1]):
        assert len(rec.metrics["time_ms"]["samples"]) == 3 and rec.domain == "other" and rec.wall_s > 0


def test_unknown_model_is_an_error_without_a_worker() -> None:
    (rec,) = run_suite([_cfg("no_such_model_xyz")], RunnerOptions(timeout_s=5))
    assert rec.status == "error" and "unknown model" in rec.error


def test_cuda_request_without_cuda_is_skipped() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    load_model_file(PLANTED)
    (rec,) = run_suite([RunConfig("planted_ok", device="cuda", size="smoke")], RunnerOptions(model_files=(PLANTED,)))
    assert rec.status == "skipped" and "no CUDA device" in rec.error


def test_in_process_execution_classifies_too() -> None:
    load_model_file(PLANTED)
    assert execute(_cfg("planted_raises")).status == "error"
    assert execute(_cfg("planted_unsupported")).status == "unsupported"
    assert execute(_cfg("planted_ok")).status == "ok"


def test_classify_exception() -> None:
    import torch

    assert classify_exception(UnsupportedError("x")) == "unsupported"
    assert classify_exception(MemoryError()) == "oom"
    assert classify_exception(torch.OutOfMemoryError("CUDA out of memory")) == "oom"
    assert classify_exception(RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory")) == "oom"
    assert classify_exception(RuntimeError("shape mismatch")) == "error"


def test_interrupt_keeps_finished_runs_on_disk(tmp_path) -> None:
    out = tmp_path / "r.json"
    seen = []

    def stop_after_first(record):
        seen.append(record)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_and_save(
            [_cfg("planted_ok"), _cfg("planted_ok", "eval")],
            RunnerOptions(model_files=(PLANTED,)),
            out,
            env={"test": True},
            on_result=stop_after_first,
        )
    doc = json.loads(out.read_text())
    assert len(doc["runs"]) == 1 and doc["runs"][0]["status"] == "ok" and doc["env"] == {"test": True}


def test_worker_killed_by_signal_is_reported(tmp_path) -> None:
    plant = tmp_path / "segv.py"
    plant.write_text(
        "import os, signal\nfrom torchgauge import register_model\n"
        "@register_model(domain='other', task='t', source='s', batch_size=1)\n"
        "def planted_segfault(ctx):\n    os.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    (rec,) = run_suite([_cfg("planted_segfault")], RunnerOptions(timeout_s=TIMEOUT_S, model_files=(str(plant),)))
    assert rec.status == "error" and signal.Signals.SIGSEGV.name in rec.error


def test_parallel_jobs_keep_statuses_and_config_order() -> None:
    names = ["planted_ok", "planted_raises", "planted_exits", "planted_eval_only", "planted_ok"]
    streamed = []
    opts = RunnerOptions(timeout_s=TIMEOUT_S, model_files=(PLANTED,), jobs=3)
    records = run_suite([_cfg(n) for n in names], opts, on_result=streamed.append)
    assert [r.config.model for r in records] == names
    assert [r.status for r in records] == ["ok", "error", "error", "unsupported", "ok"]
    assert sorted(id(r) for r in streamed) == sorted(id(r) for r in records)  # each reported once


def test_jobs_must_be_positive() -> None:
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        run_suite([_cfg("planted_ok")], RunnerOptions(jobs=0))
    with pytest.raises(ValueError, match="threads_per_worker must be >= 0"):
        run_suite([_cfg("planted_ok")], RunnerOptions(threads_per_worker=-1))


def test_parallel_workers_share_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    # Oversubscribed workers (jobs x torch's default threads > cores) spin against each other.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert worker_threads(RunnerOptions()) == DEFAULT_INTRA_OP_THREADS  # one job: stable on a shared machine
    assert worker_threads(RunnerOptions(threads_per_worker=0)) == 8  # one per CPU
    assert worker_threads(RunnerOptions(jobs=2, threads_per_worker=0)) == 4
    assert worker_threads(RunnerOptions(jobs=2)) == 4
    assert worker_threads(RunnerOptions(jobs=3)) == 2
    assert worker_threads(RunnerOptions(jobs=16)) == 1
    assert worker_threads(RunnerOptions(jobs=2, threads_per_worker=3)) == 3


def test_workers_run_with_the_chosen_thread_count() -> None:
    opts = RunnerOptions(timeout_s=TIMEOUT_S, model_files=(PLANTED,), jobs=2, threads_per_worker=1)
    records = run_suite([_cfg("planted_reports_threads"), _cfg("planted_reports_threads", mode="eval")], opts)
    assert [r.error for r in records] == ["planted: threads=1"] * 2


def test_model_preloads_are_imported_once_in_the_forkserver(tmp_path) -> None:
    # A fresh interpreter: the forkserver starts once per process, so in this pytest process
    # earlier tests have already started it without the probe's preloads.
    fixture = str(Path("tests/fixtures/planted_preload.py").resolve())
    script = (
        "from torchgauge.results.schema import RunConfig\n"
        "from torchgauge.runner import RunnerOptions, run_suite\n"
        f"opts = RunnerOptions(timeout_s=120, model_files=({fixture!r},), start_method='forkserver')\n"
        "configs = [RunConfig('planted_preload_probe', mode='eval', size='smoke')] * 2\n"
        "print([r.status + ':' + r.error for r in run_suite(configs, opts)])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    # the missing module did not take the forkserver down, and the probe was imported there
    assert "['unsupported:preloaded=True', 'unsupported:preloaded=True']" in out.stdout, out.stdout


def test_model_preloads_are_collected_from_the_selected_specs() -> None:
    from torchgauge.runner.suite_loop import _model_preloads

    load_model_file(str(Path("tests/fixtures/planted_preload.py").resolve()))
    configs = [_cfg("planted_preload_probe"), _cfg("no_such_model"), _cfg("planted_preload_probe", "eval")]
    assert _model_preloads(configs) == ["tabnanny", "torchgauge_no_such_module"]
    from torchgauge.registry import get_spec

    # a built-in model's own module, unless this process has imported it already
    spec = get_spec("lennard_jones")
    expected = [] if spec.builder is not None else [spec.module]
    assert _model_preloads([_cfg("lennard_jones")]) == expected


def test_records_carry_the_thread_settings_and_load() -> None:
    record = run_suite([_cfg("planted_ok", mode="eval")], RunnerOptions(timeout_s=TIMEOUT_S, model_files=(PLANTED,)))[0]
    assert record.ok, record.error
    threads = record.threads
    assert threads["intra_op"] == DEFAULT_INTRA_OP_THREADS and threads["env"]["OMP_NUM_THREADS"] == "1"
    assert {
        "inter_op",
        "affinity",
        "others_busy_start",
        "others_busy_timed",
        "load_avg_start",
        "load_avg_end",
        "oversubscribed",
    } <= set(threads)
    assert RunRecord.from_dict(record.to_dict()).threads == threads


def test_per_model_isolation_shares_a_worker_and_survives_its_death() -> None:
    configs = [_cfg("planted_ok", mode=m) for m in ("train", "eval")]
    configs += [_cfg("planted_exits", mode=m) for m in ("train", "eval")]
    started = []
    opts = RunnerOptions(timeout_s=TIMEOUT_S, model_files=(PLANTED,), isolation="per-model")
    records = run_suite(configs, opts, on_start=lambda c: started.append((c.model, c.mode)))
    assert [(r.config.model, r.config.mode, r.status) for r in records] == [
        ("planted_ok", "train", "ok"),
        ("planted_ok", "eval", "ok"),
        # the worker died in train; eval went on in a fresh worker (and died too)
        ("planted_exits", "train", "error"),
        ("planted_exits", "eval", "error"),
    ]
    assert "exited with code 3" in records[3].error
    assert started[:4] == [
        ("planted_ok", "train"),
        ("planted_ok", "eval"),
        ("planted_exits", "train"),
        ("planted_exits", "eval"),
    ]
    assert records[1].wall_s < records[0].wall_s + 5  # eval's clock starts when train's record arrives


def test_per_model_groups_only_eager_fp32_runs() -> None:
    from torchgauge.runner.suite_loop import _worker_groups

    configs = [
        _cfg("a"),
        _cfg("b"),
        _cfg("a", mode="eval"),
        _cfg("a", mode="eval").with_(backend="inductor"),
        _cfg("a", mode="eval").with_(precision="bf16"),
    ]
    groups = [[i for i, _ in g] for g in _worker_groups(configs, "per-model")]
    assert groups == [[0, 2], [1], [3], [4]]  # compile caches and precision flags are process-wide
    assert [[i for i, _ in g] for g in _worker_groups(configs, "per-run")] == [[0], [1], [2], [3], [4]]


def test_isolation_must_be_known() -> None:
    with pytest.raises(ValueError, match="accepted: per-run, per-model"):
        run_suite([_cfg("planted_ok")], RunnerOptions(isolation="per-host"))


def test_every_record_gets_the_domain_of_its_one_pre_check_lookup() -> None:
    load_model_file(PLANTED)
    configs = [_cfg("planted_raises"), _cfg("planted_eval_only", "train"), _cfg("no_such_model")]
    records = run_suite(configs, RunnerOptions(isolate=False, model_files=(PLANTED,)))
    assert [(r.status, r.domain) for r in records] == [("error", "other"), ("unsupported", "other"), ("error", "")]
    assert records[0].model_code_hash is not None  # a failed build still says which model code failed
