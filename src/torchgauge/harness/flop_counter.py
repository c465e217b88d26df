"""FLOP counting for the ``flops`` metric (:mod:`torchgauge.harness.flops`): a
``FlopCounterMode`` that splits each counted operator into forward and backward.

Forward and backward are separated per operator while the step runs: an operator counted
while the autograd engine is executing a backward node
(``torch._C._current_autograd_node()`` is not None) is backward, every other one forward.
That is exact for one step, needs no second pass, and puts activation-checkpoint
recomputation where it runs (backward).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["FlopCount", "count_flops", "device_name"]


def _packet_name(packet: Any) -> str:
    """``aten.mm`` (an OpOverloadPacket) -> ``aten::mm``, the name op_counts uses too."""
    namespace, _, base = str(packet).partition(".")
    return f"{namespace}::{base}" if base else str(packet)


class FlopCount(FlopCounterMode):
    """A ``FlopCounterMode`` that also splits each counted operator into forward/backward.

    Attributes (after the ``with`` block):
        forward: FLOPs counted outside backward.
        backward: FLOPs counted while the autograd engine ran a backward node.
        by_op: ``{"aten::mm": flops}`` over the whole block.
    """

    def __init__(self) -> None:
        super().__init__(display=False)
        self.forward = 0
        self.backward = 0

    def __enter__(self) -> FlopCount:
        self.forward = self.backward = 0
        super().__enter__()
        return self

    def _count_flops(self, func_packet, out, args, kwargs):
        # Same arithmetic as the parent (its registry), read before and after to split it.
        before = self.flop_counts["Global"].get(func_packet, 0)
        result = super()._count_flops(func_packet, out, args, kwargs)
        added = self.flop_counts["Global"].get(func_packet, 0) - before
        if added:
            if torch._C._current_autograd_node() is not None:
                self.backward += added
            else:
                self.forward += added
        return result

    @property
    def total(self) -> int:
        return self.get_total_flops()

    @property
    def by_op(self) -> dict[str, int]:
        counts = self.get_flop_counts().get("Global", {})
        return {_packet_name(p): int(v) for p, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v}


def count_flops(fn: Callable[[], Any]) -> FlopCount:
    """Run ``fn`` once under :class:`FlopCount` and return the counter.

    Example:
        >>> lin, x = torch.nn.Linear(8, 4), torch.randn(3, 8)
        >>> count_flops(lambda: lin(x)).total  # 2 * B * I * O
        192
    """
    counter = FlopCount()
    with counter:
        fn()
    return counter


def device_name(device: torch.device) -> str:
    """Marketing name of ``device`` for the peak table ("cpu" for CPUs)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type
