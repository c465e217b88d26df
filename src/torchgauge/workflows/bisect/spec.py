"""What a bisection re-measures at each point (:class:`MeasureSpec`), and how that becomes
run configurations and a ``torchgauge run`` command line.

:meth:`MeasureSpec.configs` and :meth:`MeasureSpec.run_args` are the only code that reads the
spec's configuration fields (device, precision, ... threads) to plan runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...config import RunConfig
from ...harness.threads import DEFAULT_INTRA_OP_THREADS
from .errors import BisectSetupError
from .metric_facts import bisect_metrics, is_deterministic

__all__ = ["BASE_FIELDS", "DEFAULT_REPEAT", "MeasureSpec"]

# Timed iterations per point: enough for the rank test to reach alpha=0.01 with margin
# (15 vs 15 samples can give p ~ 1e-8), few enough for a slow model.
DEFAULT_REPEAT = 15


def _default_base() -> RunConfig:
    return RunConfig(model="", repeat=DEFAULT_REPEAT)


# The base configuration's fields a bisection sets and its point cache keys on (the rest keep
# RunConfig's defaults: seed 0, no options, no model arguments).
BASE_FIELDS = ("device", "precision", "backend", "batch_size", "size", "repeat", "warmup")


@dataclass(frozen=True)
class MeasureSpec:
    """What is re-measured at each point: the flagged models and modes, in one base configuration."""

    models: tuple[str, ...]
    modes: tuple[str, ...] = ("train", "eval")
    # device, precision, backend, batch size, size, repeat, warmup of every run (model and mode
    # are planned; metrics follow ``metric``)
    base: RunConfig = field(default_factory=_default_base)
    model_files: tuple[str, ...] = ()  # absolute paths
    metric: str = "time"  # a bisectable quantity (metric_facts.bisect_metrics)
    # intra-op threads of every measurement (`torchgauge run --threads`; None: one per CPU).
    # One by default: two threads on two shared cores gave bimodal samples (issue 17).
    threads: int | None = DEFAULT_INTRA_OP_THREADS

    def __post_init__(self) -> None:
        if self.metric not in bisect_metrics():
            raise BisectSetupError(f"invalid metric {self.metric!r}; accepted: {', '.join(bisect_metrics())}")
        if not self.models or not self.modes:
            raise BisectSetupError("nothing to measure: give at least one model and one mode")

    @classmethod
    def of(cls, models: Sequence[str], modes: Sequence[str], **settings: Any) -> MeasureSpec:
        """A spec from flat settings: the :data:`BASE_FIELDS` go into the base configuration,
        the rest (``model_files``, ``metric``, ``threads``) are the spec's own."""
        base = {name: settings.pop(name) for name in BASE_FIELDS if name in settings}
        return cls(tuple(models), tuple(modes), RunConfig(model="", **{"repeat": DEFAULT_REPEAT, **base}), **settings)

    @property
    def deterministic(self) -> bool:
        return is_deterministic(self.metric)

    def identity(self) -> str:
        """Cache key part: the spec plus the model files' contents (an edited file re-measures)."""
        files = {p: hashlib.sha1(Path(p).read_bytes()).hexdigest() for p in self.model_files}
        doc = {
            "models": list(self.models),
            "modes": list(self.modes),
            **{name: getattr(self.base, name) for name in BASE_FIELDS},
            "metric": self.metric,
            "threads": self.threads,
        }
        return json.dumps([doc, files], sort_keys=True, default=list)

    # -- the spec as runs: configs() and run_args() plan the same runs two ways --------------
    def configs(self) -> list[RunConfig]:
        """One RunConfig per (model, mode), as ``torchgauge run`` plans them."""
        from ...config import plan

        return plan(self.models, self.base.with_(metrics=(self.metric,)), modes=self.modes)

    def run_args(self, output: str) -> list[str]:
        """``torchgauge run`` arguments measuring every config in one process."""
        mode = self.modes[0] if len(self.modes) == 1 else "both"
        base = self.base
        # --opt=value binds each value to its option and the names follow "--": no value
        # or name (say one read back from the point cache) can be parsed as an option
        args = [
            "run",
            f"--mode={mode}",
            *(f"--{name}={getattr(base, name)}" for name in BASE_FIELDS if name != "batch_size"),
            f"--metrics={self.metric}",
            "--in-process",
            "--quiet",
            f"--output={output}",
        ]
        if base.batch_size is not None:
            args.append(f"--batch-size={base.batch_size}")
        args.append(f"--threads={'all' if self.threads is None else self.threads}")
        args += [f"--model-file={path}" for path in self.model_files]
        return [*args, "--", *self.models]
