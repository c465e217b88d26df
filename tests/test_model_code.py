"""The hash of a model's code: stable across processes, changed by an edit, carried by records and stores."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap

from torchgauge.model_code import HASH_HEX_DIGITS, model_code_hash, model_sources
from torchgauge.registry import get_spec, load_model_file
from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord
from torchgauge.results.store import STORE_SCHEMA_VERSION, Store
from torchgauge.runner import RunnerOptions, run_suite

MODEL_FILE = textwrap.dedent("""
    import torch
    from torchgauge.models.common.conv_blocks import init_conv_weights
    from torchgauge.registry import register_model
    from torchgauge.workload import Workload


    @register_model(domain="other", task="test", source="test fixture", batch_size=1)
    def {name}(ctx, **kwargs):
        module = torch.nn.Linear(4, {width})
        return Workload(ctx, module, (ctx.randn(ctx.batch_size, 4),), loss_fn=lambda out, _: out.sum())
""")


def _write_model(path, name: str, width: int) -> str:
    path.write_text(MODEL_FILE.format(name=name, width=width))
    return str(path)


def test_hash_is_the_same_in_another_process() -> None:
    module = get_spec("resnet18").module
    here = model_code_hash(module)
    there = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from torchgauge.model_code import model_code_hash; print(model_code_hash({module!r}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert here == there and len(here) == HASH_HEX_DIGITS and int(here, 16) >= 0


def test_hash_covers_the_models_modules_imported_and_nothing_else() -> None:
    sources = model_sources(get_spec("resnet18").module)
    assert "" in sources and "torchgauge.models.common.conv_blocks" in sources
    assert all(name == "" or name.startswith("torchgauge.models.") for name in sources)  # not workload, registry
    assert model_code_hash("no_such_module_anywhere") is None


def test_a_worker_records_the_hash_and_an_edit_changes_it(tmp_path) -> None:
    path = _write_model(tmp_path / "edited_model.py", "code_hash_probe", width=3)
    load_model_file(path)
    module = get_spec("code_hash_probe").module
    assert "torchgauge.models.common.conv_blocks" in model_sources(module)  # a models/ import of a --model-file
    config = RunConfig("code_hash_probe", mode="eval", size="smoke", repeat=2, warmup=1, metrics=("time",))
    options = RunnerOptions(model_files=(path,), timeout_s=300)
    (before,) = run_suite([config], options)
    assert before.status == "ok", before.error
    assert before.model_code_hash == model_code_hash(module)  # computed in the worker, as here
    _write_model(tmp_path / "edited_model.py", "code_hash_probe", width=5)
    (after,) = run_suite([config], options)
    assert after.status == "ok", after.error
    assert after.model_code_hash == model_code_hash(module) != before.model_code_hash


def test_record_field_round_trips_and_old_files_read_without_it() -> None:
    record = RunRecord(RunConfig("m", mode="eval"), "ok", model_code_hash="0123456789abcdef")
    assert RunRecord.from_dict(record.to_dict()).model_code_hash == "0123456789abcdef"
    old = RunRecord(RunConfig("m", mode="eval"), "ok").to_dict()
    assert "model_code_hash" not in old  # records without a hash are written as before
    assert RunRecord.from_dict(old).model_code_hash is None


def test_store_keeps_the_hash_and_migrates_a_version_2_database(tmp_path) -> None:
    db = tmp_path / "history.sqlite"
    record = RunRecord(RunConfig("m", mode="eval"), "ok", model_code_hash="feedface00000000")
    results = ResultsFile(env={}, runs=[record])
    with Store(db) as store:
        suite = store.save(results)
        assert store.load(suite).runs[0].model_code_hash == "feedface00000000"
    conn = sqlite3.connect(db)  # as a database written before the column existed (and version 4's threads_json)
    conn.executescript(
        "ALTER TABLE runs DROP COLUMN model_code_hash; ALTER TABLE runs DROP COLUMN threads_json;"
        " UPDATE meta SET value = '2';"
    )
    conn.close()
    with Store(db, readonly=True) as store:
        assert store.load(suite).runs[0].model_code_hash is None
    with Store(db) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION
        store.save(results)
        assert [r.model_code_hash for s in (1, 2) for r in store.load(s).runs] == [None, "feedface00000000"]
