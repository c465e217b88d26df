"""The batch-size store and ``run --batch-size auto``'s config rewrite (no workers)."""

from __future__ import annotations

import json

import pytest

from torchgauge.results.schema import RunConfig
from torchgauge.stats.batch_doubling import BatchPoint, choose_batch_size
from torchgauge.workflows.tune_batch import (
    STORE_ENV,
    BatchSearch,
    BatchSizeStore,
    StoreError,
    apply_tuned_batch_sizes,
    default_store_path,
    device_name,
)


def _search(model: str, dev: str = "Test CPU", size: str = "full") -> BatchSearch:
    pts = [BatchPoint(1, "ok", 1.0), BatchPoint(2, "ok", 1.0), BatchPoint(4, "oom")]
    return BatchSearch(
        model=model,
        device="cpu",
        device_name=dev,
        size=size,
        default_batch_size=8,
        points=pts,
        stop="oom",
        choice=choose_batch_size(pts),
    )


def test_store_round_trip_keys_by_device_size_and_model(tmp_path) -> None:
    path = tmp_path / "d" / "store.json"
    store = BatchSizeStore(path)
    store.put(_search("m1"))
    store.put(_search("m1", dev="Other GPU"))
    store.put(_search("m2", size="smoke"))
    store.save()
    again = BatchSizeStore(path)
    assert again.batch_size("m1", "Test CPU", "full") == 2
    assert again.batch_size("m1", "Test CPU", "smoke") is None
    assert again.batch_size("m2", "Test CPU", "smoke") == 2
    entry = again.get("m1", "Other GPU", "full")
    assert entry["stop"] == "oom" and [p["status"] for p in entry["curve"]] == ["ok", "ok", "oom"]
    assert json.loads(path.read_text())["schema_version"] == 1


def test_search_without_choice_cannot_be_stored(tmp_path) -> None:
    s = BatchSearch(
        model="m",
        device="cpu",
        device_name="x",
        size="full",
        default_batch_size=1,
        points=[BatchPoint(1, "oom")],
        stop="oom",
    )
    with pytest.raises(ValueError, match="no batch size succeeded"):
        BatchSizeStore(tmp_path / "s.json").put(s)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1, 2", "cannot read batch-size store"),
        ('{"runs": []}', "is not a batch-size store"),
        ('{"schema_version": 99, "devices": {}}', "schema_version 99"),
    ],
)
def test_bad_store_files(tmp_path, text, message) -> None:
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(StoreError, match=message):
        BatchSizeStore(path)


def test_default_path_honours_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "mine.json"))
    assert default_store_path() == tmp_path / "mine.json"
    monkeypatch.delenv(STORE_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "torchgauge" / "batch_sizes.json"


def test_apply_tuned_sizes_to_eval_only(tmp_path) -> None:
    store = BatchSizeStore(tmp_path / "s.json")
    store.put(_search("m1"))
    configs = [
        RunConfig("m1", "train"),
        RunConfig("m1", "eval"),
        RunConfig("m2", "eval"),
        RunConfig("m1", "eval", size="smoke"),
    ]
    out, missing = apply_tuned_batch_sizes(configs, store, "Test CPU")
    assert [c.batch_size for c in out] == [None, 2, None, None]
    assert missing == ["m2", "m1"]  # m1 has no smoke entry


def test_device_name() -> None:
    assert device_name("cpu")
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device is available"):
            device_name("cuda:0")
