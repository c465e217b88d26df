from __future__ import annotations

from pathlib import Path

import pytest

from torchgauge.cli import main

PLANTED = str(Path("tests/fixtures/planted_models.py").resolve())


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""

    def invoke(*args: str):
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return invoke
