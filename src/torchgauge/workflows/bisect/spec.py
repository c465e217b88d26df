"""What a bisection re-measures at each point (:class:`MeasureSpec`), and how that becomes
run configurations and a ``torchgauge run`` command line.

:meth:`MeasureSpec.configs` and :meth:`MeasureSpec.run_args` are the only code that reads the
spec's configuration fields (device, precision, ... threads) to plan runs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ...harness.threads import DEFAULT_INTRA_OP_THREADS
from ...results.schema import RunConfig
from .errors import BisectSetupError
from .metric_facts import bisect_metrics, is_deterministic

__all__ = ["DEFAULT_REPEAT", "MeasureSpec"]

# Timed iterations per point: enough for the rank test to reach alpha=0.01 with margin
# (15 vs 15 samples can give p ~ 1e-8), few enough for a slow model.
DEFAULT_REPEAT = 15


@dataclass(frozen=True)
class MeasureSpec:
    """What is re-measured at each point: the flagged models and configuration."""

    models: tuple[str, ...]
    modes: tuple[str, ...] = ("train", "eval")
    device: str = "cpu"
    precision: str = "fp32"
    backend: str = "eager"
    batch_size: int | None = None
    size: str = "full"
    repeat: int = DEFAULT_REPEAT
    warmup: int = 3
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

    @property
    def deterministic(self) -> bool:
        return is_deterministic(self.metric)

    def identity(self) -> str:
        """Cache key part: the spec plus the model files' contents (an edited file re-measures)."""
        files = {p: hashlib.sha1(Path(p).read_bytes()).hexdigest() for p in self.model_files}
        doc = {k: v for k, v in asdict(self).items() if k != "model_files"}
        return json.dumps([doc, files], sort_keys=True, default=list)

    # -- the spec as runs: configs() and run_args() plan the same runs two ways --------------
    def configs(self) -> list[RunConfig]:
        """One RunConfig per (model, mode), as ``torchgauge run`` plans them."""
        from ...config import plan

        return plan(
            self.models,
            modes=self.modes,
            batch_size=self.batch_size,
            device=self.device,
            precision=self.precision,
            backend=self.backend,
            size=self.size,
            repeat=self.repeat,
            warmup=self.warmup,
            metrics=(self.metric,),
        )

    def run_args(self, output: str) -> list[str]:
        """``torchgauge run`` arguments measuring every config in one process."""
        mode = self.modes[0] if len(self.modes) == 1 else "both"
        # --opt=value binds each value to its option and the names follow "--": no value
        # or name (say one read back from the point cache) can be parsed as an option
        args = [
            "run",
            f"--mode={mode}",
            f"--device={self.device}",
            f"--precision={self.precision}",
            f"--backend={self.backend}",
            f"--size={self.size}",
            f"--repeat={self.repeat}",
            f"--warmup={self.warmup}",
            f"--metrics={self.metric}",
            "--in-process",
            "--quiet",
            f"--output={output}",
        ]
        if self.batch_size is not None:
            args.append(f"--batch-size={self.batch_size}")
        args.append(f"--threads={'all' if self.threads is None else self.threads}")
        args += [f"--model-file={path}" for path in self.model_files]
        return [*args, "--", *self.models]
