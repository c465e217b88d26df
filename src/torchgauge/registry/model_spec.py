"""What the registry knows about a model: :class:`ModelSpec`, the accepted domains and modes, the errors."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..workload import Workload

__all__ = [
    "DOMAINS",
    "MODES",
    "SIZES",
    "TORCHBENCH_PRECISIONS",
    "AmbiguousModelError",
    "ModelFileError",
    "ModelSpec",
    "UnknownModelError",
    "check_torchbench_precision",
]

# The six domains of the TorchBench paper's Table 1.
DOMAINS = ("vision", "nlp", "recommendation", "rl", "speech", "other")
MODES = ("train", "eval")
SIZES = ("full", "smoke")
# Our names of the precisions a TorchBench default can be (its "fp16" casts module and inputs as
# our fp16 does; its "amp" is fp16 autocast on CUDA as our amp). Built-in precisions only: this
# module imports no torch, tests/test_precision.py checks they are registered.
TORCHBENCH_PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "amp")


class UnknownModelError(KeyError):
    """Raised for a model name that is not registered; the message lists close matches."""

    def __str__(self) -> str:  # KeyError quotes its message; we want plain text
        return str(self.args[0])


class AmbiguousModelError(UnknownModelError):
    """Raised for a name that matches several registered names case-insensitively (all listed)."""


class ModelFileError(ValueError):
    """A ``--model-file`` could not be loaded; the message is ``path:line: Type: message``."""


@dataclass(frozen=True)
class ModelSpec:
    """Registry record of one model: its builder plus metadata as data."""

    name: str
    # None for a model listed from the generated index whose module is not imported yet;
    # get_builder() imports it (see torchgauge.model_index).
    builder: Callable[..., Workload] | None
    domain: str  # one of DOMAINS
    task: str  # e.g. "classification", "language_modeling"
    source: str  # paper or reference implementation the architecture follows
    train_batch_size: int  # the original training code's batch size (paper, sec. 2.2)
    eval_batch_size: int  # default inference batch size (tune-batch can search a better one)
    # (train, eval) defaults on CPU where they differ (TorchBench divides several eval batches
    # on CPU, e.g. BERT_pytorch 16 -> 2); None: the same as on any other device.
    cpu_batch_size: tuple[int, int] | None = None
    # (train, eval) samples one step processes where that is fixed whatever the batch size, so
    # throughput counts what is processed: TorchBench's sam declares an eval batch of 32 but
    # segments one image (None, 1); drq declares batch 1 and its update samples 128. None in a
    # mode (or no tuple): the step processes its batch. Read through ``step_samples``.
    samples_per_step: tuple[int | None, int | None] | None = None
    modes: tuple[str, ...] = MODES  # modes the model supports
    devices: tuple[str, ...] = ("cpu", "cuda")  # device types the model supports
    tags: frozenset[str] = frozenset()  # free-form labels, e.g. "mlperf", "hf", "generation"
    param_count: int | None = None  # reference architecture's published parameter count
    unsupported_precisions: tuple[str, ...] = ()  # e.g. ("fp16",) with reasons in `notes`
    # TorchBench run.py's default precision where it is not fp32: device type -> mode -> precision,
    # e.g. {"cuda": {"eval": "fp16"}}; what ``--precision torchbench`` resolves to (config.plan).
    torchbench_precision: Mapping[str, Mapping[str, str]] = field(default_factory=dict, hash=False)
    notes: str = ""  # anything a user should know (why a mode or precision is unsupported)
    module: str = ""  # python module that registered it (the architecture family)
    # Heavy modules the builder imports lazily (e.g. transformers): a suite run that selects
    # the model imports them once in the runner's forkserver, not again in every worker.
    preload: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def batch_size(self, mode: str, device_type: str | None = None) -> int:
        """Default batch size for ``mode`` on ``device_type`` (``"cpu"``, ``"cuda"``; None: not CPU)."""
        if device_type == "cpu" and self.cpu_batch_size is not None:
            return self.cpu_batch_size[0] if mode == "train" else self.cpu_batch_size[1]
        return self.train_batch_size if mode == "train" else self.eval_batch_size

    def torchbench_default(self, mode: str, device_type: str) -> str:
        """TorchBench run.py's default precision for ``mode`` on ``device_type`` (``"cuda"``, not ``"cuda:1"``).

        Example: ``resnet50`` declares ``{"cuda": {"eval": "fp16"}}``, so ``torchbench_default("eval",
        "cuda") == "fp16"`` and every other mode and device gives ``"fp32"``.
        """
        return self.torchbench_precision.get(device_type, {}).get(mode, "fp32")

    def step_samples(self, mode: str, batch_size: int) -> int:
        """Samples one step of ``mode`` processes when run at ``batch_size``: ``samples_per_step``'s
        fixed count for the mode where it declares one, else ``batch_size`` (throughput's numerator).

        Example: ``sam`` declares ``samples_per_step=(None, 1)``, so ``step_samples("eval", 32) == 1``.
        """
        fixed = None if self.samples_per_step is None else self.samples_per_step[0 if mode == "train" else 1]
        return batch_size if fixed is None else fixed

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready metadata (no builder)."""
        return {
            "name": self.name,
            "domain": self.domain,
            "task": self.task,
            "source": self.source,
            "train_batch_size": self.train_batch_size,
            "eval_batch_size": self.eval_batch_size,
            "cpu_batch_size": list(self.cpu_batch_size) if self.cpu_batch_size else None,
            "samples_per_step": list(self.samples_per_step) if self.samples_per_step else None,
            "modes": list(self.modes),
            "devices": list(self.devices),
            "tags": sorted(self.tags),
            "param_count": self.param_count,
            "module": self.module,
            "notes": self.notes,
            "torchbench_precision": {d: dict(m) for d, m in self.torchbench_precision.items()},
        }


def check_torchbench_precision(
    declared: Mapping[str, Mapping[str, str]], modes: tuple[str, ...], devices: tuple[str, ...]
) -> dict[str, dict[str, str]]:
    """``declared`` as a plain dict without its fp32 entries (fp32 is every other default).

    Raises:
        ValueError: a device the model does not list, a mode it does not run, or a precision
            outside :data:`TORCHBENCH_PRECISIONS`.
    """
    out: dict[str, dict[str, str]] = {}
    if not isinstance(declared, Mapping):
        raise ValueError(f"torchbench_precision {declared!r}; accepted: device -> mode -> precision")
    for device, per_mode in declared.items():
        if device not in devices:
            raise ValueError(f"torchbench_precision device {device!r}; accepted: the model's {', '.join(devices)}")
        if not isinstance(per_mode, Mapping):
            raise ValueError(f"torchbench_precision[{device!r}] {per_mode!r}; accepted: mode -> precision")
        for mode, precision in per_mode.items():
            if mode not in modes:
                raise ValueError(f"torchbench_precision mode {mode!r}; accepted: the model's {', '.join(modes)}")
            if precision not in TORCHBENCH_PRECISIONS:
                raise ValueError(f"torchbench_precision {precision!r}; accepted: {', '.join(TORCHBENCH_PRECISIONS)}")
            if precision != "fp32":
                out.setdefault(device, {})[mode] = precision
    return out
