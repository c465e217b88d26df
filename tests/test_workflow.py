"""The nightly workflow is valid YAML and calls only torchgauge commands and options that exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from torchgauge.cli import COMMANDS, cli

yaml = pytest.importorskip("yaml")

WORKFLOW = Path(__file__).resolve().parents[1] / ".github" / "workflows" / "nightly.yml"


def _run_scripts(doc: dict) -> list[str]:
    return [step["run"] for job in doc["jobs"].values() for step in job["steps"] if "run" in step]


def _torchgauge_calls(script: str) -> list[list[str]]:
    """Each `torchgauge ...` command of a shell script (continuations joined, pipes and $( ) split), as argv."""
    text = re.sub(r"\$\{\{[^}]*\}\}", "X", script.replace("\\\n", " "))  # ${{ expressions }} -> a plain word
    calls = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        command: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set("|&;()<>"):  # an operator ends the command
                if command and command[0] == "torchgauge":
                    calls.append(command[1:])
                command = []
            else:
                command.append(token)
    return calls


def test_workflow_is_valid_yaml_with_the_expected_jobs() -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert set(doc["jobs"]) == {"cpu", "gpu", "compare"}
    assert doc["jobs"]["compare"]["needs"] == ["cpu", "gpu"]
    scripts = "\n".join(_run_scripts(doc))
    assert "gh issue create" in scripts and "--pre torch" in scripts and "--shard" in scripts


def test_workflow_calls_only_existing_commands_and_options() -> None:
    calls = [c for s in _run_scripts(yaml.safe_load(WORKFLOW.read_text())) for c in _torchgauge_calls(s)]
    used = {c[0] for c in calls}
    assert {"run", "import", "export", "compare"} <= used
    assert _torchgauge_calls("torchgauge run a --shard 1/4 || test $? -eq 1") == [["run", "a", "--shard", "1/4"]]
    for argv in calls:
        name = argv[0]
        assert name in COMMANDS, f"workflow calls unknown command torchgauge {name}"
        command = cli.get_command(click.Context(cli), name)
        assert command is not None, f"torchgauge {name} is listed but not importable"
        # click's own parser, without value conversion (paths need not exist here):
        # unknown options and missing option values raise
        parser = command.make_parser(click.Context(command, info_name=name))
        opts, extra, _ = parser.parse_args(list(argv[1:]))
        assert not extra, f"torchgauge {name}: unexpected arguments {extra}"
        missing = [p.name for p in command.params if isinstance(p, click.Argument) and p.required and p.name not in opts]
        assert not missing, f"torchgauge {name}: missing argument(s) {missing}"
