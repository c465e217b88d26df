"""HTML of the dashboard's pages: escaping, the page shell, and the server-rendered tables.

Every string that comes from results (model names, errors, hostnames, environment values)
reaches a page through exactly two doors: :func:`escape_html` for markup and attribute
values, and :func:`script_json` for the data a page's script reads. The script itself only
ever sets ``textContent`` and hands plotly text through its own escaper, so a model called
``<img src=x onerror=alert(1)>`` shows as those characters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from ...harness.metrics import quantity
from ...results.store import SuiteInfo
from ..escape import html_text
from .data import ENV_FIELDS, IndexRow, LatestRun, ModelHistory, model_slug

__all__ = ["escape_html", "index_page", "model_page", "figures_page", "page", "script_json"]

# Characters of a failed run's error shown in the index cell (the full text is its tooltip).
ERROR_CELL_CHARS = 80
# Characters in JSON text that would end or confuse an inline <script>: "</script>", "<!--",
# and the line separators JavaScript once treated as newlines.
_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def escape_html(value: Any) -> str:
    """``value`` as text safe inside HTML elements and quoted attributes (``&<>"'`` escaped); None is empty."""
    return "" if value is None else html_text(value)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def script_json(obj: Any) -> str:
    """``obj`` as JSON that can sit inside ``<script type="application/json">`` unchanged.

    ``<``, ``>``, ``&``, U+2028 and U+2029 become ``\\uXXXX`` escapes (the parsed value is
    the same), so no string can close the script element; NaN and inf become null.
    """
    text = json.dumps(_finite(obj), separators=(",", ":"), allow_nan=False, default=str)
    for char, escaped in _SCRIPT_UNSAFE.items():
        text = text.replace(char, escaped)
    return text


def page(*, title: str, kind: str, body: str, root: str, data: Any = None, plotly: bool = False) -> str:
    """A whole page: ``root`` is the relative path to the site's top ("" or "../")."""
    scripts = []
    if data is not None:
        scripts.append(f'<script type="application/json" id="page-data">{script_json(data)}</script>')
    if plotly:
        scripts.append(f'<script src="{root}assets/plotly.min.js"></script>')
    scripts.append(f'<script src="{root}assets/dashboard.js"></script>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<title>{escape_html(title)}</title><link rel="stylesheet" href="{root}assets/dashboard.css"></head>'
        f'<body data-page="{kind}"><nav><a href="{root}index.html">latest run</a>'
        f'<a href="{root}figures.html">figures</a></nav><main>{body}</main>{"".join(scripts)}</body></html>\n'
    )


def _table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *, cls: str = "") -> str:
    head = "".join(f"<th>{escape_html(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return escape_html(f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}")
    return escape_html(value)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _suite_line(suite: SuiteInfo) -> str:
    return (
        f"run {suite.id} of {suite.created_at[:19].replace('T', ' ')}, torch {suite.torch_version or '?'}"
        f" ({(suite.torch_git_version or '')[:10] or 'no git hash'}), {suite.device_name or 'unknown device'},"
        f" machine {suite.machine_fingerprint or '?'}, {suite.runs} runs"
    )


# Index columns: header text, sort type ("text" or "num") and whether it gets a filter control.
INDEX_COLUMNS = (
    ("model", "text"),
    ("domain", "text"),
    ("mode", "text"),
    ("device", "text"),
    ("precision", "text"),
    ("backend", "text"),
    ("batch", "num"),
    ("status", "text"),
    ("median ms", "num"),
    ("95% CI ms", "num"),
    ("noisy", "text"),
    ("previous ms", "num"),
    ("change", "num"),
    ("verdict", "text"),
)
# Columns with a drop-down filter of their distinct values.
FILTER_COLUMNS = ("mode", "device", "precision", "backend", "status", "verdict")


def _index_row(row: IndexRow) -> str:
    slug = model_slug(row.model)
    status = escape_html(row.status)
    if row.error and row.status != "ok":
        last = row.error.strip().splitlines()[-1] if row.error.strip() else ""
        status = (
            f'<span title="{escape_html(row.error)}">{escape_html(row.status)}: '
            f"{escape_html(last[:ERROR_CELL_CHARS])}</span>"
        )
    change = "-" if row.change is None else f"{row.change:+.1%}"
    ci = "-" if row.ci_low is None else f"{_ms(row.ci_low)} – {_ms(row.ci_high)}"
    noisy = "-" if row.noisy is None else ("noisy" if row.noisy else "")
    cells = [
        (row.model, f'<a href="models/{escape_html(slug)}.html">{escape_html(row.model)}</a>'),
        (row.domain, escape_html(row.domain)),
        (row.mode, escape_html(row.mode)),
        (row.device, escape_html(row.device)),
        (row.precision, escape_html(row.precision)),
        (row.backend, escape_html(row.backend)),
        (row.batch_size, escape_html(row.batch_size if row.batch_size is not None else "-")),
        (row.status, status),
        (row.median_ms, _ms(row.median_ms)),
        (row.ci_low, ci),
        (noisy, noisy),
        (row.previous_ms, _ms(row.previous_ms)),
        (row.change, change),
        (
            row.verdict,
            f'<span class="verdict v-{escape_html(row.verdict.replace(" ", "-"))}">{escape_html(row.verdict)}</span>',
        ),
    ]
    tds = "".join(f'<td data-v="{escape_html("" if v is None else v)}">{shown}</td>' for v, shown in cells)
    return f"<tr>{tds}</tr>"


def index_page(latest: LatestRun, *, title: str) -> str:
    """The latest run's table: every model and configuration, sortable and filterable."""
    head = "".join(
        f'<th data-sort="{kind}" data-col="{i}">{escape_html(name)}</th>'
        for i, (name, kind) in enumerate(INDEX_COLUMNS)
    )
    filters = [
        '<input id="filter-text" type="search" placeholder="filter models (substring)" aria-label="filter models">'
    ]
    for name in FILTER_COLUMNS:
        col = [c[0] for c in INDEX_COLUMNS].index(name)
        filters.append(
            f'<select class="filter" data-col="{col}" aria-label="{name}">'
            f'<option value="">{name}: all</option></select>'
        )
    filters.append('<label><input id="filter-noisy" type="checkbox"> noisy only</label>')
    previous = (
        "no earlier run of this machine: nothing to compare"
        if latest.previous is None
        else f"compared with {escape_html(_suite_line(latest.previous))}"
    )
    body = (
        f"<h1>{escape_html(title)}</h1>"
        f'<p class="run">Latest: {escape_html(_suite_line(latest.suite))}<br>{previous}</p>'
        f'<p class="summary"><b>{latest.regressions}</b> regression(s), <b>{latest.improvements}</b> improvement(s) '
        f"over all metrics (time, memory, counts); threshold {latest.threshold:.1%}. The verdict column judges time: "
        "regression/improvement need the threshold and a significant rank test; inconclusive reached the threshold "
        "only; same did not.</p>"
        f'<div class="filters">{"".join(filters)} <span id="row-count"></span></div>'
        f'<div class="wide"><table id="runs" class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(_index_row(r) for r in latest.rows)}</tbody></table></div>"
    )
    return page(title=title, kind="index", body=body, root="")


def _env_table(envs: dict[int, dict[str, Any]]) -> str:
    fields = [f for f in ENV_FIELDS if any(e.get(f) is not None for e in envs.values())]
    rows = "".join(
        f'<tr id="env-{i}"><td>env {i}</td>' + "".join(f"<td>{_cell(env.get(f))}</td>" for f in fields) + "</tr>"
        for i, env in envs.items()
    )
    head = "<th>id</th>" + "".join(f"<th>{escape_html(f)}</th>" for f in fields)
    return f'<table class="envs"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _trace_links(paths: Sequence[tuple[str, str | None]]) -> str:
    """``(path as recorded, href or None when the file is absent)`` pairs as links."""
    out = []
    for shown, href in paths:
        if href is None:
            out.append(f'<span class="missing" title="not found when the site was built">{escape_html(shown)}</span>')
        else:
            out.append(f'<a class="trace" href="{escape_html(href)}">{escape_html(shown)}</a>')
    return " ".join(out) or "-"


def model_page(history: ModelHistory, traces: dict[str, str | None]) -> str:
    """One model: a chart per metric (intervals, levels, step markers), the runs, their environments.

    Args:
        history: from :func:`~.data.model_history`.
        traces: recorded trace path -> link relative to the page (None: the file is absent).
    """
    data = {
        "model": history.model,
        "threshold": history.threshold,
        "metrics": {
            m: {"unit": unit, "series": [vars(s) for s in series]}
            for m, series in history.metrics.items()
            for unit in [_unit(m)]
        },
        "points": history.points,
        "envs": history.envs,
    }
    charts = "".join(
        f"<section><h2>{escape_html(m)} ({escape_html(_unit(m))})</h2>"
        f'<div class="chart" data-metric="{escape_html(m)}"></div></section>'
        for m in history.metrics
    )
    runs = []
    for label, points in history.points.items():
        rows = "".join(
            f"<tr><td>{p['run']}</td><td>{escape_html(p['date'][:19].replace('T', ' '))}</td>"
            f"<td>{escape_html(p['status'])}</td>"
            '<td class="err">'
            f"{escape_html((p['error'] or '').strip().splitlines()[-1] if (p['error'] or '').strip() else '')}</td>"
            f'<td><a href="#env-{p["env"]}">env {p["env"]}</a></td>'
            f"<td>{_trace_links([(t, traces.get(t)) for t in p['traces']])}</td></tr>"
            for p in points
        )
        runs.append(
            f"<details><summary>{escape_html(label)}: {len(points)} runs</summary>"
            "<table><thead><tr><th>run</th><th>date</th><th>status</th><th>error</th><th>environment</th>"
            f"<th>traces</th></tr></thead><tbody>{rows}</tbody></table></details>"
        )
    body = (
        f"<h1>{escape_html(history.model)}</h1>"
        f"<p>Each point is one stored run; the band is the 95% interval of the median time; the dashed line is the "
        f"level found by step detection; triangles mark level changes of at least {history.threshold:.1%} "
        "(red up: regression, green down: improvement).</p>"
        f"{charts or '<p>No measured value in any run.</p>'}<h2>Runs</h2>{''.join(runs)}"
        f'<h2>Environments</h2><details id="environments"><summary>{len(history.envs)} environment(s)</summary>'
        f"{_env_table(history.envs)}</details>"
    )
    return page(title=f"{history.model}: history", kind="model", body=body, root="../", data=data, plotly=True)


def _unit(metric: str) -> str:
    return quantity(metric).unit


def figures_page(figures: dict[str, Any], *, title: str) -> str:
    """The paper's figures for the latest run; sections without data say what would fill them."""
    parts = [f"<h1>{escape_html(title)}: figures</h1>"]
    b = figures["breakdown"]
    parts.append("<h2>Time breakdown per domain (Table 2)</h2>")
    if b["tables"]:
        for t in b["tables"]:
            label = "GPU" if t["kind"] == "cuda" else "CPU"
            parts.append(
                f"<h3>{label}, {escape_html(t['config'])}: mean over the models of each domain</h3>"
                + _table(t["columns"], t["rows"])
            )
        parts.append('<div class="chart" data-figure="breakdown"></div>')
    else:
        parts.append(
            '<p class="empty">No run of the latest run has a breakdown; record one with '
            "<code>torchgauge run ... --metrics time,breakdown</code>.</p>"
        )
    parts.append("<h2>Compiler comparison (Figures 3-4): ratios candidate / baseline</h2>")
    if not figures["backends"]:
        parts.append(
            '<p class="empty">The latest run holds one backend; run several (e.g. '
            "<code>--backend eager,inductor</code>) to compare them.</p>"
        )
    for i, cmp in enumerate(figures["backends"]):
        parts.append(f"<h3>{escape_html(cmp['candidate'])} / {escape_html(cmp['baseline'])}</h3>")
        if cmp.get("error"):
            parts.append(f'<p class="empty">{escape_html(cmp["error"])}</p>')
            continue
        geo = [
            [
                mode,
                *[
                    None if (by.get(m) or {}).get("geomean") is None else f"{by[m]['geomean']:.3f} (n={by[m]['n']})"
                    for m in cmp["metrics"]
                ],
            ]
            for mode, by in cmp["geomeans"].items()
        ]
        parts.append(_table(["mode", *(f"geomean {cmp['titles'][m]}" for m in cmp["metrics"])], geo, cls="geomeans"))
        parts.append(f'<div class="chart" data-figure="backends" data-index="{i}"></div>')
        if cmp["failed_candidate"] or cmp["failed_accuracy"]:
            failed = [[u["config"], u["detail"]] for u in cmp["failed_candidate"]] + [
                [name, "fail_accuracy (left out of the geometric means)"] for name in cmp["failed_accuracy"]
            ]
            parts.append(_table(["configuration", "failure"], failed))
    parts.append("<h2>Device comparison (Figure 5): time A / B</h2>")
    if not figures["devices"]:
        parts.append(
            '<p class="empty">The data at hand holds one device on one machine; store runs of another '
            "device or machine to compare them.</p>"
        )
    for i, cmp in enumerate(figures["devices"]):
        parts.append(f"<h3>A: {escape_html(cmp['a'])}<br>B: {escape_html(cmp['b'])}</h3>")
        if cmp.get("error"):
            parts.append(f'<p class="empty">{escape_html(cmp["error"])}</p>')
            continue
        rows = [
            [
                mode,
                None if g["geomean"] is None else f"{g['geomean']:.3f} (n={g['n']})",
                cmp["wins"][mode]["a"],
                cmp["wins"][mode]["b"],
                cmp["wins"][mode]["ties"],
            ]
            for mode, g in cmp["geomeans"].items()
        ]
        parts.append(_table(["mode", "geomean A / B", "A faster", "B faster", "ties"], rows, cls="geomeans"))
        parts.append(f'<div class="chart" data-figure="devices" data-index="{i}"></div>')
    parts.append("<h2>API coverage</h2>")
    cov = figures["coverage"]
    if cov is None:
        if figures.get("coverage_error"):
            parts.append(f'<p class="empty">{escape_html(figures["coverage_error"])}</p>')
        parts.append(
            '<p class="empty">No coverage in the latest run; record it with <code>torchgauge coverage '
            "--output coverage.json</code> and pass <code>--coverage coverage.json</code>, or run with "
            "<code>--metrics time,coverage</code>.</p>"
        )
    else:
        a, o = cov["apis"], cov["ops"]
        rows = [
            [
                "Python APIs",
                a["suite"],
                a["tagged"],
                None if a["ratio"] is None else f"{a['ratio']:.2f}x",
                len(a["cover_subset"] or []),
            ],
            [
                "ATen operators",
                o["suite"],
                o["tagged"],
                None if o["ratio"] is None else f"{o['ratio']:.2f}x",
                len(o["cover_subset"] or []),
            ],
        ]
        against = cov["summary"]["against"]
        parts.append(
            _table(["surface", "suite", f"'{against}' models", "suite / tagged", "models for the CI subset"], rows)
        )
        parts.append(
            '<div class="chart" data-figure="coverage-domains"></div>'
            '<div class="chart" data-figure="coverage-greedy"></div>'
        )
    return page(title=f"{title}: figures", kind="figures", body="".join(parts), root="", data=figures, plotly=True)
