"""How big is the dashboard of a long nightly history, and how fast does its index become usable?

Stores a synthetic history (``tests/fixtures/history_factory.py``: default 170 models x 2
modes x 90 nights, 10 samples per run, a CPU breakdown per run, 10% of the models with a
step), builds the site with ``torchgauge.report.site.build_site``, then opens it in headless
Chromium through Playwright and reports:

* the site's total size (the budget is :data:`SIZE_BUDGET_MB`);
* index ready: ms from navigation start to the ``dashboard-ready`` performance mark the
  page's script sets once sorting and filters are wired (budget :data:`READY_BUDGET_MS`),
  the median over ``--loads`` fresh page loads;
* a sort of the whole table and a filter, timed inside the page;
* a model page and the figures page ready (plotly parses its bundle there).

Usage::

    python benchmarks/dashboard_size.py                      # the issue's 170 x 2 x 90
    python benchmarks/dashboard_size.py --models 20 --nights 10 --keep /tmp/site
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from torchgauge.report.site import build_site
from torchgauge.results.store import Store

SIZE_BUDGET_MB = 50.0
READY_BUDGET_MS = 2000.0
CHROMIUM = "/usr/bin/chromium"
_FACTORY = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "history_factory.py"


def _factory():
    spec = importlib.util.spec_from_file_location("history_factory", _FACTORY)
    module = importlib.util.module_from_spec(spec)
    sys.modules["history_factory"] = module
    spec.loader.exec_module(module)
    return module


def _site_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _ready_ms(browser, url: str) -> float:
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=60_000)
    ready = page.evaluate("performance.getEntriesByName('dashboard-ready')[0].startTime")
    page.close()
    if errors:
        raise RuntimeError(f"{url}: JavaScript errors: {errors}")
    return float(ready)


def _interaction_ms(browser, url: str) -> tuple[float, float]:
    """(sort the table by median time, filter it by a substring), each timed inside the page."""
    page = browser.new_page()
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']")
    sort = page.evaluate("""() => { const th = [...document.querySelectorAll('#runs th')]
        .find(h => h.textContent.startsWith('median')); const t0 = performance.now(); th.click();
        return performance.now() - t0; }""")
    filt = page.evaluate("""() => { const box = document.getElementById('filter-text'); box.value = 'model_01';
        const t0 = performance.now(); box.dispatchEvent(new Event('input')); return performance.now() - t0; }""")
    page.close()
    return float(sort), float(filt)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=int, default=170)
    parser.add_argument("--nights", type=int, default=90)
    parser.add_argument("--loads", type=int, default=5, help="fresh page loads of the index measured")
    parser.add_argument("--keep", type=Path, default=None, help="build the site here and keep it")
    args = parser.parse_args()
    factory = _factory()
    models = [f"model_{i:03d}" for i in range(args.models)]
    spec = factory.HistorySpec(
        models=models,
        nights=args.nights,
        breakdown=True,
        stepped={m: (args.nights * 2 // 3, 0.15) for m in models[::10]},
    )
    with tempfile.TemporaryDirectory(prefix="dashboard-bench-") as tmp:
        site = args.keep or Path(tmp) / "site"
        if site.exists():
            shutil.rmtree(site)
        with Store(Path(tmp) / "history.sqlite") as store:
            t0 = time.perf_counter()
            factory.write_history(store, spec)
            stored_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            built = build_site(store, site)
            build_s = time.perf_counter() - t0
        size_mb = _site_bytes(site) / 1e6
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            index = (site / "index.html").as_uri()
            loads = [_ready_ms(browser, index) for _ in range(args.loads)]
            sort_ms, filter_ms = _interaction_ms(browser, index)
            model_ms = _ready_ms(browser, (site / "models" / f"{models[0]}.html").as_uri())
            figures_ms = _ready_ms(browser, (site / "figures.html").as_uri())
            browser.close()
    ready = statistics.median(loads)
    print(
        f"history: {args.models} models x 2 modes x {args.nights} nights = {args.models * 2 * args.nights} runs "
        f"(stored in {stored_s:.1f} s)"
    )
    print(f"site: {built.pages} pages, {size_mb:.1f} MB (budget {SIZE_BUDGET_MB:.0f} MB), built in {build_s:.1f} s")
    print(
        f"index ready: median {ready:.0f} ms over {args.loads} loads (min {min(loads):.0f}, max {max(loads):.0f}; "
        f"budget {READY_BUDGET_MS:.0f} ms); sort {sort_ms:.0f} ms, filter {filter_ms:.0f} ms"
    )
    print(f"model page ready {model_ms:.0f} ms, figures page ready {figures_ms:.0f} ms")
    ok = size_mb < SIZE_BUDGET_MB and ready < READY_BUDGET_MS
    print("within budget" if ok else "OVER BUDGET")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
