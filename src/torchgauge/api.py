"""The notebook and script API: run models, load results, compare two result sets.

Everything the CLI does is reachable through :mod:`torchgauge.suite`,
:mod:`torchgauge.runner` and :mod:`torchgauge.compare`; this module is the short path::

    import torchgauge
    results = torchgauge.run(["resnet18", "hf_bert"], mode="eval", size="smoke")
    df = results.to_pandas()                       # one row per run (pandas optional)
    eager = torchgauge.load("torchgauge-results/run-20261125-101500.json")
    latest = torchgauge.load("~/.local/share/torchgauge/history.db")   # the newest stored run
    torchgauge.compare(eager, results)             # backends differ: speedups; else regressions
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .results.schema import ResultsFile, RunRecord

if TYPE_CHECKING:  # pragma: no cover
    from .config import RunOptions

__all__ = ["PANDAS_MISSING", "Results", "compare", "load", "run"]

PANDAS_MISSING = "Results.to_pandas() needs pandas, which is not installed: pip install pandas"
_SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass
class Results:
    """Run records plus the environment they ran in; iterable, indexable, ``len()``-able."""

    file: ResultsFile  # the records and environment as the results JSON holds them
    source: str = ""  # where they came from: a path, "db:<path>#<run id>", or "run"

    @property
    def records(self) -> list[RunRecord]:
        return self.file.runs

    @property
    def env(self) -> dict[str, Any]:
        return self.file.env

    def __iter__(self) -> Iterator[RunRecord]:
        return iter(self.file.runs)

    def __len__(self) -> int:
        return len(self.file.runs)

    def __getitem__(self, index: int) -> RunRecord:
        return self.file.runs[index]

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per run: configuration, status, median and IQR (ms), noisy, peaks (MiB), compile s."""
        out = []
        for r in self.file.runs:
            t = r.metrics.get("time_ms") or {}
            compile_info = r.metrics.get("compile") if isinstance(r.metrics.get("compile"), dict) else {}
            c = r.config
            out.append(
                {
                    "model": c.model,
                    "mode": c.mode,
                    "device": c.device,
                    "precision": c.precision,
                    "backend": c.backend,
                    "batch_size": r.batch_size,
                    "size": c.size,
                    "status": r.status,
                    "median_ms": t.get("median"),
                    "iqr_ms": t.get("iqr"),
                    "noisy": t.get("noisy"),
                    "cpu_peak_mb": r.metrics.get("cpu_peak_mb"),
                    "gpu_peak_mb": r.metrics.get("gpu_peak_mb"),
                    "compile_s": compile_info.get("compile_s"),
                    "error": r.error,
                }
            )
        return out

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame`` of :meth:`rows`; ImportError naming the fix when pandas is missing."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(PANDAS_MISSING) from None
        return pd.DataFrame(self.rows())

    def save(self, path: str | os.PathLike) -> Path:
        """Write the results JSON (the CLI's exchange format) to ``path``."""
        self.file.write(path)
        return Path(path)


def run(
    models: str | Sequence[str],
    *,
    mode: str = "both",
    device: str = "cpu",
    precision: str = "fp32",
    backend: str = "eager",
    batch_size: int | str | None = None,
    size: str = "full",
    repeat: int = 10,
    warmup: int = 3,
    metrics: Sequence[str] = ("time", "memory"),
    options: Mapping[str, Any] | RunOptions | None = None,
    isolate: bool = True,
    timeout_s: float = 900.0,
    output: str | os.PathLike | None = None,
    model_files: Sequence[str | os.PathLike] = (),
) -> Results:
    """Benchmark models as ``torchgauge run`` does and return the records.

    Args:
        models: names or fnmatch patterns (``"resnet*"``); case-insensitive when unambiguous;
            zoo names such as ``"timm:resnet50"`` work when the package is installed.
        mode: ``"train"``, ``"eval"`` or ``"both"``.
        device, precision, backend, size, repeat, warmup, metrics: as the CLI.
        batch_size: an integer, None (each model's default) or ``"auto"`` (``tune-batch``'s sizes).
        options: :class:`torchgauge.config.RunOptions`, or a dict of its fields (``compile_mode``,
            ``dynamic``, ``compile_scope``, ``accuracy``, ...); an unknown name is a ValueError.
        isolate: one worker process per run (timeouts and crashes become statuses); False
            runs in this process, which is faster for tiny models and easier to debug.
        timeout_s: per-run limit when isolated.
        output: also write the results JSON here, after every finished run.
        model_files: Python files registering extra models (loaded here and in each worker).

    Returns:
        :class:`Results` in plan order.

    Example:
        >>> res = torchgauge.run("resnet18", mode="eval", size="smoke", repeat=5)  # doctest: +SKIP
        >>> res[0].metrics["time_ms"]["median"]  # doctest: +SKIP
    """
    from . import __version__
    from .config import RunOptions, check_names, plan
    from .harness.env import collect_env
    from .harness.metrics import validate_metrics
    from .registry import load_model_file
    from .runner import RunnerOptions, run_suite
    from .suite import Selection

    if mode not in ("train", "eval", "both"):
        raise ValueError(f"invalid mode {mode!r}; accepted: train, eval, both")
    check_names(precision, backend)  # one error here, not one per worker
    files = tuple(str(Path(f).resolve()) for f in model_files)
    for path in files:
        load_model_file(path)
    patterns = (models,) if isinstance(models, str) else tuple(models)
    run_options = options if isinstance(options, RunOptions) else RunOptions.from_dict(options or {})
    configs = plan(
        Selection(patterns),
        modes=("train", "eval") if mode == "both" else (mode,),
        batch_size=batch_size,
        device=device,
        precision=precision,
        backend=backend,
        size=size,
        repeat=repeat,
        warmup=warmup,
        metrics=validate_metrics(tuple(metrics)),
        options=run_options,
    )
    results = ResultsFile(env=collect_env(), torchgauge_version=__version__)

    def keep(record: RunRecord) -> None:
        results.runs.append(record)
        if output is not None:
            results.write(output)

    run_suite(configs, RunnerOptions(timeout_s=timeout_s, isolate=isolate, model_files=files), on_result=keep)
    order = {c.label(): i for i, c in enumerate(configs)}
    results.runs.sort(key=lambda r: order.get(r.config.label(), len(order)))
    return Results(results, source="run")


def load(source: str | os.PathLike | Results, run_id: str | int = "latest") -> Results:
    """Results from a results JSON file or a history database (``run --db``).

    Args:
        source: a ``.json`` results file, a SQLite history database, or :class:`Results`
            (returned as is).
        run_id: for a database: a stored run id, ``"latest"`` or ``"previous"``.

    Raises:
        torchgauge.results.schema.SchemaError / torchgauge.results.store.StoreError: the
            file is missing, not a results file or database, or lacks that run.
    """
    from .results.schema import SchemaError, load_results

    if isinstance(source, Results):
        return source
    path = Path(source).expanduser()
    if not path.exists():
        raise SchemaError(f"no results file or history database at {path}")
    with open(path, "rb") as fh:
        is_database = fh.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    if not is_database:
        return Results(load_results(path), source=str(path))
    from .results.store import Store

    with Store(path, create=False) as store:
        suite = store.resolve(str(run_id))
        return Results(store.load(suite), source=f"db:{path}#{suite}")


def compare(a: Results | str | os.PathLike, b: Results | str | os.PathLike, **judge: Any) -> Any:
    """Compare two result sets (:class:`Results` or anything :func:`load` accepts).

    When each side holds one backend and the two differ (eager versus inductor), the result
    is :func:`torchgauge.compare.backend_ratios.compare_backends`'s (per model speedup,
    ratios, compiler summary), as ``compare-backends --from``. Otherwise it is the
    regression judgement of ``torchgauge compare``
    (:func:`torchgauge.compare.regression.compare_results`; ``judge`` takes its
    ``threshold``, ``alpha``, ``correction``, ...).

    Example:
        >>> cmp = torchgauge.compare("eager.json", "inductor.json")  # doctest: +SKIP
        >>> cmp.rows[0].speedup  # doctest: +SKIP
    """
    base, new = load(a), load(b)
    base_backends = {r.config.backend for r in base}
    new_backends = {r.config.backend for r in new}
    if len(base_backends) == 1 and len(new_backends) == 1 and base_backends != new_backends:
        from .compare.backend_ratios import compare_backends

        if judge:
            raise TypeError(f"options {', '.join(judge)} apply to the regression comparison, not to backends")
        return compare_backends(base.records, new.records, baseline=base_backends.pop(), candidate=new_backends.pop())
    from .compare.regression import compare_results

    return compare_results(base.file, new.file, **judge)
