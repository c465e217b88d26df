"""The dashboard: a static HTML site of a history database or of results files.

``build_site(store, "site/")`` writes::

    site/index.html             the latest run: every model and configuration, sortable, filterable
    site/models/<slug>.html     one page per model of the latest run: each metric's history
    site/figures.html           breakdown (Table 2), backends (Figures 3-4), devices (Figure 5), coverage
    site/assets/plotly.min.js   plotly's bundled JavaScript, written once (no CDN: opens offline)
    site/assets/dashboard.js    the pages' own script (sorting, filters, charts)
    site/assets/dashboard.css

Example:
    >>> with Store("history.sqlite", create=False) as store:  # doctest: +SKIP
    ...     built = build_site(store, "site")
    >>> built.pages  # doctest: +SKIP
    172
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ...results.schema import load_results
from ...results.store import Store
from ...stats.compare import DEFAULT_THRESHOLD
from .data import latest_run, model_history
from .figures import figures_data
from .html import figures_page, index_page, model_page

__all__ = ["DEFAULT_TITLE", "BuiltSite", "SiteError", "build_site", "build_site_from_results", "plotly_js"]

DEFAULT_TITLE = "torchgauge dashboard"
_STATIC = ("dashboard.js", "dashboard.css")


class SiteError(RuntimeError):
    """The site cannot be built (plotly missing, nothing stored, an unwritable folder)."""


@dataclass(frozen=True)
class BuiltSite:
    """What :func:`build_site` wrote."""

    path: Path
    pages: int  # HTML files
    models: int
    bytes: int  # total size of the site's files


def plotly_js() -> str:
    """plotly's bundled JavaScript (``plotly.offline.get_plotlyjs``).

    Raises:
        SiteError: plotly is not installed (one line saying how to install it).
    """
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise SiteError(
            "the dashboard needs plotly for its charts: pip install plotly (or torchgauge[report])"
        ) from None
    return get_plotlyjs()


def _write(path: Path, text: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    path.write_bytes(data)
    return len(data)


def _trace_links(points_by_config: Mapping[str, Sequence[Mapping[str, Any]]], page_dir: Path) -> dict[str, str | None]:
    """Recorded trace path -> link from ``page_dir`` (relative, so site and traces move together), None if absent."""
    out: dict[str, str | None] = {}
    for points in points_by_config.values():
        for p in points:
            for trace in p["traces"]:
                if trace not in out:
                    target = Path(trace).expanduser().resolve()
                    out[trace] = (
                        Path(os.path.relpath(target, page_dir.resolve())).as_posix() if target.is_file() else None
                    )
    return out


def build_site(
    store: Store,
    output: str | os.PathLike,
    *,
    title: str = DEFAULT_TITLE,
    threshold: float = DEFAULT_THRESHOLD,
    coverage: Mapping[str, Any] | None = None,
    machine: str | None = None,
) -> BuiltSite:
    """Write the dashboard of ``store`` into ``output`` (created; existing pages are replaced).

    Args:
        store: the history; its newest run is the index, judged against the machine's previous run.
        output: the site's folder.
        title: shown on every page.
        threshold: relative change that counts, for the index verdicts and the step markers.
        coverage: a ``torchgauge coverage --output`` document for the coverage figure.
        machine: the machine fingerprint whose latest run is the index (default: the newest run's);
            the other machines' latest runs are the device comparison's other sides either way.

    Raises:
        SiteError: plotly is missing. StoreError: the store holds no run.
    """
    js = plotly_js()
    root = Path(output)
    latest = latest_run(store, threshold=threshold, machine=machine)
    size = _write(root / "assets" / "plotly.min.js", js)
    static = resources.files(__package__) / "static"
    for name in _STATIC:
        size += _write(root / "assets" / name, (static / name).read_text(encoding="utf-8"))
    size += _write(root / "index.html", index_page(latest, title=title))
    size += _write(root / "figures.html", figures_page(figures_data(store, latest, coverage), title=title))
    models = list(dict.fromkeys(r.model for r in latest.rows))
    for model in models:
        history = model_history(store, model, threshold=threshold)
        traces = _trace_links(history.points, root / "models")
        size += _write(root / "models" / f"{history.slug}.html", model_page(history, traces))
    return BuiltSite(root, 2 + len(models), len(models), size)


def build_site_from_results(paths: Sequence[str | os.PathLike], output: str | os.PathLike, **kwargs: Any) -> BuiltSite:
    """:func:`build_site` of results files, oldest first: the last file is the latest run.

    The files go into a temporary history database, so one code path serves both inputs.

    Raises:
        SchemaError: a file is not a results file. SiteError: as :func:`build_site`.
    """
    loaded = [load_results(p) for p in paths]
    with tempfile.TemporaryDirectory(prefix="torchgauge-site-") as tmp:
        with Store(Path(tmp) / "history.sqlite") as store:
            for path, results in zip(paths, loaded):
                store.save(results, source=f"file {Path(path).name}")
            return build_site(store, output, **kwargs)
