"""The generic grouped log-bar chart: files written, bad input rejected with one-line errors."""

from __future__ import annotations

import pytest

from torchgauge.report.charts import ChartError, LogBarPanel, grouped_log_bars


def test_writes_svg_with_every_category(tmp_path) -> None:
    panels = [
        LogBarPanel("train", ["alpha_model", "beta_model"], {"time": [0.5, 2.0], "memory": [1.5, None]}),
        LogBarPanel("eval", ["gamma_model"], {"time": [1.0]}),
    ]
    out = grouped_log_bars(panels, tmp_path / "sub" / "c.svg", ylabel="new / old", title="demo")
    text = out.read_text()
    assert "<svg" in text
    for name in ("alpha_model", "beta_model", "gamma_model", "new / old", "demo"):
        assert name in text


@pytest.mark.parametrize(
    "panels, path, message",
    [
        ([LogBarPanel("p", ["a"], {"t": [1.0]})], "c.jpg", "accepted: .png, .svg, .pdf"),
        ([LogBarPanel("p", [], {})], "c.png", "nothing to chart"),
        ([LogBarPanel("p", ["a", "b"], {"t": [1.0]})], "c.png", "has 1 values for 2 categories"),
    ],
)
def test_bad_input(tmp_path, panels, path, message) -> None:
    with pytest.raises(ChartError, match=message):
        grouped_log_bars(panels, tmp_path / path)


@pytest.mark.parametrize("lo, hi", [(0.136, 2.3), (0.8, 1.25), (0.01, 100.0), (1.2, 4.0)])
def test_spaced_ticks_keep_reference_and_never_crowd(lo: float, hi: float) -> None:
    import math

    from torchgauge.report.charts import _MAX_TICKS, spaced_ticks

    ticks = spaced_ticks(lo, hi, 1.0)
    assert all(lo <= t <= hi for t in ticks)
    assert (1.0 in ticks) == (lo <= 1.0 <= hi)
    gaps = [math.log(b / a) for a, b in zip(ticks, ticks[1:])]
    assert all(g >= math.log(hi / lo) / _MAX_TICKS - 1e-12 for g in gaps)
    assert len(ticks) >= 3


def test_spaced_ticks_thin_the_crowded_middle() -> None:
    from torchgauge.report.charts import spaced_ticks

    # The eval panel of a real compare-backends chart: 0.8, 0.9, 1.1 and 1.25 overlapped.
    assert spaced_ticks(0.136, 2.3, 1.0) == [0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0]
