"""Points built and measured on demand, each point's measurements cached as JSON.

A second bisection over the same range (same host, source, point and :class:`MeasureSpec`)
rebuilds nothing: :class:`PointStore` reads the point back from ``cache_dir``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...harness.threads import ALLOCATOR_ENV_VARS, THREAD_ENV_VARS
from .errors import BuildFailed
from .measure import MeasureFn, measure_in_subprocess
from .ranges import PointEnv, PointSource
from .spec import MeasureSpec

__all__ = ["CACHE_VERSION", "PointStore", "default_cache_dir", "resolve_cache_dir"]

CACHE_VERSION = 3  # 2: thread settings in the key (issue 17); 3: instructions counted in callgrind-host children


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/torchgauge/bisect`` (``~/.cache/torchgauge/bisect``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchgauge" / "bisect"


def resolve_cache_dir(cache_dir: str | Path | None, *, no_cache: bool = False) -> Path | None:
    """Where measurements are cached: None with ``no_cache``, else ``cache_dir`` or the default."""
    return None if no_cache else Path(cache_dir or default_cache_dir())


@dataclass
class _PointData:
    groups: dict[str, list[list[float]]] = field(default_factory=dict)  # label -> samples per process
    errors: dict[str, str] = field(default_factory=dict)  # label -> why this config has no samples
    build_error: str | None = None  # set when the point is skipped altogether


def _host_identity() -> list[str]:
    """Machine and base environment: a cache shared by several hosts (or surviving a torch
    upgrade of the base environment) must not mix their timings."""
    import importlib.metadata
    import platform

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = ""
    # the thread and allocator environment change timings as much as the threads themselves
    thread_env = {k: os.environ[k] for k in (*THREAD_ENV_VARS, *ALLOCATOR_ENV_VARS) if k in os.environ}
    return [platform.node(), platform.machine(), sys.executable, torch_version, json.dumps(thread_env, sort_keys=True)]


class PointStore:
    """Builds and measures points on demand; caches each point's measurements as JSON.

    Cache files live in ``cache_dir/<sha1>.json`` keyed by the host and base environment,
    the source (build command or pip arguments), the point (commit SHA, requirement, file)
    and the :class:`MeasureSpec`.
    A failed build is cached too (builds can take hours); delete the file or pass
    ``cache_dir=None`` to retry it.
    """

    def __init__(
        self,
        source: PointSource,
        spec: MeasureSpec,
        *,
        measure: MeasureFn | None = None,
        cache_dir: str | Path | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.source = source
        self.spec = spec
        self.measure = measure or measure_in_subprocess
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.on_event = on_event or (lambda message: None)
        self.points = source.points()
        self.labels = [c.label() for c in spec.configs()]
        self.builds = 0  # builds (or installs) actually run
        self.cache_hits = 0
        self.measurements = 0  # measuring processes run
        self._data: dict[int, _PointData] = {}
        self._built: tuple[int, PointEnv] | None = None

    def _cache_path(self, index: int) -> Path | None:
        if self.cache_dir is None:
            return None
        key = json.dumps(
            [CACHE_VERSION, _host_identity(), self.source.identity(), self.points[index].identity, self.spec.identity()]
        )
        return self.cache_dir / f"{hashlib.sha1(key.encode()).hexdigest()}.json"

    def _save(self, index: int) -> None:
        path = self._cache_path(index)
        if path is None:
            return
        point, data = self.points[index], self._data[index]
        doc = {
            "cache_version": CACHE_VERSION,
            "point": point.label,
            "ref": point.ref,
            "saved_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "build_error": data.build_error,
            "groups": data.groups,
            "errors": data.errors,
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, path)  # atomic: an interrupted bisection leaves whole files only

    def _load(self, index: int) -> _PointData | None:
        path = self._cache_path(index)
        if path is None or not path.exists():
            return None
        try:
            doc = json.loads(path.read_text())
            return _PointData(groups=doc["groups"], errors=doc["errors"], build_error=doc["build_error"])
        except (OSError, ValueError, KeyError):
            return None  # unreadable cache entry: measure again

    def _build(self, index: int) -> PointEnv:
        if self._built is not None and self._built[0] == index:
            return self._built[1]
        point = self.points[index]
        self.on_event(f"building {point.label}" + (f" ({point.subject})" if point.subject else ""))
        self.builds += 1
        self._built = None
        env = self.source.build(point)
        self._built = (index, env)
        return env

    def _measure_once(self, index: int, data: _PointData) -> None:
        try:
            env = self._build(index)
            self.measurements += 1
            result = self.measure(env, self.spec)
        except BuildFailed as exc:
            data.build_error = str(exc)
            self.on_event(f"skipping {self.points[index].label}: {str(exc).splitlines()[0]}")
            return
        for label in self.labels:
            value = result.get(label, "error: no result for this configuration")
            if isinstance(value, str):
                data.errors[label] = value
            else:
                data.groups.setdefault(label, []).append(list(value))
                data.errors.pop(label, None)

    def data(self, index: int) -> _PointData:
        """The point's measurements, from memory, the cache, or a build and a measurement."""
        if index not in self._data:
            cached = self._load(index)
            if cached is not None:
                self.cache_hits += 1
                self._data[index] = cached
            else:
                data = self._data[index] = _PointData()
                self._measure_once(index, data)
                self._save(index)
        return self._data[index]

    def groups(self, index: int, label: str) -> list[list[float]] | None:
        """Samples of one config at a point, one list per measuring process; None for a skip."""
        data = self.data(index)
        if data.build_error is not None or not data.groups.get(label):
            return None
        return data.groups[label]

    def samples(self, index: int, label: str) -> list[float] | None:
        """Every sample of one config at a point, pooled over processes; None for a skip."""
        groups = self.groups(index, label)
        return None if groups is None else [v for group in groups for v in group]

    def remeasure(self, index: int) -> None:
        """One more fresh-process measurement of a point (rebuilding it if needed)."""
        data = self.data(index)
        if data.build_error is None:
            self._measure_once(index, data)
            self._save(index)

    def skip_reason(self, index: int, label: str) -> str:
        data = self.data(index)
        return data.build_error or data.errors.get(label, "")

    def measured_count(self) -> int:
        """Distinct points measured so far (or read from the cache), skips excluded."""
        return sum(1 for data in self._data.values() if data.build_error is None)

    def skipped_labels(self) -> list[str]:
        """Labels of the points skipped so far (failed builds), in range order."""
        return [self.points[i].label for i, data in sorted(self._data.items()) if data.build_error is not None]
