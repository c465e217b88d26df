"""Deterministic-count comparison: plain thresholds and operator-count diffs."""

from __future__ import annotations

import pytest

from torchgauge.stats.deterministic import (
    COUNT_THRESHOLD,
    INSTRUCTIONS_THRESHOLD,
    OpCountChange,
    compare_counts,
    op_count_changes,
)


def test_compare_counts_threshold_in_both_directions() -> None:
    up = compare_counts(1_000_000, 1_100_000, threshold=0.07)
    assert up.verdict == "regression" and up.change == pytest.approx(0.10)
    assert up.p_value is None and not up.tested  # no rank test for counts
    assert compare_counts(1_000_000, 900_000, threshold=0.07).verdict == "improvement"
    assert compare_counts(1_000_000, 1_050_000, threshold=0.07).verdict == "unchanged"


def test_compare_counts_default_threshold_is_the_named_constant() -> None:
    base = 10_000
    assert compare_counts(base, base * (1 + 2 * COUNT_THRESHOLD)).verdict == "regression"
    assert compare_counts(base, base * (1 + COUNT_THRESHOLD / 2)).verdict == "unchanged"
    assert compare_counts(base, base * 1.03, threshold=INSTRUCTIONS_THRESHOLD).verdict == "regression"


def test_compare_counts_identical_and_zero() -> None:
    assert compare_counts(42, 42).verdict == "unchanged"
    assert compare_counts(0, 0).verdict == "unchanged"
    assert compare_counts(0, 5).verdict == "regression"  # FLOPs appearing from nothing


def test_compare_counts_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="base count"):
        compare_counts(-1, 5)
    with pytest.raises(ValueError, match="new count"):
        compare_counts(5, float("nan"))
    with pytest.raises(ValueError, match="threshold"):
        compare_counts(5, 5, threshold=-0.1)


def test_op_count_changes_added_removed_changed_sorted_by_size() -> None:
    base = {"aten::mm": 10, "aten::add": 4, "aten::relu": 2, "aten::copy_": 1}
    new = {"aten::mm": 10, "aten::add": 8, "aten::relu": 2, "aten::_to_copy": 30}
    assert op_count_changes(base, new) == [
        OpCountChange("aten::_to_copy", "added", 0, 30),
        OpCountChange("aten::add", "changed", 4, 8),
        OpCountChange("aten::copy_", "removed", 1, 0),
    ]
    assert op_count_changes(base, new)[0].delta == 30


def test_op_count_changes_identical_is_empty() -> None:
    counts = {"aten::mm": 3, "aten::relu": 1}
    assert op_count_changes(counts, dict(counts)) == []
    assert op_count_changes({}, {}) == []
