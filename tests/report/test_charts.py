"""The generic grouped log-bar chart: files written, bad input rejected with one-line errors."""

from __future__ import annotations

import pytest

from torchgauge.report.charts import ChartError, LogBarPanel, grouped_log_bars


def test_writes_svg_with_every_category(tmp_path) -> None:
    panels = [LogBarPanel("train", ["alpha_model", "beta_model"], {"time": [0.5, 2.0], "memory": [1.5, None]}),
              LogBarPanel("eval", ["gamma_model"], {"time": [1.0]})]
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
