"""The Ray executor on a real three-node cluster on this machine: statuses, isolation and
pinned cores as the local runner has them, records streamed as they return, a crashed task
retried once then an error, and a node killed in the middle of a run."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from torchgauge.executors import count_runs_by_host
from torchgauge.executors.ray_cluster import ClusterNode, RayExecutor, RayOptions, choose_hardware
from torchgauge.results.schema import RunConfig, load_results
from torchgauge.runner import RunnerOptions
from torchgauge.suite import run_and_save

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MODEL_FILES = (str(FIXTURES / "planted_models.py"), str(FIXTURES / "planted_cluster_models.py"))


def _config(model: str, mode: str = "eval") -> RunConfig:
    return RunConfig(model, mode=mode, size="smoke", repeat=2, warmup=1)


def _run(cluster, configs, tmp_path, *, timeout_s: float = 60.0, memory_limit_mb: float | None = None):
    notes: list[str] = []
    streamed: list = []
    executor = RayExecutor(RayOptions(address=cluster.address), on_note=notes.append)
    try:
        results = run_and_save(
            configs,
            RunnerOptions(timeout_s=timeout_s, memory_limit_mb=memory_limit_mb, model_files=MODEL_FILES),
            tmp_path / "results.json",
            executor=executor,
            on_result=streamed.append,
        )
    finally:
        executor.close()
    return results, streamed, notes


def _worker_node_ids(cluster) -> set[str]:
    import ray

    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        return {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= 1}
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_suite_across_nodes_keeps_statuses_isolation_and_pinning(ray_cluster, tmp_path) -> None:
    configs = [
        _config("planted_hangs"),
        _config("planted_ok", "train"),
        _config("planted_ok"),
        _config("planted_raises"),
        _config("planted_unsupported"),
        _config("planted_allocates"),
        _config("planted_reports_cores"),
        _config("planted_reports_cores", "train"),
    ]
    results, streamed, _ = _run(ray_cluster, configs, tmp_path, timeout_s=15.0, memory_limit_mb=600)
    status = {(r.config.model, r.config.mode): r.status for r in results.runs}
    assert status == {
        ("planted_hangs", "eval"): "timeout",
        ("planted_ok", "train"): "ok",
        ("planted_ok", "eval"): "ok",
        ("planted_raises", "eval"): "error",
        ("planted_unsupported", "eval"): "unsupported",
        ("planted_allocates", "eval"): "oom",
        ("planted_reports_cores", "eval"): "ok",
        ("planted_reports_cores", "train"): "ok",
    }
    # Streamed as they returned, into the file in the same order; nothing kept back to the end.
    on_disk = load_results(tmp_path / "results.json")
    assert [r.to_dict() for r in on_disk.runs] == [r.to_dict() for r in streamed] and len(streamed) == len(configs)
    # Every record names the machine and node that ran it; both worker nodes took runs.
    nodes = _worker_node_ids(ray_cluster)
    for record in results.runs:
        assert record.env["machine_fingerprint"] and record.env["hostname"] and record.env["ray_node_id"] in nodes
    assert {r.env["ray_node_id"] for r in results.runs} == nodes
    assert sum(count_runs_by_host(results.runs).values()) == len(configs)
    assert on_disk.env["machine_fingerprint"] == results.runs[0].env["machine_fingerprint"]
    # One pinned core per run, one torch thread; runs that overlapped in time never shared a core.
    reports = [json.loads(p.read_text()) for p in ray_cluster.markers.glob("cores-*.json")]
    assert len(reports) == 2 and all(len(r["cores"]) == 1 and r["threads"] == 1 for r in reports)
    first, second = reports
    if first["start"] < second["end"] and second["start"] < first["end"]:
        assert first["cores"] != second["cores"]


@pytest.mark.slow
def test_crashed_task_is_retried_once_then_an_error(ray_cluster, tmp_path) -> None:
    results, _, notes = _run(ray_cluster, [_config("planted_kills_its_task"), _config("planted_ok")], tmp_path)
    by_model = {r.config.model: r for r in results.runs}  # in the order they returned
    crashed, fine = by_model["planted_kills_its_task"], by_model["planted_ok"]
    assert fine.status == "ok", fine.error
    assert crashed.status == "error" and crashed.error.startswith("lost on the Ray cluster: attempt 1: ")
    assert "; attempt 2: " in crashed.error and "WorkerCrashedError" in crashed.error
    assert len(list(ray_cluster.markers.glob("killed-*"))) == 2  # tried twice, not more
    assert any("retrying on another node" in n for n in notes)


@pytest.mark.slow
def test_cli_runs_on_the_cluster_into_postgres(ray_cluster, pg_url, tmp_path, capsys) -> None:
    from torchgauge.cli import main
    from torchgauge.results.stores import open_store

    out = tmp_path / "r.json"
    code = main(
        [
            "run",
            "planted_ok",
            "--executor",
            "ray",
            "--address",
            ray_cluster.address,
            "--model-file",
            MODEL_FILES[0],
            "--size",
            "smoke",
            "--repeat",
            "2",
            "--warmup",
            "1",
            "--output",
            str(out),
            "--db",
            pg_url,
        ]
    )
    captured = capsys.readouterr()
    said = captured.out + captured.err
    assert code == 0 and "runs per host: " in said and "stored as run 1 in postgresql://" in said
    with open_store(pg_url, create=False) as store:
        stored = store.load(store.resolve("latest"))
    assert sorted(r.config.mode for r in stored.runs) == ["eval", "train"] and all(
        r.status == "ok" for r in stored.runs
    )
    assert all(r.env["ray_node_id"] for r in stored.runs)  # each run's node, kept in the history
    assert stored.env["machine_fingerprint"] == load_results(out).env["machine_fingerprint"]


@pytest.mark.slow
def test_node_killed_mid_run_is_retried_on_another_node(ray_cluster, tmp_path) -> None:
    configs = [_config("planted_lost_once"), _config("planted_ok"), _config("planted_ok", "train")]
    outcome: dict = {}
    thread = threading.Thread(
        target=lambda: outcome.update(zip(("results", "streamed", "notes"), _run(ray_cluster, configs, tmp_path)))
    )
    thread.start()
    marker = ray_cluster.markers / "lost_once"
    deadline = time.monotonic() + 180
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline and thread.is_alive(), "the run never started"
        time.sleep(0.2)
    lost = marker.read_text()
    ray_cluster.kill_node(lost)
    thread.join(timeout=300)
    assert not thread.is_alive()
    results = outcome["results"]
    assert [r.status for r in results.runs] == ["ok", "ok", "ok"]  # nothing lost, nothing measured twice
    (retried,) = [r for r in results.runs if r.config.model == "planted_lost_once"]
    assert retried.env["ray_attempt"] == 2 and "NodeDiedError" in retried.env["ray_earlier_failure"]
    survivors = {r.env["ray_node_id"] for r in results.runs if r.env.get("ray_attempt")}
    assert len(survivors) == 1
    assert len(load_results(tmp_path / "results.json").runs) == 3
    ray_cluster.add_node(lost, cpus=1)  # leave the cluster as the fixture made it


def _node(node_id: str, fingerprint: str, cpus: float, gpus: float = 0.0) -> ClusterNode:
    return ClusterNode(node_id, f"host-{node_id}", cpus, gpus, env={"machine_fingerprint": fingerprint})


def test_one_kind_of_hardware_unless_told_to_mix() -> None:
    nodes = [_node("a", "fp1", 8), _node("b", "fp1", 8), _node("c", "fp2", 32, gpus=1)]
    chosen, note = choose_hardware(nodes, gpu=False, mix_hardware=False)
    assert [n.node_id for n in chosen] == ["c"] and "leaving out fp1 (host-a, host-b)" in note
    chosen, note = choose_hardware(nodes, gpu=True, mix_hardware=False)
    assert [n.node_id for n in chosen] == ["c"]
    chosen, note = choose_hardware(nodes[:2], gpu=False, mix_hardware=False)
    assert [n.node_id for n in chosen] == ["a", "b"] and note is None
    chosen, note = choose_hardware(nodes, gpu=False, mix_hardware=True)
    assert len(chosen) == 3 and note is None


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="cpus_per_run must be a whole number >= 1; got 0"):
        RayOptions(cpus_per_run=0)
