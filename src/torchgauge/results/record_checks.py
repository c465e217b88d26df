"""Type checks of a run record as read from JSON: each field and each numeric metric value,
so a damaged or foreign file fails with one line naming the field instead of deep in the
statistics (docs/results-schema.md lists the fields)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SchemaError", "TIME_SUMMARY_PATHS", "check_run", "expect_field", "numeric_metric_paths"]


class SchemaError(ValueError):
    """A results document does not follow the schema."""


# Metric values that compare, history and the store read as numbers: the time summary, the
# memory delta and every registered quantity's value (the metric registry owns those paths).
# A results file from elsewhere is checked against them on load, so a string where a number
# belongs is a one-line SchemaError rather than a TypeError deep in the statistics.
TIME_SUMMARY_PATHS = tuple(("time_ms", key) for key in ("median", "min", "max", "iqr", "q1", "q3", "ci_low", "ci_high"))


def numeric_metric_paths() -> tuple[tuple[str, ...], ...]:
    """Every path in ``metrics`` whose value must be a number (or null)."""
    from ..harness.metrics import quantities

    paths = [*TIME_SUMMARY_PATHS, ("cpu_delta_mb",), *(q.path for q in quantities())]
    return tuple(dict.fromkeys(paths))


_SAMPLE_LISTS = (("time_ms", "samples"), ("time_ms", "warmup_samples"))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def expect_field(doc: Mapping[str, Any], key: str, check: Any, accepted: str, where: str) -> None:
    if key in doc and not check(doc[key]):
        raise SchemaError(f"{where}: field {key!r} is {_what(doc[key])}; accepted: {accepted}")


def _what(value: Any) -> str:  # type and shortened value for an error line: ``str 'fast'``
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _check_metrics(metrics: Mapping[str, Any], where: str) -> None:
    for path in (*numeric_metric_paths(), *_SAMPLE_LISTS):
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


def check_run(doc: Any, where: str) -> None:
    """Types of a run record's fields (see docs/results-schema.md); SchemaError names the field."""
    if not isinstance(doc, Mapping):
        raise SchemaError(f"{where} is {_what(doc)}; accepted: an object")
    is_str = lambda v: isinstance(v, str)
    opt_str = lambda v: v is None or isinstance(v, str)
    opt_int = lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool))
    is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
    for key in ("model", "mode", "device", "status", "precision", "backend", "size"):
        expect_field(doc, key, is_str, "a string", where)
    for key in ("domain", "error", "started_at"):
        expect_field(doc, key, opt_str, "a string or null", where)
    for key in ("batch_size", "requested_batch_size"):
        expect_field(doc, key, opt_int, "an integer or null", where)
    for key in ("repeat", "warmup", "seed"):
        expect_field(doc, key, is_int, "an integer", where)
    expect_field(doc, "wall_s", lambda v: v is None or _is_number(v), "a number", where)
    for key in ("metrics", "env"):
        expect_field(doc, key, lambda v: v is None or isinstance(v, Mapping), "an object or null", where)
    for key in ("options", "model_kwargs"):
        expect_field(doc, key, lambda v: isinstance(v, Mapping), "an object", where)
    expect_field(
        doc,
        "requested_metrics",
        lambda v: isinstance(v, list) and all(isinstance(m, str) for m in v),
        "a list of strings",
        where,
    )
    _check_metrics(doc.get("metrics") or {}, where)
