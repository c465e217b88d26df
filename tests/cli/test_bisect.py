"""``torchgauge bisect`` argument handling: every mistake is one line naming what is accepted.

The searches themselves are tested in tests/test_bisect.py (git, versions, real timing).
"""

from __future__ import annotations

import pytest

from .conftest import PLANTED


@pytest.mark.parametrize(
    "args, message",
    [
        (["--good", "a", "--bad", "b", "--build", "true"], "missing --repo"),
        (["--versions", "torch==2.12.0,torch==2.13.0", "--good", "a"], "--versions cannot be combined with --good"),
        (["--versions", "torch==2.12.0"], "at least 2 entries"),
        (["--versions", "torch==2.12.0,./nope.whl"], "no such file"),
        (["--versions", "a==1,b==2", "--threshold", "lots"], "accepted: a positive percentage"),
        (["--versions", "a==1,b==2", "--fastest", "0"], "accepted: a fraction in (0, 1]"),
        (["--versions", "a==1,b==2", "--alpha", "2"], "accepted: 0 < alpha < 1"),
    ],
)
def test_bad_arguments_give_one_line_errors(cli, args, message):
    code, out, err = cli("bisect", "planted_ok", "--model-file", PLANTED, *args)
    assert code != 0
    assert message in err
    assert "Traceback" not in err


def test_unknown_model_names_close_matches(cli):
    code, _, err = cli("bisect", "planted_okk", "--model-file", PLANTED, "--versions", "a==1,b==2")
    assert code != 0 and "no model matches 'planted_okk'" in err and "planted_ok" in err


def test_git_range_errors(cli, tmp_path):
    code, _, err = cli(
        "bisect",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--repo",
        str(tmp_path),
        "--good",
        "HEAD~1",
        "--bad",
        "HEAD",
        "--build",
        "true",
    )
    assert code != 0 and "is not a commit of" in err
