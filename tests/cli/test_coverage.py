from __future__ import annotations

import json

from .conftest import PLANTED


def test_coverage_command_reports_and_survives_failures(cli, tmp_path) -> None:
    out = tmp_path / "cov.json"
    code, stdout, err = cli(
        "coverage",
        "planted_ok",
        "planted_eval_only",
        "planted_raises",
        "--model-file",
        PLANTED,
        "--output",
        str(out),
        "--quiet",
    )
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert set(doc["models"]) == {"planted_ok", "planted_eval_only"}
    ok = doc["models"]["planted_ok"]
    assert ok["modes"] == ["train", "eval"]
    assert "torch.Tensor.backward" in ok["apis"] and "aten::addmm" in ok["ops"]
    assert "torch.Tensor.backward" not in doc["models"]["planted_eval_only"]["apis"]
    assert [f["model"] for f in doc["failures"]] == ["planted_raises", "planted_raises"]
    assert doc["summary"]["apis"]["unique"]["planted_ok"]
    assert "overridable APIs" in stdout and "planted_raises" in err


def test_coverage_rejects_bad_target(cli) -> None:
    code, _, err = cli("coverage", "--target", "150%")
    assert code == 2 and "accepted: a fraction in (0, 1]" in err
