"""Markdown and JSON reports of a comparison, from hand-made findings."""

from __future__ import annotations

import json

from torchgauge.compare.matching import Unmatched
from torchgauge.compare.regression import FINDING_KEYS, Comparison, Finding, StatusChange
from torchgauge.report.regression import comparison_json, format_value, render_markdown
from torchgauge.results.schema import RunConfig


def _cmp(**changes) -> Comparison:
    reg = Finding(
        RunConfig("resnet50", mode="train", batch_size=32),
        "time_ms",
        100.0,
        112.5,
        0.125,
        0.0004,
        "regression",
        10,
        10,
        detail={"signal": "cpu"},
    )
    mem = Finding(RunConfig("bert", mode="eval"), "cpu_peak_mb", 1000.0, 1200.0, 0.2, None, "regression")
    ops = Finding(
        RunConfig("qmodel", mode="eval"),
        "op_counts",
        100.0,
        130.0,
        0.3,
        None,
        "regression",
        detail={"ops": {"aten::copy_": {"kind": "added", "base": 0, "new": 30}}},
    )
    imp = Finding(RunConfig("gpt2", mode="eval"), "time_ms", 50.0, 40.0, -0.2, 1e-5, "improvement")
    fields = dict(
        regressions=[reg, mem, ops],
        improvements=[imp],
        unchanged=[],
        new_failures=[StatusChange(RunConfig("dlrm", mode="train"), "ok", "error", "RuntimeError: bad | pipe")],
        fixes=[StatusChange(RunConfig("t5", mode="eval"), "timeout", "ok")],
        unmatched=[
            Unmatched("vit", "eval", "vit/eval/cpu/fp32/eager/bs=default", "missing", "missing in new", side="new")
        ],
        threshold=0.07,
        alpha=0.01,
        correction="holm",
        base_env={"torch_version": "2.13.0", "torch_git_version": "aaa", "hostname": "h"},
        new_env={"torch_version": "2.14.0.dev20261123", "torch_git_version": "bbb", "hostname": "h"},
    )
    fields.update(changes)
    return Comparison(**fields)


def test_markdown_sections_and_rows() -> None:
    md = render_markdown(_cmp(), base_label="nightly-1122", new_label="nightly-1123")
    first = md.splitlines()[0]
    assert first == "# torchgauge: regressions found (nightly-1123 vs nightly-1122)"
    assert "**3 regression(s), 1 improvement(s), 1 new failure(s), 1 fix(es), 0 inconclusive**" in md
    assert "threshold 7.0%, alpha 0.01 after holm correction" in md
    assert "| model | config | metric | signal | base | new | change | p-value |" in md
    assert (
        "| resnet50 | train/cpu/fp32/eager bs=32 | time_ms | per-step process CPU time, rank test | 100 ms "
        "| 112.5 ms | +12.5% | 0.0004 |"
    ) in md
    assert (
        "| bert | eval/cpu/fp32/eager | cpu_peak_mb | CPU mem, process peak over a spread floor | 1,000.0 MiB "
        "| 1,200.0 MiB | +20.0% | - |"
    ) in md
    assert "| qmodel | eval/cpu/fp32/eager | op_counts | ATen operators per step, deterministic count | 100 |" in md
    assert "| gpt2 | eval/cpu/fp32/eager | time_ms | time, rank test | 50 ms | 40 ms | -20.0% | 1e-05 |" in md
    # which signal flagged what, above the tables: the reader sees a noise-free count at once
    assert (
        "**Regressions flagged by:** 1 by ATen operators per step, deterministic count; "
        "1 by CPU mem, process peak over a spread floor; 1 by per-step process CPU time, rank test."
    ) in md
    assert "`aten::copy_` 0 -> 30" in md
    assert "RuntimeError: bad \\| pipe" in md  # table cells escape pipes
    assert "| torch_version | 2.13.0 | 2.14.0.dev20261123 |" in md
    assert "Not compared (1)" in md and "missing in new" in md
    sections = [ln for ln in md.splitlines() if ln.startswith("## ")]
    assert sections == ["## Regressions", "## Improvements", "## New failures and fixes", "## Environments"]


def test_markdown_when_nothing_changed() -> None:
    md = render_markdown(_cmp(regressions=[], improvements=[], new_failures=[], fixes=[], unmatched=[]))
    assert md.startswith("# torchgauge: no regression (new vs base)")
    assert md.count("None.") == 3 and "Not compared" not in md


def test_json_entries_have_the_contract_keys_first() -> None:
    doc = json.loads(comparison_json(_cmp(), base_label="a.json", new_label="b.json"))
    assert (doc["base"], doc["new"], doc["threshold"], doc["correction"]) == ("a.json", "b.json", 0.07, "holm")
    for entry in doc["regressions"] + doc["improvements"]:
        assert list(entry)[: len(FINDING_KEYS)] == list(FINDING_KEYS)
    assert doc["regressions"][0] == {
        **{k: doc["regressions"][0][k] for k in FINDING_KEYS},
        "batch_size": 32,
        "verdict": "regression",
        "n_base": 10,
        "n_new": 10,
        "detail": {"signal": "cpu"},
    }
    assert doc["regressions"][0]["p_value"] == 0.0004 and doc["regressions"][1]["p_value"] is None
    assert doc["new_failures"][0]["new_status"] == "error" and doc["fixes"][0]["base_status"] == "timeout"


def test_json_is_strict_for_infinite_changes() -> None:
    inf = Finding(RunConfig("m"), "op_counts", 0.0, 5.0, float("inf"), None, "regression")
    doc = json.loads(comparison_json(_cmp(regressions=[inf])))
    assert doc["regressions"][0]["change"] is None


def test_format_value_units() -> None:
    assert format_value("time_ms", 12.3456) == "12.35 ms"
    assert format_value("gpu_peak_mb", 2048.0) == "2,048.0 MiB"
    assert format_value("instructions", 1234567.0) == "1,234,567"
    assert format_value("time_ms", None) == "-"
