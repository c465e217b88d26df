"""The trial-outcome classifier of benchmarks/bisect_accuracy.py (a pure function of a report)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "bisect_accuracy.py"
_SPEC = importlib.util.spec_from_file_location("bisect_accuracy", _PATH)
bisect_accuracy = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bisect_accuracy)

PLANTED, OTHER, THIRD = "a" * 40, "b" * 40, "c" * 40


def _report(reason: str | None, *commits: str) -> dict:
    culprits = [] if reason is None else [{"reason": reason, "candidates": [{"commit": c} for c in commits]}]
    return {"outcomes": [{"status": "x", "culprits": culprits}]}


@pytest.mark.parametrize(
    ("report", "outcome"),
    [
        (_report("found", PLANTED), "right"),
        (_report("found", OTHER), "wrong"),
        (_report("uncertain", OTHER, PLANTED), "uncertain, planted among candidates"),
        (_report("skipped", PLANTED, THIRD), "uncertain, planted among candidates"),
        (_report("uncertain", OTHER, THIRD), "uncertain, planted missing"),
        (_report(None), "not found"),
        ({"outcomes": []}, "not found"),
    ],
)
def test_classify_trial(report: dict, outcome: str) -> None:
    assert bisect_accuracy.classify_trial(report, PLANTED) == outcome
    assert outcome in bisect_accuracy.OUTCOMES
