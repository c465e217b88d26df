"""Full-size runs that cannot fit the device become unsupported with the reason; smoke always runs."""

from __future__ import annotations

import pytest
import torch

import torchgauge
from torchgauge import capacity
from torchgauge.registry import get_spec
from torchgauge.workload import UnsupportedError


def test_memory_need_per_mode() -> None:
    assert capacity.memory_need_gib({}, "eval") is None
    assert capacity.memory_need_gib({"full_memory_gib": 6}, "train") == 6.0
    assert capacity.memory_need_gib({"full_memory_gib": (28, 15)}, "train") == 28.0
    assert capacity.memory_need_gib({"full_memory_gib": (28, 15)}, "eval") == 15.0


def test_check_memory_need_names_need_and_capacity() -> None:
    assert capacity.check_memory_need("m", "eval", None, 1.0) is None
    assert capacity.check_memory_need("m", "eval", 10.0, 10.0) is None
    reason = capacity.check_memory_need("llava", "eval", 27.0, 23.5)
    assert reason == "llava eval needs about 27 GiB at full size; this device has 23.5 GiB (run --size smoke)"


def test_cpu_capacity_is_physical_memory() -> None:
    assert capacity.device_memory_gib(torch.device("cpu")) > 0.5


def test_full_size_run_too_big_for_the_machine_is_unsupported(monkeypatch) -> None:
    # llava declares ~27 GiB for a full-size eval; pretend the machine has 8 GiB.
    monkeypatch.setattr(capacity, "device_memory_gib", lambda device: 8.0)
    assert get_spec("llava").extra["full_memory_gib"]
    with pytest.raises(UnsupportedError, match="llava eval needs about 27 GiB at full size; this device has 8.0 GiB"):
        torchgauge.create("llava", mode="eval", size="full")
    w = torchgauge.create("llava", mode="eval", size="smoke")  # smoke size runs anywhere
    assert w.step().logits.shape[-1] == w.module.config.text_config.vocab_size
