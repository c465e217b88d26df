from __future__ import annotations

import json

import pytest


def test_scale_sweep_runs_grid_and_fits(cli, tmp_path) -> None:
    out, runs, plot = tmp_path / "fit.json", tmp_path / "runs.json", tmp_path / "scale.png"
    code, stdout, err = cli(
        "scale",
        "dlrm",
        "--vary",
        "embedding_dim=4,8,16",
        "--mode",
        "eval",
        "--size",
        "smoke",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--output",
        str(out),
        "--results",
        str(runs),
        "--plot",
        str(plot),
        "--quiet",
    )
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["axes"] == {"embedding_dim": [4, 8, 16]}
    assert [(p["embedding_dim"], p["status"]) for p in doc["points"]] == [(4, "ok"), (8, "ok"), (16, "ok")]
    fits = {f["metric"]: f for f in doc["fits"]}
    assert {"time_ms", "throughput", "cpu_peak_mb"} <= set(fits)
    assert fits["time_ms"]["xs"] == [4, 8, 16] and fits["time_ms"]["fit"]["n"] == 3
    assert plot.stat().st_size > 0
    assert len(json.loads(runs.read_text())["runs"]) == 3
    assert "scaling fits" in stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (("dlrm", "--vary", "embedding_dim"), "NAME=V1,V2"),
        (("dlrm", "--vary", "embedding_dim=a,b"), "must be numbers"),
        (("dlrm", "--vary", "batch_size=0,2"), "must be > 0"),
        (("dlrm", "--vary", "batch_size=1.5,2"), "integers"),
        (("dlrm", "--vary", "x=1,2", "--vary", "x=3,4"), "varied twice"),
        (("no_such_model", "--vary", "x=1,2"), "no_such_model"),
    ],
)
def test_scale_rejects_bad_input_in_one_line(cli, args, message: str) -> None:
    code, _, err = cli("scale", *args, "--size", "smoke")
    assert code == 2
    assert message in err
