"""Registry: decorator keyed by name, duplicates raise, filters, natural sort, create()."""

from __future__ import annotations

import importlib.metadata
import textwrap

import pytest
import torch

import torchgauge
from torchgauge import registry
from torchgauge.registry import UnknownModelError, get_spec, list_models, load_model_file, register_model
from torchgauge.registry.lookup import natural_key
from torchgauge.workload import UnsupportedError

PLANTED = "tests/fixtures/planted_models.py"


@pytest.fixture(autouse=True)
def _planted():
    load_model_file(PLANTED)


def test_natural_sort() -> None:
    names = ["resnet101", "resnet18", "resnet50", "resnet152"]
    assert sorted(names, key=natural_key) == ["resnet18", "resnet50", "resnet101", "resnet152"]


def test_duplicate_name_raises() -> None:
    with pytest.raises(ValueError, match="already registered"):

        @register_model(domain="other", task="t", source="s", batch_size=1)
        def planted_ok(ctx):  # a name already registered: the point of the test
            return None


def test_invalid_domain_and_modes() -> None:
    with pytest.raises(ValueError, match="unknown domain 'cv'; accepted: vision"):
        register_model(domain="cv", task="t", source="s", batch_size=1)
    with pytest.raises(ValueError, match="invalid modes"):
        register_model(domain="other", task="t", source="s", batch_size=1, modes=("infer",))


def test_list_filters() -> None:
    # Other test files register planted_* models of their own in the same process: look only at
    # the fixture file's (planted_ok, _raises, _hangs, _exits, _allocates, _unsupported, ...).
    ours = [
        "planted_ok",
        "planted_raises",
        "planted_unsupported",
        "planted_allocates",
        "planted_exits",
        "planted_hangs",
    ]
    assert [n for n in list_models("planted_*", exclude="planted_[aeh]*") if n in ours] == [
        "planted_ok",
        "planted_raises",
        "planted_unsupported",
    ]
    assert not set(list_models("planted_*", exclude="planted_[aeh]*")) & {
        "planted_allocates",
        "planted_exits",
        "planted_hangs",
    }
    assert "planted_ok" in list_models("planted*", domain="other")
    assert "planted_ok" not in list_models("planted*", domain="vision")
    assert list_models("planted*", tags=["no-such-tag"]) == []
    user_models = list_models(module="torchgauge_user_*")  # models loaded from files, ours among them
    assert set(list_models("planted_*")) <= set(user_models) and "resnet18" not in user_models
    with pytest.raises(ValueError, match="unknown domain"):
        list_models(domain="cv")


def test_unknown_model_suggests_close_names() -> None:
    with pytest.raises(UnknownModelError, match="did you mean: planted_ok"):
        get_spec("planted_okk")


def test_create_validates_arguments() -> None:
    with pytest.raises(ValueError, match="invalid mode 'infer'; accepted: train, eval"):
        torchgauge.create("planted_ok", mode="infer")
    with pytest.raises(ValueError, match="invalid size"):
        torchgauge.create("planted_ok", size="tiny")
    with pytest.raises(ValueError, match="invalid batch size 0"):
        torchgauge.create("planted_ok", batch_size=0)
    with pytest.raises(UnsupportedError, match="does not support mode 'train'"):
        torchgauge.create("planted_eval_only", mode="train")


def test_create_train_and_eval() -> None:
    w = torchgauge.create("planted_ok", mode="train", size="smoke")
    assert w.module.training and w.optimizer is not None and w.batch_size == 2
    loss = w.step()
    assert loss.ndim == 0 and torch.isfinite(loss)
    w = torchgauge.create("planted_ok", mode="eval", batch_size=5)
    assert not w.module.training
    out = w.step()
    assert out.shape == (5, 4) and out.is_inference()


def test_inputs_are_seeded_and_deterministic() -> None:
    a = torchgauge.create("planted_ok", mode="eval", seed=3)
    b = torchgauge.create("planted_ok", mode="eval", seed=3)
    c = torchgauge.create("planted_ok", mode="eval", seed=4)
    assert torch.equal(a.inputs[0], b.inputs[0])
    assert not torch.equal(a.inputs[0], c.inputs[0])
    assert torch.equal(a.step(), b.step())


def test_model_kwargs_reach_the_builder(tmp_path) -> None:
    path = tmp_path / "widths.py"
    path.write_text(
        textwrap.dedent("""
        from torch import nn
        from torchgauge import register_model, image_classification

        @register_model(domain="other", task="t", source="s", batch_size=2)
        def kwarg_probe_model(ctx, width=4):
            net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 4 * 4, width))
            return image_classification(ctx, net, image_size=4, num_classes=width)
    """)
    )
    assert load_model_file(path) == ["kwarg_probe_model"]
    assert load_model_file(path) == ["kwarg_probe_model"]  # idempotent
    w = torchgauge.create("kwarg_probe_model", mode="eval", width=7)
    assert w.step().shape[-1] == 7


def test_load_model_file_missing(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="model file not found"):
        load_model_file(tmp_path / "nope.py")


def test_entry_point_plugins(monkeypatch) -> None:
    loaded = []

    class FakeEP:
        name = "fake_plugin"

        def load(self):
            loaded.append(True)

    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group: [FakeEP()] if group == "torchgauge.models" else []
    )
    assert registry.load_plugins() == ["fake_plugin"] and loaded == [True]


def test_spec_as_dict_is_json_ready() -> None:
    import json

    doc = get_spec("planted_ok").as_dict()
    assert json.loads(json.dumps(doc))["domain"] == "other"


def test_samples_per_step_is_what_throughput_counts() -> None:
    # a model whose eval step processes one sample whatever its batch (TorchBench's sam declares 32)
    from torchgauge.registry import entries

    @register_model(domain="other", task="t", source="s", batch_size=(8, 32), samples_per_step=(None, 1))
    def _fixed_eval_samples(ctx):
        raise AssertionError("never built")

    spec = entries.specs.pop("_fixed_eval_samples")  # read it, and leave no unbuildable model registered
    entries.names_by_module[spec.module].discard(spec.name)
    assert spec.samples_per_step == (None, 1) and spec.as_dict()["samples_per_step"] == [None, 1]
    assert (spec.step_samples("eval", 32), spec.step_samples("eval", 4)) == (1, 1)
    assert spec.step_samples("train", 8) == 8  # None: the batch
    assert get_spec("planted_ok").samples_per_step is None and get_spec("planted_ok").step_samples("eval", 3) == 3
    # TorchBench's nominal batches with what their steps process
    assert get_spec("sam").step_samples("eval", get_spec("sam").batch_size("eval")) == 1
    assert get_spec("drq").batch_size("train") == 1 and get_spec("drq").step_samples("train", 1) == 128
    assert get_spec("functorch_maml_omniglot").step_samples("train", 1) == 5
    assert get_spec("mobilenet_v2_quantized_qat").step_samples("eval", 96) == 1
