"""The results schema: run records and results files as versioned JSON, checked and migrated on load
(the run configuration itself is :class:`torchgauge.config.RunConfig`).

A results file is the exchange format (``torchgauge run --output``, ``show``, ``compare``)::

    {
      "schema_version": 1,
      "torchgauge_version": "0.1.0",
      "created_at": "2026-11-23T10:00:00+00:00",
      "env": {...},                      # see torchgauge.harness.env.collect_env
      "runs": [
        {"model": "resnet50", "domain": "vision", "mode": "eval", "device": "cpu",
         "precision": "fp32", "backend": "eager", "batch_size": 64, "size": "full",
         "status": "ok", "error": null,
         "metrics": {"time_ms": {"samples": [...], "median": ..., "min": ..., "max": ...,
                                 "iqr": ..., "q1": ..., "q3": ..., "ci_low": ..., "ci_high": ...,
                                 "warmup_samples": [...]},
                     "cpu_peak_mb": ..., "cpu_delta_mb": ..., "gpu_peak_mb": ...},
         ...}
      ]
    }

``status`` is one of :data:`STATUSES`; metrics of a failed run are absent (``{}``), never
sentinel strings. Later metrics (breakdown, flops, compile, ...) are further keys of
``metrics``. ``docs/results-schema.md`` documents every field.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..config import ConfigError, RunConfig

# RunConfig is re-exported: modules that read records import it from here too.
__all__ = [
    "SCHEMA_VERSION",
    "STATUSES",
    "PASSING_STATUSES",
    "RunConfig",
    "RunRecord",
    "ResultsFile",
    "ResultsWriteError",
    "SchemaError",
    "load_results",
    "migrate",
]

SCHEMA_VERSION = 1
# fail_accuracy / eager_nondeterministic: the run was measured (time metrics kept) but its
# --accuracy check failed (or its training diverged to NaN/inf parameters), or could not
# judge because eager itself is nondeterministic.
STATUSES = ("ok", "error", "oom", "timeout", "unsupported", "skipped", "fail_accuracy", "eager_nondeterministic")
# Statuses that do not fail a suite run (CLI exit code 0). fail_accuracy fails it: a fast
# wrong answer is a failure; eager_nondeterministic does not, the backend is not at fault.
PASSING_STATUSES = frozenset({"ok", "unsupported", "skipped", "eager_nondeterministic"})


class SchemaError(ValueError):
    """A results document does not follow the schema."""


# Metric values that compare, history and the store read as numbers: (path in metrics).
# A results file from elsewhere is checked against them on load, so a string where a
# number belongs is a one-line SchemaError rather than a TypeError deep in the statistics.
NUMERIC_METRIC_PATHS = (
    ("time_ms", "median"),
    ("time_ms", "min"),
    ("time_ms", "max"),
    ("time_ms", "iqr"),
    ("time_ms", "q1"),
    ("time_ms", "q3"),
    ("time_ms", "ci_low"),
    ("time_ms", "ci_high"),
    ("cpu_peak_mb",),
    ("cpu_delta_mb",),
    ("gpu_peak_mb",),
    ("instructions", "per_step"),
    ("op_counts", "total"),
    ("flops", "total"),
    ("flops", "tflops"),
    ("compile", "compile_s"),
)
_SAMPLE_LISTS = (("time_ms", "samples"), ("time_ms", "warmup_samples"))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _expect(doc: Mapping[str, Any], key: str, check: Any, accepted: str, where: str) -> None:
    if key in doc and not check(doc[key]):
        raise SchemaError(f"{where}: field {key!r} is {_what(doc[key])}; accepted: {accepted}")


def _what(value: Any) -> str:  # type and shortened value for an error line: ``str 'fast'``
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _check_metrics(metrics: Mapping[str, Any], where: str) -> None:
    for path in (*NUMERIC_METRIC_PATHS, *_SAMPLE_LISTS):
        node: Any = metrics
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is None:
            continue
        name = ".".join(path)
        if not isinstance(node, Mapping):
            raise SchemaError(f"{where}: metrics.{'.'.join(path[:-1])} is {type(node).__name__}; accepted: an object")
        value = node.get(path[-1])
        if path in _SAMPLE_LISTS:
            if value is not None and not (isinstance(value, list) and all(v is None or _is_number(v) for v in value)):
                raise SchemaError(f"{where}: metrics.{name} is not a list of numbers")
        elif value is not None and not _is_number(value):
            raise SchemaError(f"{where}: metrics.{name} is {_what(value)}; accepted: a number or null")


def _check_run(doc: Any, where: str) -> None:
    """Types of a run record's fields (see docs/results-schema.md); SchemaError names the field."""
    if not isinstance(doc, Mapping):
        raise SchemaError(f"{where} is {_what(doc)}; accepted: an object")
    is_str = lambda v: isinstance(v, str)
    opt_str = lambda v: v is None or isinstance(v, str)
    opt_int = lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool))
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
    for key in ("model", "mode", "device", "status", "precision", "backend", "size"):
        _expect(doc, key, is_str, "a string", where)
    for key in ("domain", "error", "started_at"):
        _expect(doc, key, opt_str, "a string or null", where)
    for key in ("batch_size", "requested_batch_size"):
        _expect(doc, key, opt_int, "an integer or null", where)
    for key in ("repeat", "warmup", "seed"):
        _expect(doc, key, is_int, "an integer", where)
    _expect(doc, "wall_s", lambda v: v is None or _is_number(v), "a number", where)
    for key in ("metrics", "env"):
        _expect(doc, key, lambda v: v is None or isinstance(v, Mapping), "an object or null", where)
    for key in ("options", "model_kwargs"):
        _expect(doc, key, lambda v: isinstance(v, Mapping), "an object", where)
    _expect(
        doc,
        "requested_metrics",
        lambda v: isinstance(v, list) and all(isinstance(m, str) for m in v),
        "a list of strings",
        where,
    )
    _check_metrics(doc.get("metrics") or {}, where)


_CONFIG_FIELDS = tuple(f.name for f in fields(RunConfig))


@dataclass
class RunRecord:
    """The result of one run: its configuration, status and metrics.

    ``metrics["time_ms"]["samples"]`` holds every timed sample; summaries are derived
    (``torchgauge.stats.summarize``) when the record is made.
    """

    config: RunConfig
    status: str
    domain: str = ""
    error: str | None = None  # last lines of the error for non-ok statuses
    metrics: dict[str, Any] = field(default_factory=dict)
    batch_size: int | None = None  # the batch size actually used
    started_at: str = ""
    wall_s: float = 0.0  # wall time of the whole run (build + warm-up + timing + extras)
    env: dict[str, Any] | None = None  # per-run environment when runs come from several
    # Thread settings in effect and the CPUs other processes kept busy (harness.threads.thread_record)
    threads: dict[str, Any] | None = None
    # Where wall_s went, seconds: worker_start (fork to result, minus the run itself),
    # build, warmup, timed, extra (metric passes after the timed steps); see docs.
    phases_s: dict[str, float] = field(default_factory=dict)
    # Hash of the model's source when it ran (torchgauge.model_code); None: not recorded (older files)
    model_code_hash: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise SchemaError(f"invalid status {self.status!r}; accepted: {', '.join(STATUSES)}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def time_ms(self) -> dict[str, Any] | None:
        return self.metrics.get("time_ms")

    def to_dict(self) -> dict[str, Any]:
        c = self.config
        doc: dict[str, Any] = {
            "model": c.model,
            "domain": self.domain,
            "mode": c.mode,
            "device": c.device,
            "precision": c.precision,
            "backend": c.backend,
            "batch_size": self.batch_size if self.batch_size is not None else c.batch_size,
            "size": c.size,
            "status": self.status,
            "error": self.error,
            "metrics": self.metrics,
            "requested_batch_size": c.batch_size,
            "requested_metrics": list(c.metrics),
            "repeat": c.repeat,
            "warmup": c.warmup,
            "seed": c.seed,
            "options": c.options.to_dict(),
            "model_kwargs": dict(c.model_kwargs),
            "started_at": self.started_at,
            "wall_s": self.wall_s,
        }
        if self.env is not None:
            doc["env"] = self.env
        if self.threads is not None:
            doc["threads"] = self.threads
        if self.phases_s:
            doc["phases_s"] = self.phases_s
        if self.model_code_hash is not None:
            doc["model_code_hash"] = self.model_code_hash
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, where: str = "run record") -> RunRecord:
        _check_run(doc, where)
        missing = [k for k in ("model", "mode", "device", "status") if k not in doc]
        if missing:
            raise SchemaError(f"run record lacks required field(s): {', '.join(missing)}")
        cfg_values = {k: doc[k] for k in _CONFIG_FIELDS if k in doc and k not in ("batch_size", "metrics")}
        cfg_values["batch_size"] = doc.get("requested_batch_size", doc.get("batch_size"))
        if "requested_metrics" in doc:
            cfg_values["metrics"] = tuple(doc["requested_metrics"])
        try:
            config = RunConfig(**cfg_values)
        except ConfigError as exc:
            raise SchemaError(f"{where}: {exc}") from None
        return cls(
            config=config,
            status=doc["status"],
            domain=doc.get("domain", ""),
            error=doc.get("error"),
            metrics=dict(doc.get("metrics") or {}),
            batch_size=doc.get("batch_size"),
            started_at=doc.get("started_at", ""),
            wall_s=float(doc.get("wall_s") or 0.0),
            env=doc.get("env"),
            threads=doc.get("threads"),
            phases_s=dict(doc.get("phases_s") or {}),
            model_code_hash=doc.get("model_code_hash"),
        )


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class ResultsFile:
    """A results document: environment plus run records."""

    env: dict[str, Any]
    runs: list[RunRecord] = field(default_factory=list)
    created_at: str = field(default_factory=_now)
    torchgauge_version: str = ""
    schema_version: int = SCHEMA_VERSION
    complete: bool = True  # False while the run is going on, and for good if it was interrupted
    # Every configuration the suite was asked to run, written before the first run starts,
    # so a file cut short (crash, Ctrl-C, CI time limit) says what is missing. Empty in
    # files from before it existed and in files not written by a suite run (import, merge).
    planned: list[RunConfig] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "torchgauge_version": self.torchgauge_version,
            "created_at": self.created_at,
            "complete": self.complete,
            "env": self.env,
            "planned": [{k: getattr(c, k) for k in _PLANNED_FIELDS} for c in self.planned],
            "runs": [r.to_dict() for r in self.runs],
        }

    def missing(self) -> list[RunConfig]:
        """Planned configurations without a run record (by :meth:`RunConfig.key`), in plan order."""
        finished = {r.config.key() for r in self.runs}
        return [c for c in self.planned if c.key() not in finished]

    def to_json(self) -> str:
        # default=str: a value json cannot encode (a numpy scalar a harness let through) must
        # not make every later rewrite of the file fail
        return json.dumps(_json_safe(self.to_dict()), indent=1, allow_nan=False, default=str)

    def write(self, path: str | os.PathLike) -> None:
        """Write atomically (temp file + rename): a crash never leaves a truncated file.

        Raises:
            ResultsWriteError: the file cannot be written (an OSError naming the path).
        """
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        except OSError as exc:
            raise ResultsWriteError(exc.errno, f"cannot write results file {path}: {exc.strerror or exc}") from None
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(self.to_json())
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as exc:  # disk full, a folder where the file should be, ...
            Path(tmp).unlink(missing_ok=True)
            raise ResultsWriteError(exc.errno, f"cannot write results file {path}: {exc.strerror or exc}") from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ResultsFile:
        doc = migrate(doc)
        if not isinstance(doc.get("runs"), list):
            raise SchemaError("results document lacks a 'runs' list")
        where = "results document"
        _expect(doc, "env", lambda v: v is None or isinstance(v, Mapping), "an object", where)
        for key in ("created_at", "torchgauge_version"):
            _expect(doc, key, lambda v: v is None or isinstance(v, str), "a string", where)
        _expect(doc, "complete", lambda v: isinstance(v, bool), "true or false", where)
        return cls(
            env=dict(doc.get("env") or {}),
            runs=[RunRecord.from_dict(r, where=f"runs[{i}]") for i, r in enumerate(doc["runs"])],
            created_at=doc.get("created_at") or "",
            torchgauge_version=doc.get("torchgauge_version") or "",
            schema_version=SCHEMA_VERSION,
            complete=doc.get("complete", True),
            planned=[_planned_config(p) for p in doc.get("planned") or ()],
        )

    def select(self, *, statuses: Iterable[str] | None = None) -> list[RunRecord]:
        wanted = set(statuses) if statuses else None
        return [r for r in self.runs if wanted is None or r.status in wanted]


class ResultsWriteError(OSError):
    """A results file cannot be written; ``str()`` is one line naming the path."""

    def __str__(self) -> str:
        return str(self.strerror)


# The fields of a planned configuration in the results file: a run's identity (RunConfig.key)
# plus its size; the shared settings (repeat, metrics, ...) are in the run records.
_PLANNED_FIELDS = ("model", "mode", "device", "precision", "backend", "batch_size", "size")


def _planned_config(doc: Mapping[str, Any]) -> RunConfig:
    if not isinstance(doc, Mapping) or "model" not in doc:
        raise SchemaError(f"planned entry {doc!r} lacks 'model'; accepted: an object with {', '.join(_PLANNED_FIELDS)}")
    return RunConfig(**{k: doc[k] for k in _PLANNED_FIELDS if k in doc})


def _json_safe(obj: Any) -> Any:
    # Strict JSON: NaN/inf become null (a skipped value), tuples become lists.
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


# version -> function upgrading a document of that version by one step
_MIGRATIONS: dict[int, Any] = {}


def migrate(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Upgrade a results document to :data:`SCHEMA_VERSION` step by step.

    Raises:
        SchemaError: the document has no version, or one newer than this torchgauge knows.
    """
    if not isinstance(doc, Mapping):
        raise SchemaError("results document must be a JSON object")
    version = doc.get("schema_version")
    if not isinstance(version, int):
        raise SchemaError("results document lacks an integer 'schema_version'")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"results schema_version {version} is newer than this torchgauge supports "
            f"({SCHEMA_VERSION}); upgrade torchgauge"
        )
    doc = dict(doc)
    while doc["schema_version"] < SCHEMA_VERSION:
        step = _MIGRATIONS.get(doc["schema_version"])
        if step is None:
            raise SchemaError(f"no migration from schema_version {doc['schema_version']}")
        doc = step(doc)
    return doc


def load_results(path: str | os.PathLike) -> ResultsFile:
    """Read and validate a results JSON file (older schema versions are migrated)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SchemaError(f"results file not found: {path}") from None
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{path} is not UTF-8 text (byte {exc.start}): not a results file") from None
    except OSError as exc:
        raise SchemaError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise SchemaError(f"{path} nests too deeply to be a results file") from None
    try:
        return ResultsFile.from_dict(doc)
    except SchemaError as exc:
        raise SchemaError(f"{path}: {exc}") from None
