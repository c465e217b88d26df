"""``torchgauge tune-batch`` on planted models with a known throughput curve and OOM ceiling,
and ``run --batch-size auto`` reading what it stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import PLANTED

BATCH_MODELS = str(Path("tests/fixtures/planted_batch_models.py").resolve())
FAST = ("--size", "smoke", "--repeat", "3", "--warmup", "1", "--model-file", BATCH_MODELS)


def _tune(cli, *args):
    code, out, err = cli("tune-batch", *args, *FAST, "--json", "--quiet")
    return code, (json.loads(out) if out.strip() else None), err


def test_oom_ends_the_search_and_the_best_throughput_is_chosen(cli, tmp_path) -> None:
    store = tmp_path / "store.json"
    code, searches, err = _tune(cli, "planted_batch_oom", "planted_batch_oom_message", "--store", str(store))
    assert code == 0, err
    for s in searches:
        curve = [(p["batch_size"], p["status"]) for p in s["curve"]]
        # 1..8 fit; 16 raises an out-of-memory error (torch.OutOfMemoryError, or RuntimeError
        # "out of memory"): status oom, and nothing is tried after it
        assert curve == [(1, "ok"), (2, "ok"), (4, "ok"), (8, "ok"), (16, "oom")], s["model"]
        assert s["stop"] == "oom" and s["batch_size"] == 4
        assert "out of memory" in s["curve"][-1]["error"].lower()
        for p in s["curve"][:4]:
            assert p["throughput"] == pytest.approx(p["batch_size"] * 1000.0 / p["median_ms"])
    doc = json.loads(store.read_text())
    (device_name,) = doc["devices"]
    entry = doc["devices"][device_name]["smoke"]["planted_batch_oom"]
    assert entry["batch_size"] == 4 and entry["default_batch_size"] == 3 and entry["stop"] == "oom"
    assert [p["batch_size"] for p in entry["curve"]] == [1, 2, 4, 8, 16]

    # run --batch-size auto: eval takes the tuned size, train keeps its default, an untuned
    # model keeps its default with a warning
    out = tmp_path / "r.json"
    code, _, err = cli(
        "run",
        "planted_batch_oom",
        "planted_ok",
        "--model-file",
        BATCH_MODELS,
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--repeat",
        "1",
        "--warmup",
        "0",
        "--batch-size",
        "auto",
        "--batch-store",
        str(store),
        "--output",
        str(out),
        "--quiet",
    )
    assert code == 0, err
    used = {(r["model"], r["mode"]): r["batch_size"] for r in json.loads(out.read_text())["runs"]}
    assert used == {
        ("planted_batch_oom", "train"): 2,
        ("planted_batch_oom", "eval"): 4,
        ("planted_ok", "train"): 2,
        ("planted_ok", "eval"): 2,
    }
    assert "no tuned batch size" in err and "planted_ok" in err


def test_max_batch_budget_and_failures_end_the_search(cli, tmp_path) -> None:
    code, searches, err = _tune(cli, "planted_batch_oom", "--max-batch", "6", "--no-save")
    assert code == 0, err
    assert [p["batch_size"] for p in searches[0]["curve"]] == [1, 2, 4, 6]  # the maximum is tried last
    assert searches[0]["stop"] == "max_batch"

    code, searches, _ = _tune(cli, "planted_batch_oom", "--budget-s", "0.001", "--no-save")
    assert code == 0 and [p["batch_size"] for p in searches[0]["curve"]] == [1]
    assert searches[0]["stop"] == "budget" and searches[0]["batch_size"] == 1

    store = tmp_path / "store.json"
    code, searches, _ = _tune(cli, "planted_batch_fails", "--store", str(store))
    assert code == 0
    assert [(p["batch_size"], p["status"]) for p in searches[0]["curve"]] == [(1, "ok"), (2, "ok"), (4, "error")]
    assert searches[0]["stop"] == "failed" and "planted shape error" in searches[0]["curve"][-1]["error"]


def test_table_output_marks_the_choice(cli, tmp_path) -> None:
    code, out, err = cli(
        "tune-batch", "planted_batch_oom", *FAST, "--max-batch", "2", "--store", str(tmp_path / "s.json")
    )
    assert code == 0, err
    assert "<- chosen" in out and "stopped by max_batch" in out
    assert "batch sizes stored in" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["planted_batch_oom", "--within", "1.5"], "accepted: a fraction in [0, 1)"),
        (["planted_batch_oom", "--max-batch", "0"], "accepted: an integer >= 1"),
        (["planted_batch_oom", "--budget-s", "0"], "accepted: seconds > 0"),
        (["planted_batch_oom", "--device", "gpu"], "accepted: cpu, cuda"),
        (["no_such_model"], "no model matches 'no_such_model'"),
    ],
)
def test_bad_input_gets_one_line_error(cli, args, message) -> None:
    code, _, err = cli("tune-batch", *args, "--model-file", BATCH_MODELS)
    assert code == 2 and message in err and "Traceback" not in err


def test_bad_store_and_auto_errors(cli, tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"something": 1}')
    code, _, err = cli("tune-batch", "planted_batch_oom", *FAST, "--store", str(bad))
    assert code == 1 and "is not a batch-size store" in err
    code, _, err = cli(
        "run",
        "planted_batch_oom",
        "--model-file",
        BATCH_MODELS,
        "--batch-size",
        "auto",
        "--batch-store",
        str(bad),
        "--output",
        str(tmp_path / "r.json"),
    )
    assert code == 1 and "is not a batch-size store" in err
    code, _, err = cli(
        "run",
        "planted_batch_oom",
        "--model-file",
        BATCH_MODELS,
        "--batch-size",
        "big",
        "--output",
        str(tmp_path / "r.json"),
    )
    assert code == 2 and "accepted: an integer >= 1 or 'auto'" in err
