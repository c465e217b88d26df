"""Inference batch-size search (the TorchBench paper, sec. 2.2) and the store of its results.

``search_batch_size`` starts at batch size 1 and doubles it until a size runs out of memory,
the maximum is reached or the time budget is spent. Every size is measured in a fresh
isolated worker (:func:`torchgauge.runner.run_suite`), so an out-of-memory error cannot
leave a fragmented allocator or a half-freed cache behind for the next size. Throughput is
batch / median step time (samples/s); the choice is
:func:`torchgauge.stats.batch_doubling.choose_batch_size`.

Results are kept per device name (CPU model or GPU name, so a result tuned on one A100
applies to any A100), size and model in a JSON file that ``torchgauge run --batch-size
auto`` reads::

    {"schema_version": 1,
     "devices": {"NVIDIA A100-SXM4-40GB": {"full": {"resnet50": {
         "batch_size": 256, "throughput": 2710.4, "default_batch_size": 64, "stop": "oom",
         "curve": [{"batch_size": 1, "status": "ok", "median_ms": 4.1, "throughput": 243.9, ...}, ...],
         "tuned_at": "...", "torch_version": "...", "repeat": 10}}}}}
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import RunConfig, plan
from ..results.schema import RunRecord
from ..runner import RunnerOptions, run_suite, worker_threads
from ..stats.batch_doubling import (
    DEFAULT_WITHIN,
    BatchChoice,
    BatchPoint,
    choose_batch_size,
    curve_doubts,
    implausible_sizes,
    next_batch_size,
    stop_reason,
)

__all__ = [
    "DEFAULT_BUDGET_S",
    "DEFAULT_MAX_BATCH",
    "STORE_ENV",
    "STORE_VERSION",
    "BatchSearch",
    "BatchSizeStore",
    "StoreError",
    "apply_tuned_batch_sizes",
    "default_store_path",
    "device_name",
    "search_batch_size",
    "tune_models",
]

# Largest size tried unless the caller says otherwise: a CPU rarely raises an out-of-memory
# error (it swaps), so the search needs a ceiling besides the budget.
DEFAULT_MAX_BATCH = 1024
# Seconds of search per model (build, warm-up and timing of every size together).
DEFAULT_BUDGET_S = 600.0
# Shortest run time limit worth starting a size with once the budget is nearly spent.
MIN_RUN_TIMEOUT_S = 5.0
STORE_VERSION = 1
# Environment variable naming the store file (overridden by --store).
STORE_ENV = "TORCHGAUGE_BATCH_STORE"


class StoreError(ValueError):
    """The batch-size store file cannot be read or is not one."""


def default_store_path() -> Path:
    """``$TORCHGAUGE_BATCH_STORE``, else ``batch_sizes.json`` in the user's data directory.

    The data directory is ``$XDG_DATA_HOME/torchgauge`` (``~/.local/share/torchgauge``) on
    Linux, ``~/Library/Application Support/torchgauge`` on macOS and
    ``%LOCALAPPDATA%\\torchgauge`` on Windows.
    """
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV]).expanduser()
    home = Path.home()
    if sys.platform == "darwin":
        base = home / "Library" / "Application Support"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA", home / "AppData" / "Local"))
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    return base / "torchgauge" / "batch_sizes.json"


def device_name(device: str) -> str:
    """Hardware name of ``device``: the CPU model for ``cpu``, the GPU name for ``cuda[:N]``.

    Raises:
        ValueError: a CUDA device is asked for but none is available.
    """
    from ..harness.env import cpu_model

    kind, _, index = device.partition(":")
    if kind == "cpu":
        return cpu_model()
    if kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but no CUDA device is available")
        return torch.cuda.get_device_name(int(index or 0))
    return kind  # mps, xpu: one kind of device per machine


@dataclass
class BatchSearch:
    """The outcome of one model's search: the curve, why it ended and the choice."""

    model: str
    device: str
    device_name: str
    size: str
    default_batch_size: int | None  # the model's registered eval batch size
    points: list[BatchPoint] = field(default_factory=list)
    stop: str = ""  # one of stats.batch_doubling.STOP_REASONS
    choice: BatchChoice | None = None
    wall_s: float = 0.0
    repeat: int = 10
    doubts: list[str] = field(default_factory=list)  # why the choice may be noise (stats.batch_doubling.curve_doubts)
    threads: int | None = None  # intra-op threads every size was measured with

    def entry(self) -> dict[str, Any]:
        """The store entry (requires a choice)."""
        import torch

        if self.choice is None:
            raise ValueError(f"{self.model}: no batch size succeeded, nothing to store")
        return {
            "batch_size": self.choice.batch_size,
            "throughput": self.choice.throughput,
            "within": self.choice.within,
            "default_batch_size": self.default_batch_size,
            "stop": self.stop,
            "curve": [p.as_dict() for p in self.points],
            "device": self.device,
            "repeat": self.repeat,
            "threads": self.threads,
            "doubts": self.doubts,
            "tuned_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "torch_version": torch.__version__,
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "device": self.device,
            "device_name": self.device_name,
            "size": self.size,
            "default_batch_size": self.default_batch_size,
            "stop": self.stop,
            "batch_size": self.choice.batch_size if self.choice else None,
            "throughput": self.choice.throughput if self.choice else None,
            "curve": [p.as_dict() for p in self.points],
            "wall_s": self.wall_s,
            "threads": self.threads,
            "doubts": self.doubts,
        }


def _error_line(text: str | None) -> str | None:
    if not text:
        return None
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else None


def _point(batch_size: int, record: RunRecord, samples: int) -> BatchPoint:
    t = record.metrics.get("time_ms") or {}
    ok = record.status == "ok" and t.get("median") is not None
    return BatchPoint(
        batch_size=batch_size,
        status=record.status if ok or record.status != "ok" else "error",
        median_ms=t.get("median") if ok else None,
        cpu_peak_mb=record.metrics.get("cpu_peak_mb"),
        gpu_peak_mb=record.metrics.get("gpu_peak_mb"),
        error=_error_line(record.error) if record.status != "ok" else (None if ok else "no time measured"),
        ci_low_ms=t.get("ci_low") if ok else None,
        ci_high_ms=t.get("ci_high") if ok else None,
        samples_per_step=None if samples == batch_size else samples,
    )


def search_batch_size(
    model: str,
    device: str = "cpu",
    *,
    max_batch: int | None = DEFAULT_MAX_BATCH,
    budget_s: float | None = DEFAULT_BUDGET_S,
    repeat: int = 10,
    warmup: int = 3,
    size: str = "full",
    within: float = DEFAULT_WITHIN,
    runner_options: RunnerOptions | None = None,
    on_point: Callable[[BatchPoint], None] | None = None,
) -> BatchSearch:
    """Search the inference batch size of ``model`` on ``device`` with the highest throughput.

    Args:
        model: a registered model name.
        device: ``cpu``, ``cuda``, ``cuda:N``, ...
        max_batch: largest size tried (it is tried even when not a power of two).
        budget_s: seconds for the whole search; a run is never given more time than what is
            left (it ends as ``timeout``, which stops the search).
        repeat, warmup: timed and untimed iterations per size.
        size: ``full`` or ``smoke``.
        within: accept a smaller size within this fraction of the best throughput.
        runner_options: worker options (timeout, memory limit, model files); None: the defaults.
        on_point: called with each measured size as soon as it is known.

    Returns:
        A :class:`BatchSearch`; ``choice`` is None when even batch size 1 failed.
    """
    from ..registry import get_spec

    runner_options = runner_options if runner_options is not None else RunnerOptions()
    spec = get_spec(model)
    # each size below is this eval config at that batch size
    (eval_config,) = plan(
        [model], modes=("eval",), device=device, size=size, repeat=repeat, warmup=warmup, metrics=("time", "memory")
    )
    search = BatchSearch(
        model=model,
        device=device,
        device_name=device_name(device),
        size=size,
        default_batch_size=spec.eval_batch_size,
        repeat=repeat,
    )
    t0 = time.monotonic()
    batch: int | None = 1
    while batch is not None:
        elapsed = time.monotonic() - t0
        opts = runner_options
        if budget_s is not None:
            left = max(budget_s - elapsed, MIN_RUN_TIMEOUT_S)
            opts = replace(runner_options, timeout_s=min(runner_options.timeout_s, left))
        record = run_suite([eval_config.with_(batch_size=batch)], opts)[0]
        point = _point(batch, record, spec.step_samples("eval", batch))
        search.points.append(point)
        if on_point:
            on_point(point)
        reason = stop_reason(point, max_batch=max_batch, elapsed_s=time.monotonic() - t0, budget_s=budget_s)
        if reason:
            search.stop = reason
            break
        batch = next_batch_size(batch, max_batch)
    # Sizes slower per step than a larger size were disturbed (load only adds time): measure
    # them once more in a fresh process and keep the faster of the two measurements.
    for size_ in implausible_sizes(search.points):
        i = next(k for k, p in enumerate(search.points) if p.batch_size == size_)
        record = run_suite([eval_config.with_(batch_size=size_)], runner_options)[0]
        again = _point(size_, record, spec.step_samples("eval", size_))
        if again.ok and again.median_ms < search.points[i].median_ms:
            search.points[i] = again
    search.choice = choose_batch_size(search.points, within)
    search.doubts = curve_doubts(search.points, search.choice)
    search.threads = worker_threads(runner_options)
    search.wall_s = round(time.monotonic() - t0, 3)
    return search


def tune_models(
    models: Iterable[str],
    device: str,
    store: BatchSizeStore | None,
    *,
    on_point: Callable[[str, BatchPoint], None] | None = None,
    **search: Any,
) -> list[BatchSearch]:
    """:func:`search_batch_size` for each model in turn (``search`` are its other keyword
    arguments; ``on_point(model, point)``); each choice goes into ``store``, saved after
    every model, so an interrupted tuning keeps what it found."""
    searches = []
    for model in models:
        report = (lambda p, m=model: on_point(m, p)) if on_point else None
        found = search_batch_size(model, device, on_point=report, **search)
        searches.append(found)
        if store is not None and found.choice is not None:
            store.put(found)
            store.save()
    return searches


class BatchSizeStore:
    """Tuned batch sizes on disk, keyed by device name, size and model.

    Example:
        >>> store = BatchSizeStore("batch_sizes.json")  # doctest: +SKIP
        >>> store.put(search); store.save()  # doctest: +SKIP
        >>> store.batch_size("resnet50", "NVIDIA A100-SXM4-40GB", "full")  # doctest: +SKIP
        256
    """

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else default_store_path()
        self.devices: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise StoreError(f"cannot read batch-size store {self.path}: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("devices"), dict):
            raise StoreError(f"{self.path} is not a batch-size store (no 'devices' object)")
        version = doc.get("schema_version")
        if version != STORE_VERSION:
            raise StoreError(f"{self.path} has store schema_version {version!r}; this torchgauge reads {STORE_VERSION}")
        for device, sizes in doc["devices"].items():
            entries = sizes.values() if isinstance(sizes, dict) else [None]
            if not all(
                isinstance(models, dict) and all(isinstance(e, dict) for e in models.values()) for models in entries
            ):
                raise StoreError(
                    f"{self.path}: the entries of device {device!r} are not objects of size -> model -> entry"
                )
        self.devices = doc["devices"]

    def get(self, model: str, device_name: str, size: str) -> dict[str, Any] | None:
        """The stored entry of ``model`` on ``device_name`` at ``size``, or None."""
        return self.devices.get(device_name, {}).get(size, {}).get(model)

    def batch_size(self, model: str, device_name: str, size: str) -> int | None:
        """The tuned batch size, or None when ``model`` was not tuned there."""
        entry = self.get(model, device_name, size)
        if entry is None:
            return None
        value = entry.get("batch_size")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StoreError(
                f"{self.path}: {model} on {device_name} ({size}) has batch_size {value!r}; accepted: an integer >= 1"
            )
        return value

    def put(self, search: BatchSearch) -> None:
        """Record ``search`` (replacing an older entry for the same key)."""
        self.devices.setdefault(search.device_name, {}).setdefault(search.size, {})[search.model] = search.entry()

    def save(self) -> Path:
        """Write atomically (temp file + rename), creating the directory."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump({"schema_version": STORE_VERSION, "devices": self.devices}, fh, indent=1)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return self.path


def apply_tuned_batch_sizes(
    configs: Iterable[RunConfig],
    store: BatchSizeStore,
    device_name: str,
) -> tuple[list[RunConfig], list[str]]:
    """Give every eval config its tuned batch size from ``store``.

    Training configs keep the model's default (the original code's batch size: in training
    it affects convergence, sec. 2.2 of the paper).

    Returns:
        (configs, names of models with an eval config but no tuned entry; they keep their default).
    """
    out: list[RunConfig] = []
    missing: list[str] = []
    for cfg in configs:
        if cfg.mode == "eval":
            tuned = store.batch_size(cfg.model, device_name, cfg.size)
            if tuned is None:
                if cfg.model not in missing:
                    missing.append(cfg.model)
            else:
                cfg = cfg.with_(batch_size=tuned)
        out.append(cfg)
    return out, missing
