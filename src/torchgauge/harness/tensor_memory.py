"""``tensor_memory`` metric: peak bytes of live CPU tensors during one step (deterministic).

``cpu_peak_mb`` is the process's peak resident set: it includes torch's libraries and
whatever the C allocator (glibc malloc) keeps or returns, so it moves between fresh
processes (docs/regression-detection.md, "Measured run-to-run spread of peak memory").
This metric is the CPU counterpart of ``torch.cuda.max_memory_allocated``: one warm step
runs under ``torch.profiler`` with ``profile_memory=True``, whose allocator events
(``[memory]``, ``+nbytes`` on allocation, ``-nbytes`` on free, from torch's CPU allocator)
are summed in time order. The largest running sum is the peak of tensor bytes allocated
during the step above those live when it started (activations, gradients, temporaries,
new optimizer state); the final sum is what the step left allocated. The same operators
on the same shapes allocate the same sizes in the same order, so both are identical from
run to run: a regression gate with no noise to clear (``compare`` applies the threshold and
``MEMORY_MIN_DELTA_MB``). Tensors allocated outside torch's CPU allocator (a library's own
buffers) are not in it; parameters and inputs live before the step are not either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from .metrics import Quantity, register_metric
from .timer import device_sync

if TYPE_CHECKING:  # pragma: no cover
    from ..results.schema import RunConfig
    from ..workload import Workload

__all__ = ["TENSOR_MEMORY", "live_bytes_peak", "step_tensor_bytes"]

_MB = 1024.0 * 1024.0
# record_function label of the profiled steps (the second, "...1", is the measured one).
_MEASURED_STEP = "torchgauge.tensor_memory.step"
# The quantity: peak live CPU tensor bytes of a step above its start, MiB. Deterministic, so
# its run-to-run spread is 0 and only the threshold and the absolute floor judge it.
TENSOR_MEMORY = Quantity(
    "cpu_tensor_peak_mb",
    ("tensor_memory", "cpu_peak_mb"),
    "MiB",
    deterministic=True,
    rule="memory",
    title="CPU tensor peak",
)


def live_bytes_peak(events: Iterable[tuple[int, int]], since: int | None = None) -> tuple[int, int]:
    """``(peak, net)`` of the running sum of ``(time, nbytes)`` allocator events from ``since`` on.

    ``nbytes`` is positive for an allocation and negative for a free. Events before
    ``since`` (an earlier step, run so that the frees of what it allocated are known) set
    the starting level; peak and net are measured from that level, so a step that only
    frees memory has peak 0 and a negative net.

    Example:
        >>> live_bytes_peak([(3, -40), (1, 100), (2, 50)])
        (150, 110)
        >>> live_bytes_peak([(1, 100), (2, -100), (3, 100), (4, 50), (5, -150)], since=2)
        (50, -100)
    """
    ordered = sorted(events)
    start = sum(nbytes for t, nbytes in ordered if since is not None and t < since)
    live = peak = start
    for t, nbytes in ordered:
        if since is None or t >= since:
            live += nbytes
            peak = max(peak, live)
    return peak - start, live - start


def step_tensor_bytes(step: Callable[[], Any], device: Any) -> tuple[int, int]:
    """``(peak, net)`` bytes of CPU tensors of one step (:func:`live_bytes_peak`).

    Two steps run under the profiler and the second is measured: its frees of what the
    first allocated (last step's gradients, outputs) are then known to the profiler, whose
    events carry no size for blocks allocated before it started.
    """
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    sync = device_sync(torch.device(device))
    sync()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for i in range(2):
            with record_function(f"{_MEASURED_STEP}{i}"):
                out = step()
                sync()
                del out
    events = prof.profiler.kineto_results.events()
    (since,) = [e.start_ns() for e in events if e.name() == f"{_MEASURED_STEP}1"]
    allocations = [
        (e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]" and e.device_type() == DeviceType.CPU
    ]
    return live_bytes_peak(allocations, since)


@register_metric(
    "tensor_memory",
    "peak live CPU tensor bytes of one step (torch's CPU allocator; deterministic)",
    quantities=[TENSOR_MEMORY],
)
def collect_tensor_memory(workload: Workload, config: RunConfig, measured: dict[str, Any]) -> dict[str, Any]:
    """Two warm steps under the profiler's memory events; the second is measured."""
    peak, net = step_tensor_bytes(workload.step, workload.device)
    return {"tensor_memory": {"cpu_peak_mb": round(peak / _MB, 3), "cpu_net_mb": round(net / _MB, 3)}}
