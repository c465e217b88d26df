"""The dashboard's data and HTML, without a browser: escaping, verdicts, files written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("plotly", reason="the dashboard needs plotly (pip install plotly)")

from torchgauge.report.site import build_site, build_site_from_results
from torchgauge.report.site.data import index_verdict, latest_run, model_history, model_slug
from torchgauge.report.site.html import escape_html, script_json
from torchgauge.results.store import Store


def test_escape_html_and_script_json() -> None:
    assert escape_html('<a href="x">&\'') == "&lt;a href=&quot;x&quot;&gt;&amp;&#x27;"
    assert escape_html(None) == "" and escape_html(3) == "3"
    text = script_json({"name": "</script><!-- \u2028\u2029 &", "nan": float("nan"), "inf": float("inf")})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == {"name": "</script><!-- \u2028\u2029 &", "nan": None, "inf": None}


def test_model_slug_keeps_plain_names_and_makes_others_safe(scenario) -> None:
    assert model_slug("resnet18") == "resnet18" and model_slug("hf_T5.base-v1") == "hf_T5.base-v1"
    for hostile in (scenario.HOSTILE, "../../etc/passwd", "..", "a/b", "a b"):
        slug = model_slug(hostile)
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", slug) and not slug.startswith(".")
    assert model_slug("a/b") != model_slug("a_b") and model_slug("a/b") != model_slug("a:b")


def test_index_verdict_splits_unchanged_by_the_threshold() -> None:
    assert index_verdict("regression", 0.2, 0.07) == "regression"
    assert index_verdict("improvement", -0.2, 0.07) == "improvement"
    assert index_verdict("unchanged", 0.08, 0.07) == "inconclusive"
    assert index_verdict("unchanged", -0.07, 0.07) == "inconclusive"
    assert index_verdict("unchanged", 0.01, 0.07) == "same" and index_verdict("unchanged", None, 0.07) == "same"


@pytest.fixture
def db(scenario, tmp_path) -> Path:
    return scenario.write_site_history(tmp_path / "h.sqlite", tmp_path / "traces" / "bert.json")


def test_latest_run_judges_against_the_machines_previous_run(db, scenario) -> None:
    HOSTILE, NIGHTS = scenario.HOSTILE, scenario.NIGHTS
    with Store(db, create=False) as store:
        latest = latest_run(store, machine="m1")
        newest = latest_run(store)
    assert latest.suite.id == NIGHTS and latest.previous.id == NIGHTS - 1
    verdicts = {(r.model, r.mode, r.backend): r.verdict for r in latest.rows}
    assert verdicts[(HOSTILE, "eval", "eager")] == "regression" and verdicts[("bert", "eval", "eager")] == "same"
    assert verdicts[("resnet18", "train", "inductor")] == "new failure"
    failed = next(r for r in latest.rows if r.model == "resnet18")
    assert failed.error == scenario.ERROR and failed.median_ms is None
    ok = next(r for r in latest.rows if r.model == "bert")
    assert ok.ci_low < ok.median_ms < ok.ci_high and ok.noisy is False and ok.change == pytest.approx(0.0, abs=0.05)
    assert newest.suite.machine_fingerprint == "m2" and newest.previous is None
    assert {r.verdict for r in newest.rows} == {"no previous"}


def test_model_history_has_steps_intervals_and_environments(db, scenario) -> None:
    NIGHTS = scenario.NIGHTS
    with Store(db, create=False) as store:
        history = model_history(store, "bert")
    (eager_eval,) = [s for s in history.metrics["time"] if s.label == "eval/cpu/fp32/eager"]
    assert len(eager_eval.values) == NIGHTS and all(
        lo < v < hi for lo, v, hi in zip(eager_eval.low, eager_eval.values, eager_eval.high)
    )
    (step,) = eager_eval.steps
    assert (
        step["position"] == scenario.STEP_NIGHT
        and step["kind"] == "regression"
        and step["change"] == pytest.approx(0.3, abs=0.03)
    )
    assert len(history.envs) == NIGHTS + 1  # one per night on m1, plus machine m2
    points = history.points["eval/cpu/fp32/eager"]
    assert points[0]["traces"] and points[0]["traces"][0].endswith("bert.json")
    assert history.envs[points[0]["env"]]["hostname"] == "nightly-1"


def test_build_site_writes_plotly_once_and_escapes_every_name(db, scenario, tmp_path) -> None:
    HOSTILE = scenario.HOSTILE
    with Store(db, create=False) as store:
        built = build_site(store, tmp_path / "site", coverage=scenario.COVERAGE, machine="m1")
    site = tmp_path / "site"
    assert built.models == 3 and built.pages == 5
    assert (site / "assets" / "plotly.min.js").stat().st_size > 1_000_000
    pages = list(site.rglob("*.html"))
    assert len(pages) == 5
    for page in pages:
        text = page.read_text()
        assert len(text) < 500_000, f"{page.name}: plotly inlined?"
        assert "<img" not in text and "<b>bold" not in text
        scripts = re.findall(r"<script[^>]*>(.*?)</script>", text, flags=re.S)
        assert all("\u2028" not in body for body in scripts), f"{page.name}: a raw U+2028 inside a script"
        assert text.count("</script>") == text.count("<script"), f"{page.name}: a string closed a script element"
        assert not re.search(r"(src|href)=\"(https?:)?//", text), f"{page.name}: a network reference"
    index = (site / "index.html").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;" in index
    hostile_page = site / "models" / f"{model_slug(HOSTILE)}.html"
    assert f'href="models/{model_slug(HOSTILE)}.html"' in index and hostile_page.is_file()
    bert = (site / "models" / "bert.html").read_text()
    assert 'href="../../traces/bert.json"' in bert  # relative: the site and the traces move together
    assert "../assets/plotly.min.js" in bert and "../assets/dashboard.js" in bert


def test_missing_trace_is_shown_not_linked(scenario, tmp_path) -> None:
    db = scenario.write_site_history(tmp_path / "h.sqlite", tmp_path / "bert.json", second_machine=False)
    (tmp_path / "bert.json").unlink()
    with Store(db, create=False) as store:
        build_site(store, tmp_path / "site")
    bert = (tmp_path / "site" / "models" / "bert.html").read_text()
    assert 'class="missing"' in bert and 'class="trace"' not in bert


def test_build_site_from_results_files(scenario, tmp_path) -> None:
    db = scenario.write_site_history(tmp_path / "h.sqlite", tmp_path / "t.json", second_machine=False)
    files = []
    with Store(db, create=False) as store:
        for suite in store.suites():
            files.append(tmp_path / f"night{suite.id}.json")
            store.load(suite.id).write(files[-1])
    built = build_site_from_results(files, tmp_path / "site")
    assert built.models == 3
    index = (tmp_path / "site" / "index.html").read_text()
    assert index.count("<tr>") == 1 + 3 * 2 * 2 and "regression" in index


def test_figures_summarise_coverage_recorded_by_runs(tmp_path) -> None:
    from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord

    def run(model: str, apis: list[str], ops: list[str]) -> RunRecord:
        return RunRecord(
            RunConfig(model, mode="eval", metrics=("coverage",)),
            "ok",
            domain="vision",
            metrics={"coverage": {"apis": apis, "ops": ops, "modules": ["Conv2d"]}},
        )

    runs = [
        run("resnet18", ["torch.nn.functional.conv2d", "torch.Tensor.add", "not.an.api"], ["aten::conv2d"]),
        run("alexnet", ["torch.nn.functional.conv2d", "torch.nn.functional.relu"], ["aten::relu", "aten::conv2d"]),
    ]
    path = tmp_path / "cov.json"
    ResultsFile(env={"machine_fingerprint": "m1"}, runs=runs).write(path)
    build_site_from_results([path], tmp_path / "site")
    page = (tmp_path / "site" / "figures.html").read_text()
    data = json.loads(re.search(r'id="page-data">(.*?)</script>', page).group(1))
    cov = data["coverage"]
    assert cov["apis"]["suite"] == 3  # the two functional ops and Tensor.add; "not.an.api" is outside the universe
    assert cov["ops"]["suite"] == 2 and cov["per_domain"]["vision"] == {"models": 2, "apis": 3, "ops": 2}
    assert [g["model"] for g in cov["greedy"]] == ["alexnet", "resnet18"]  # a tie at 2 new APIs: by name

    ResultsFile(env={}, runs=[run("<no such model>", ["torch.add"], [])]).write(path)
    build_site_from_results([path], tmp_path / "site2")
    page = (tmp_path / "site2" / "figures.html").read_text()
    assert "cannot summarise the recorded coverage: unknown model &#x27;&lt;no such model&gt;&#x27;" in page
