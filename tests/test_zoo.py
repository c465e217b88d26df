"""Zoo adapters: timm:NAME, torchvision:NAME and hf:MODEL_TYPE through the same harness (issue 23).

timm and torchvision have no build for the CPU torch 2.13.0 these tests run with, so their
adapter logic is tested against minimal stand-in packages placed in ``sys.modules``, and the
real-package tests skip with that reason where the package does not import. transformers is
installed, so ``hf:`` is tested for real, isolated in a worker too.
"""

from __future__ import annotations

import collections
import importlib
import sys
import types

import pytest
import torch
from torch import nn

import torchgauge
from torchgauge.registry import UnknownModelError, get_spec
from torchgauge.results.schema import RunConfig
from torchgauge.runner import execute
from torchgauge.suite import SelectionError, select_models

AuxOutputs = collections.namedtuple("AuxOutputs", ["logits", "aux_logits"])


class _TinyClassifier(nn.Module):
    def __init__(self, num_classes: int = 10, aux: bool = False) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(4, num_classes)
        self.num_classes, self.aux = num_classes, aux
        self.pretrained_cfg = {"input_size": (3, 32, 32)}
        self.seen_shapes: list[tuple[int, ...]] = []

    def forward(self, x: torch.Tensor):
        self.seen_shapes.append(tuple(x.shape))
        logits = self.head(self.features(x))
        return AuxOutputs(logits, logits.detach() * 0) if self.aux and self.training else logits


def _fake_timm() -> types.ModuleType:
    timm = types.ModuleType("timm")
    timm.__version__ = "0.0-fake"
    names = ["tiny_net", "tiny_net_wide"]
    timm.is_model = lambda name: name in names
    timm.list_models = lambda pattern="*": [n for n in names if __import__("fnmatch").fnmatch(n, pattern)]
    timm.create_model = lambda name, pretrained=False, **kw: _TinyClassifier(**kw)
    return timm


def _fake_torchvision() -> types.ModuleType:
    tv = types.ModuleType("torchvision")
    tv.__version__ = "0.0-fake"
    models = types.ModuleType("torchvision.models")
    classifiers, detectors = ["tiny_inception"], ["tiny_rcnn"]
    models.list_models = lambda module=None: classifiers if module is models else classifiers + detectors
    # torchvision classifiers default to the 1000 ImageNet classes
    models.get_model = lambda name, weights=None, num_classes=1000: _TinyClassifier(num_classes, aux=True)
    tv.models = models
    return tv


@pytest.fixture
def isolated_registry(monkeypatch):
    """Zoo specs registered by a test vanish with it (the registry's tables are restored)."""
    from torchgauge.registry import entries

    entries.load_builtin_index()
    saved = dict(entries.specs), {module: set(names) for module, names in entries.names_by_module.items()}
    yield
    for table, copy in zip((entries.specs, entries.names_by_module), saved):
        table.clear()
        table.update(copy)


def test_fake_timm_model_runs_through_the_harness(monkeypatch, isolated_registry) -> None:
    monkeypatch.setitem(sys.modules, "timm", _fake_timm())
    spec = get_spec("timm:tiny_net")
    assert (spec.domain, spec.task, spec.tags) == ("vision", "classification", frozenset({"zoo", "timm"}))
    for mode in ("train", "eval"):
        record = execute(RunConfig("timm:tiny_net", mode=mode, size="smoke", repeat=2, warmup=1))
        assert record.status == "ok", record.error
        assert record.batch_size == 2 and len(record.metrics["time_ms"]["samples"]) == 2
    workload = torchgauge.create("timm:tiny_net", mode="eval", size="smoke")
    workload.step()
    assert workload.module.seen_shapes == [(2, 3, 32, 32)]  # the model's pretrained_cfg input size


def test_fake_timm_unknown_name_lists_what_it_has(monkeypatch, isolated_registry) -> None:
    monkeypatch.setitem(sys.modules, "timm", _fake_timm())
    with pytest.raises(UnknownModelError, match="timm has no model 'tiny'; timm has: tiny_net, tiny_net_wide"):
        get_spec("timm:tiny")


def test_fake_torchvision_classifier_trains_on_main_logits(monkeypatch, isolated_registry) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", _fake_torchvision())
    record = execute(RunConfig("torchvision:tiny_inception", mode="train", size="smoke", repeat=2, warmup=1))
    assert record.status == "ok", record.error
    with pytest.raises(UnknownModelError, match="'tiny_rcnn' is not a classification model"):
        get_spec("torchvision:tiny_rcnn")
    with pytest.raises(UnknownModelError, match="'nope' does not exist"):
        get_spec("torchvision:nope")


def test_missing_or_broken_package_is_a_clear_message(monkeypatch, isolated_registry) -> None:
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ModuleNotFoundError
    with pytest.raises(UnknownModelError, match=r"timm:resnet50 needs the timm package, which is not installed"):
        get_spec("timm:resnet50")
    with pytest.raises(SelectionError, match="needs the timm package"):
        select_models(["timm:resnet50"])
    zoo = importlib.import_module("torchgauge.zoo")

    def broken(name: str):
        raise RuntimeError("operator torchvision::nms does not exist")

    monkeypatch.setattr(zoo.importlib, "import_module", broken)
    with pytest.raises(
        UnknownModelError,
        match=r"torchvision is installed but does not import with this torch "
        r"\(RuntimeError: operator torchvision::nms does not exist\)",
    ):
        zoo.import_zoo_package("torchvision", "torchvision:resnet50")


def test_unknown_zoo_and_empty_name(isolated_registry) -> None:
    with pytest.raises(
        UnknownModelError, match="unknown model zoo 'tf'.*accepted: timm:NAME, torchvision:NAME, hf:MODEL_TYPE"
    ):
        get_spec("tf:resnet50")
    with pytest.raises(UnknownModelError, match="'hf:' names no model; accepted: hf:MODEL_TYPE"):
        get_spec("hf:")


def _importable(package: str) -> bool:
    try:
        importlib.import_module(package)
        return True
    except Exception:
        return False


@pytest.mark.skipif(
    not _importable("timm"),
    reason="timm is not installed or does not import with this torch (no timm build for CPU torch 2.13.0)",
)
def test_real_timm_resnet(isolated_registry) -> None:
    record = execute(RunConfig("timm:resnet18", mode="eval", size="smoke", batch_size=1, repeat=1, warmup=1))
    assert record.status == "ok", record.error


@pytest.mark.skipif(
    not _importable("torchvision"),
    reason="torchvision is not installed or does not import with this torch (no build for CPU torch 2.13.0)",
)
def test_real_torchvision_resnet(isolated_registry) -> None:
    record = execute(RunConfig("torchvision:resnet18", mode="eval", size="smoke", batch_size=1, repeat=1, warmup=1))
    assert record.status == "ok", record.error


def test_real_hf_models_from_default_configs(isolated_registry) -> None:
    pytest.importorskip("transformers")
    assert "MaskedLM" in get_spec("hf:bert").source and "Seq2SeqLM" in get_spec("hf:t5").source
    for name, mode in (("hf:bert", "train"), ("hf:bert", "eval"), ("hf:t5", "train")):
        record = execute(RunConfig(name, mode=mode, size="smoke", repeat=1, warmup=1))
        assert record.status == "ok", f"{name} {mode}: {record.error}"
    with pytest.raises(UnknownModelError, match="hf:vit has no language-model head"):
        get_spec("hf:vit")
    with pytest.raises(UnknownModelError, match="no model type 'bertt'; did you mean: bert"):
        get_spec("hf:bertt")


def test_real_hf_model_in_an_isolated_worker() -> None:
    pytest.importorskip("transformers")
    results = torchgauge.run("hf:gpt2", mode="eval", size="smoke", repeat=1, warmup=1)  # the worker registers it again
    assert [(r.config.model, r.status) for r in results] == [("hf:gpt2", "ok")], results[0].error


def test_zoo_names_obey_the_selection_filters(monkeypatch, isolated_registry) -> None:
    monkeypatch.setitem(sys.modules, "timm", _fake_timm())
    assert select_models(["timm:tiny_net", "resnet18"]) == ["resnet18", "timm:tiny_net"]  # zoo models last
    assert select_models(["timm:tiny_net"], tags=["timm"]) == ["timm:tiny_net"]
    with pytest.raises(SelectionError, match="no model matches 'timm:tiny_net'"):
        select_models(["timm:tiny_net"], domain=["nlp"])
