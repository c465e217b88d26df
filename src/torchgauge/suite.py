"""Select models and run a suite: patterns -> names; RunConfigs -> isolated runs -> a results file on disk.

Planning (names, modes and a base configuration -> RunConfigs) is :func:`torchgauge.config.plan`.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import fnmatch
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import RunConfig
from .results.schema import PASSING_STATUSES, ResultsFile, RunRecord

__all__ = [
    "DEVICE_MISSING_EXIT_CODE",
    "Selection",
    "SelectionError",
    "select_models",
    "parse_shard",
    "run_and_save",
    "default_output_path",
    "exit_code",
]

# Exit code when every selected run was skipped because the requested device is missing:
# a GPU job scheduled on a machine without a GPU must not pass green.
DEVICE_MISSING_EXIT_CODE = 4


class SelectionError(ValueError):
    """No model matches a pattern (the message names close matches)."""


def select_models(
    patterns: Sequence[str],
    *,
    exclude: Sequence[str] = (),
    domain: Sequence[str] = (),
    tags: Sequence[str] = (),
) -> list[str]:
    """Registered names matching any pattern (exact names or fnmatch wildcards), natural order.

    A pattern matching nothing exactly is retried case-insensitively: a plain name through
    :func:`torchgauge.registry.resolve_name` (one match, or an error listing the ambiguous
    ones; zoo names such as ``timm:resnet50`` register there), a wildcard by lower-case
    matching. Zoo models come after the registered ones.

    Raises:
        SelectionError: a pattern matches nothing (close names suggested) or is ambiguous.
    """
    from .registry import AmbiguousModelError, UnknownModelError, list_models, resolve_name

    universe = list_models(domain=list(domain) or None, tags=list(tags) or None)
    chosen: list[str] = []
    for pat in patterns or ["*"]:
        hits = [n for n in universe if fnmatch.fnmatchcase(n, pat)]
        if not hits and _is_wildcard(pat):
            hits = [n for n in universe if fnmatch.fnmatchcase(n.lower(), pat.lower())]
        elif not hits:
            try:
                name = resolve_name(pat)
            except AmbiguousModelError as exc:
                raise SelectionError(str(exc)) from None
            except UnknownModelError as exc:
                if ":" in pat:  # a zoo's own message: which package or model is missing
                    raise SelectionError(str(exc)) from None
                name = ""
            if ":" in name:  # a zoo model registered just now: the same filters apply
                universe_now = list_models(domain=list(domain) or None, tags=list(tags) or None)
                hits = [name] if name in universe_now else []
            else:
                hits = [name] if name in universe else []
        if not hits:
            close = difflib.get_close_matches(pat, list_models(), n=5, cutoff=0.5)
            hint = f"; did you mean: {', '.join(close)}?" if close else "; see `torchgauge list`"
            raise SelectionError(f"no model matches {pat!r}{hint}")
        chosen.extend(h for h in hits if h not in chosen)
    if exclude:
        chosen = [n for n in chosen if not any(fnmatch.fnmatchcase(n, p) for p in exclude)]
    order = {n: i for i, n in enumerate(universe)}
    return sorted(chosen, key=lambda n: order.get(n, len(order)))


@dataclass(frozen=True)
class Selection:
    """Which registered models: names or fnmatch wildcards, narrowed by exclude patterns,
    domains, tags and a CI shard ``(i, n)`` (1-based); what :func:`torchgauge.config.plan` plans."""

    patterns: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    domain: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    shard: tuple[int, int] | None = None

    def matching(self) -> list[str]:
        """Every selected model before sharding (SelectionError when a pattern matches nothing)."""
        return select_models(self.patterns, exclude=self.exclude, domain=self.domain, tags=self.tags)

    def models(self) -> list[str]:
        """The selected models of this shard, in natural order."""
        names = self.matching()
        if self.shard:
            i, n = self.shard
            names = names[i - 1 :: n]
        return names


def _is_wildcard(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?[")


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"i/n"`` (1-based) -> (i, n); raises ValueError with the accepted form."""
    if not text:
        return None
    try:
        i, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise ValueError(f"invalid shard {text!r}; accepted: i/n with 1 <= i <= n, e.g. 2/4") from None
    if not 1 <= i <= n:
        raise ValueError(f"invalid shard {text!r}; accepted: i/n with 1 <= i <= n, e.g. 2/4")
    return i, n


def default_output_path(directory: str | Path = "torchgauge-results") -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(directory) / f"run-{stamp}.json"


def run_and_save(
    configs: Iterable[RunConfig],
    runner_options: Any,
    output: str | Path,
    *,
    env: dict[str, Any] | None = None,
    on_result: Callable[[RunRecord], None] | None = None,
    on_start: Callable[[RunConfig], None] | None = None,
    executor: Any = None,
) -> ResultsFile:
    """Run the configs in isolated workers, rewriting ``output`` after every finished run.

    The file is replaced atomically each time, so a crash or Ctrl-C leaves every run that
    finished before it on disk; it says ``"complete": false`` until the last run ended.
    A failure to write it after one run is a warning (the suite goes on, ``on_result``
    still sees the run); the first write fails loudly (ResultsWriteError) before anything runs.
    ``executor`` (``torchgauge.executors``) says where the runs
    execute: this machine (the default) or a Ray cluster; ``env`` defaults to its environment.
    """
    from . import __version__
    from .executors import LocalExecutor

    configs = list(configs)
    executor = executor if executor is not None else LocalExecutor()
    results = ResultsFile(
        env=env if env is not None else executor.environment(),
        torchgauge_version=__version__,
        complete=False,
        planned=configs,
    )

    def save(record: RunRecord) -> None:
        results.runs.append(record)
        try:
            results.write(output)  # a failure is reported by run_suite as a warning
        finally:
            if on_result:
                on_result(record)

    results.write(output)  # the environment and the plan, before anything runs
    executor.run(configs, runner_options, on_result=save, on_start=on_start)
    results.complete = True
    results.write(output)
    return results


def exit_code(records: Iterable[RunRecord]) -> int:
    """0 when every run is ok/unsupported/skipped, 1 otherwise, and
    :data:`DEVICE_MISSING_EXIT_CODE` when nothing ran because the device is missing: some
    runs ``skipped`` (its only reason is a requested device this machine lacks) and the
    rest ``unsupported`` (models that cannot use that device anyway)."""
    records = list(records)
    if any(r.status == "skipped" for r in records) and all(r.status in ("skipped", "unsupported") for r in records):
        return DEVICE_MISSING_EXIT_CODE
    return 0 if all(r.status in PASSING_STATUSES for r in records) else 1
