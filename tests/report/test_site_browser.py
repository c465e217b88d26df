"""The dashboard in a real headless browser: Debian's Chromium driven by Playwright.

Skipped, with the reason, only where plotly, Playwright or Chromium (``/usr/bin/chromium``,
or ``$TORCHGAUGE_CHROMIUM``) is missing or cannot start; ``.ci/run`` installs all three.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

pytest.importorskip("plotly", reason="the dashboard needs plotly (pip install plotly)")
sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests need Playwright (pip install playwright)")

from torchgauge.report.site import build_site  # noqa: E402  (after the importorskip checks)
from torchgauge.report.site.data import model_slug  # noqa: E402  (after the importorskip checks)
from torchgauge.results.store import Store  # noqa: E402  (after the importorskip checks)

CHROMIUM = os.environ.get("TORCHGAUGE_CHROMIUM", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (or set TORCHGAUGE_CHROMIUM)")
    with sync_api.sync_playwright() as pw:
        try:
            chromium = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        except Exception as exc:  # any launch failure means no browser here
            pytest.skip(f"Chromium at {CHROMIUM} does not start: {str(exc).splitlines()[0]}")
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def site(scenario, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("dashboard")
    db = scenario.write_site_history(tmp / "h.sqlite", tmp / "traces" / "bert.json")
    with Store(db, create=False) as store:
        build_site(store, tmp / "site", coverage=scenario.COVERAGE, machine="m1")
    return tmp / "site"


class Page:
    """A loaded page that records every JavaScript error, console error and dialog."""

    def __init__(self, browser, path: Path) -> None:
        self.problems: list[str] = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.page.on(
            "console", lambda msg: self.problems.append(f"console: {msg.text}") if msg.type == "error" else None
        )
        self.page.on("pageerror", lambda exc: self.problems.append(f"page error: {exc}"))
        self.page.on("dialog", lambda dialog: (self.problems.append(f"dialog: {dialog.message}"), dialog.dismiss()))
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("body[data-ready='1']", timeout=30_000)

    def visible_rows(self) -> list[list[str]]:
        return self.page.eval_on_selector_all(
            "#runs tbody tr", "rows => rows.filter(r => !r.hidden).map(r => [...r.cells].map(c => c.dataset.v))"
        )

    def close(self) -> None:
        self.page.close()
        assert not self.problems, self.problems


def test_every_page_loads_without_errors(browser, site) -> None:
    pages = [site / "index.html", site / "figures.html", *sorted((site / "models").glob("*.html"))]
    assert len(pages) == 5
    for path in pages:
        page = Page(browser, path)
        assert page.page.title()
        page.close()


def _trace_points(page, metric: str, name: str) -> tuple[int, int]:
    """(points in the data, point markers drawn) of the trace called ``name`` in ``metric``'s chart."""
    return tuple(
        page.page.evaluate(
            """([metric, name]) => {
        const gd = document.querySelector(`div.chart[data-metric="${metric}"]`);
        const i = gd.data.findIndex(t => t.name === name);
        const drawn = gd.querySelectorAll('.scatterlayer .trace')[i].querySelectorAll('.points path.point');
        return [gd.data[i].x.length, drawn.length]; }""",
            [metric, name],
        )
    )


def test_model_chart_holds_every_night_and_marks_the_step(browser, site, scenario) -> None:
    page = Page(browser, site / "models" / "bert.html")
    assert _trace_points(page, "time", "eval/cpu/fp32/eager") == (scenario.NIGHTS, scenario.NIGHTS)
    assert _trace_points(page, "time", "eval/cpu/fp32/eager regression") == (1, 1)
    assert _trace_points(page, "cpu_peak_mb", "train/cpu/fp32/inductor") == (scenario.NIGHTS, scenario.NIGHTS)
    # the machine m2 run is one point of its own configuration
    assert _trace_points(page, "time", "eval/cuda/fp32/eager") == (1, 1)
    band = page.page.evaluate("""() => { const gd = document.querySelector('div.chart[data-metric="time"]');
        return gd.data.filter(t => t.fill === 'tonexty').length; }""")
    assert band == 8  # an interval band per configuration: 4 on cpu (m1), 4 on cuda (m2)
    page.close()


def test_figures_hold_one_bar_per_compared_run(browser, site) -> None:
    page = Page(browser, site / "figures.html")
    counts = page.page.evaluate("""() => [...document.querySelectorAll('div.chart[data-figure] div.plot, '
        + 'div.chart[data-figure^="coverage"]')].map(gd => [gd.closest('[data-figure]').dataset.figure,
          gd.data.map(t => t.x.length)])""")
    by_figure: dict[str, list[list[int]]] = {}
    for figure, lengths in counts:
        by_figure.setdefault(figure, []).append(lengths)
    # breakdown: a panel per backend and mode, 3 models each (resnet18 failed on the last night: 2)
    assert len(by_figure["breakdown"]) == 4 and all(lengths == [2, 2] for lengths in by_figure["breakdown"])
    # inductor / eager: per mode, time and CPU memory over the 2 models that ran
    assert by_figure["backends"] == [[2, 2], [2, 2]]
    # device: cpu (m1) / cuda (m2), per mode 2 models x 2 backends
    assert by_figure["devices"] == [[4], [4]]
    assert by_figure["coverage-domains"] == [[2, 2]] and by_figure["coverage-greedy"] == [[3]]
    page.close()


def _local_targets(page) -> list[str]:
    return page.page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)")


def test_links_resolve(browser, site) -> None:
    for path in (site / "index.html", site / "figures.html", site / "models" / "bert.html"):
        page = Page(browser, path)
        hrefs = _local_targets(page)
        assert hrefs
        for href in hrefs:
            url = urlparse(href)
            assert url.scheme == "file", f"{path.name} links off the machine: {href}"
            target = Path(unquote(url.path))
            assert target.is_file(), f"{path.name}: {href} does not resolve"
            if url.fragment:
                assert page.page.locator(f"#{url.fragment}").count() == 1, f"{path.name}: no #{url.fragment}"
        page.close()
    page = Page(browser, site / "models" / "bert.html")
    traces = page.page.eval_on_selector_all("a.trace", "links => links.map(a => a.href)")
    assert traces and all(t.endswith("/traces/bert.json") for t in traces)
    page.close()
    index = Page(browser, site / "index.html")
    index.page.click("#runs tbody tr >> nth=0 >> a")
    index.page.wait_for_selector("body[data-page='model'][data-ready='1']")
    assert index.page.locator("h1").inner_text() == "resnet18"
    index.close()


def test_filters_and_sorting(browser, site, scenario) -> None:
    page = Page(browser, site / "index.html")
    assert len(page.visible_rows()) == 12
    page.page.fill("#filter-text", "BER")
    assert {row[0] for row in page.visible_rows()} == {"bert"} and len(page.visible_rows()) == 4
    assert page.page.inner_text("#row-count") == "4 of 12 rows"
    page.page.fill("#filter-text", "")
    page.page.select_option("select.filter[aria-label='verdict']", "regression")
    regressed = page.visible_rows()
    assert len(regressed) == 4 and {row[0] for row in regressed} == {scenario.HOSTILE}
    page.page.select_option("select.filter[aria-label='mode']", "eval")
    assert len(page.visible_rows()) == 2
    page.page.select_option("select.filter[aria-label='verdict']", "new failure")
    assert {(row[0], row[2]) for row in page.visible_rows()} == {("resnet18", "eval")}
    page.page.select_option("select.filter[aria-label='verdict']", "")
    page.page.select_option("select.filter[aria-label='mode']", "")
    page.page.check("#filter-noisy")
    assert page.visible_rows() == []
    page.page.uncheck("#filter-noisy")
    page.page.click("#runs th:text-is('median ms')")
    medians = [row[8] for row in page.visible_rows()]
    numbers = [float(v) for v in medians if v]
    assert numbers == sorted(numbers) and medians[-4:] == [""] * 4  # the failed runs last
    page.page.click("#runs th:text-is('median ms')")
    numbers = [float(v) for v in (row[8] for row in page.visible_rows()) if v]
    assert numbers == sorted(numbers, reverse=True)
    page.close()


def test_hostile_model_name_is_text(browser, site, scenario) -> None:
    hostile = scenario.HOSTILE
    page = Page(browser, site / "index.html")
    names = page.page.eval_on_selector_all("#runs tbody tr td:first-child a", "links => links.map(a => a.textContent)")
    assert names.count(hostile) == 4
    assert page.page.locator("img").count() == 0
    page.close()
    page = Page(browser, site / "models" / f"{model_slug(hostile)}.html")
    assert page.page.locator("h1").text_content() == hostile and page.page.locator("img").count() == 0
    assert page.page.title() == f"{hostile}: history"
    page.close()
    page = Page(browser, site / "figures.html")
    ticks = page.page.eval_on_selector_all(".xtick text, .ytick text", "ts => ts.map(t => t.textContent)")
    assert any(t.startswith("<img src=x onerror=alert(1)>") for t in ticks)
    assert page.page.locator("img").count() == 0
    page.close()
    page = Page(browser, site / "models" / "resnet18.html")
    errors = page.page.eval_on_selector_all("td.err", "cells => cells.map(c => c.textContent)")
    assert scenario.ERROR in errors and page.page.locator("b").count() == 0
    page.close()


def test_environment_link_opens_its_row(browser, site) -> None:
    page = Page(browser, site / "models" / "bert.html")
    assert not page.page.locator("#env-1").is_visible()
    page.page.locator("details summary").first.click()  # the first configuration's runs
    page.page.locator("a[href='#env-1']").first.click()
    assert page.page.locator("#env-1").is_visible()
    page.close()
