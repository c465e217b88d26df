"""The generated model index: in sync with the code, and listing from it imports no model."""

from __future__ import annotations

import json
import subprocess
import sys

from torchgauge.model_index import INDEX_PATH, build_index, render_index, spec_entry


def test_index_matches_the_registered_models() -> None:
    # Regenerates from the @register_model calls; a model added, removed or edited without
    # `python -m torchgauge.model_index` fails here with the first differing entry.
    fresh = build_index()
    stored = json.loads(INDEX_PATH.read_text())["models"]
    fresh_by_name = {e["name"]: json.loads(json.dumps(e)) for e in fresh}  # as JSON stores it (tuples: lists)
    stored_by_name = {e["name"]: e for e in stored}
    assert sorted(fresh_by_name) == sorted(stored_by_name), "models added or removed: regenerate the index"
    for name, entry in fresh_by_name.items():
        assert stored_by_name[name] == entry, f"{name}: index out of date; run `python -m torchgauge.model_index`"
    assert render_index(fresh) == INDEX_PATH.read_text()


def test_listing_imports_neither_torch_nor_models() -> None:
    code = (
        "import sys\n"
        "from torchgauge.registry import get_spec, list_models\n"
        "names = list_models()\n"
        "assert len(names) > 100 and get_spec('resnet50').param_count\n"
        "loaded = [m for m in sys.modules if m == 'torch' or m.startswith('torchgauge.models.')]\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_create_imports_the_builder_lazily() -> None:
    code = (
        "import sys\n"
        "from torchgauge.registry import create, get_spec\n"
        "assert get_spec('alexnet').builder is None\n"
        "w = create('alexnet', mode='eval', size='smoke')\n"
        "w.step()\n"
        "assert get_spec('alexnet').builder is not None\n"
        "print('torchgauge.models.nlp' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"  # only alexnet's domain was imported


def test_spec_entry_keeps_only_json_extras() -> None:
    from torchgauge.registry import ModelSpec

    spec = ModelSpec(
        name="m",
        builder=None,
        domain="other",
        task="t",
        source="s",
        train_batch_size=1,
        eval_batch_size=2,
        extra={"torchbench_name": "x", "obj": object()},
    )
    entry = spec_entry(spec)
    assert entry["extra"] == {"torchbench_name": "x"} and entry["eval_batch_size"] == 2


def test_an_indexed_spec_is_the_registered_one_without_its_builder() -> None:
    import dataclasses

    from torchgauge.model_index import spec_from_entry
    from torchgauge.registry import ModelSpec

    spec = ModelSpec(
        name="m",
        builder=None,
        domain="other",
        task="t",
        source="s",
        train_batch_size=16,
        eval_batch_size=16,
        cpu_batch_size=(16, 2),
        samples_per_step=(None, 1),
        modes=("eval",),
        tags=frozenset({"a"}),
        preload=("x",),
        module="torchgauge.models.other.m",
        torchbench_precision={"cuda": {"eval": "fp16"}},
        extra={"torchbench_name": "y"},
    )
    assert spec_from_entry(json.loads(json.dumps(spec_entry(spec)))) == spec
    assert spec_from_entry(spec_entry(spec)).batch_size("eval", "cpu") == 2  # the CPU default before any import
    old_entry = {k: v for k, v in spec_entry(spec).items() if k not in ("cpu_batch_size", "samples_per_step")}
    assert spec_from_entry(old_entry) == dataclasses.replace(spec, cpu_batch_size=None, samples_per_step=None)


def test_index_carries_torchbench_default_precisions() -> None:
    from torchgauge.model_index import read_index, spec_from_entry

    entries = {e["name"]: e for e in read_index()}
    assert entries["resnet50"]["torchbench_precision"] == {"cuda": {"eval": "fp16"}}
    assert entries["pytorch_unet"]["torchbench_precision"] == {"cuda": {"eval": "amp", "train": "amp"}}
    assert entries["dlrm"]["torchbench_precision"] == {}
    assert spec_from_entry(entries["resnet50"]).torchbench_default("eval", "cuda") == "fp16"
    older = {k: v for k, v in entries["resnet50"].items() if k != "torchbench_precision"}  # an index before it
    assert spec_from_entry(older).torchbench_precision == {}
