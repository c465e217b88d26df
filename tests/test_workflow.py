"""The nightly workflow is valid YAML and calls only torchgauge commands and options that exist."""

from __future__ import annotations

import json
import re
import shlex
import shutil
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
    assert set(doc["jobs"]) == {"cpu", "cpu-instructions", "gpu", "compare"}
    assert doc["jobs"]["compare"]["needs"] == ["cpu", "cpu-instructions", "gpu"]
    assert doc["jobs"]["compare"]["strategy"]["matrix"]["kind"] == ["cpu", "cpu-instructions", "cuda"]
    scripts = "\n".join(_run_scripts(doc))
    assert "gh issue create" in scripts and "--pre torch" in scripts and "--shard" in scripts


def test_cpu_shards_run_enough_interleaved_rounds_for_the_suite() -> None:
    """Rounds let compare test process medians; a Holm-corrected test over every CPU configuration
    of the suite (two modes per model at most) can reach alpha 0.01 only with ``rounds_needed`` of them."""
    from torchgauge.registry import list_models
    from torchgauge.stats.compare import rounds_needed

    doc = yaml.safe_load(WORKFLOW.read_text())
    env = doc["env"]
    # the suite's own models only: other tests register throwaway models in this process
    assert int(env["ROUNDS"]) >= rounds_needed(2 * len(list_models(module="torchgauge.models.*")), 0.01)
    assert int(env["REPEAT"]) >= 1 and int(env["WARMUP"]) >= 1
    cpu_run = next(s["run"] for s in doc["jobs"]["cpu"]["steps"] if s.get("name") == "Run shard")
    assert '--rounds "$ROUNDS" --repeat "$REPEAT" --warmup "$WARMUP" --metrics "$CPU_METRICS"' in cpu_run
    compare = next(s["run"] for s in doc["jobs"]["compare"]["steps"] if s.get("id") == "compare")
    assert "--time-signal auto" in compare


def test_cpu_shards_collect_the_noise_free_signals() -> None:
    """Besides time and the process peak, every deterministic metric the registry knows: instructions
    in their own job (smoke size, valgrind), the others in the timed shards; compare judges each by
    its threshold."""
    from torchgauge.harness.metrics import TIMED_PASS_METRICS, collected_once, list_metrics

    doc = yaml.safe_load(WORKFLOW.read_text())
    metrics = doc["env"]["CPU_METRICS"].split(",")
    assert set(TIMED_PASS_METRICS) <= set(metrics)
    assert {m for m in list_metrics() if collected_once(m)} - set(metrics) == {"instructions"}
    assert {"tensor_memory", "op_counts", "flops"} <= set(metrics)
    counting = next(s["run"] for s in doc["jobs"]["cpu-instructions"]["steps"] if s.get("name") == "Count instructions")
    assert "--size smoke" in counting and "--metrics instructions" in counting and "--mode both" in counting


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
        missing = [
            p.name for p in command.params if isinstance(p, click.Argument) and p.required and p.name not in opts
        ]
        assert not missing, f"torchgauge {name}: missing argument(s) {missing}"


# --- executing the workflow's shell --------------------------------------------------------
# Every `run:` script is executed with the shell GitHub uses, in a scratch workspace, with
# `torchgauge` on PATH from this checkout, `python -m pip` and `gh` replaced by stubs that record
# their arguments, and a tiny model pattern through the dispatch input: a shell mistake (an
# unquoted glob, a wrong exit-code test) fails here instead of on every nightly shard.

GITHUB_SHELL = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]  # GitHub's `shell: bash` on Linux
# A dispatch input with a glob character: a file of that name sits in the workspace, so a
# script that lets the shell expand the pattern would pass the file name to torchgauge.
DISPATCH_MODELS = "dagmm_kd*"
SRC = Path(__file__).resolve().parents[1] / "src"


def _shims(bin_dir: Path, log: Path) -> None:
    import sys

    bin_dir.mkdir()
    scripts = {
        "torchgauge": f'#!/bin/sh\nPYTHONPATH="{SRC}" exec "{sys.executable}" -m torchgauge.cli "$@"\n',
        "python": (
            f'#!/bin/sh\nif [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "pip $*" >> "{log}"; exit 0; fi\n'
            f'exec "{sys.executable}" "$@"\n'
        ),
        "gh": f'#!/bin/sh\n{{ printf "gh"; for a in "$@"; do printf "\\t%s" "$a"; done; echo; }} >> "{log}"\n',
        "sudo": f'#!/bin/sh\necho "sudo $*" >> "{log}"\n',  # apt-get: the machine's own valgrind, or none
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)


def _expressions(text: str, context: dict[str, str]) -> str:
    """Replace each ``${{ expr }}`` by its value in ``context`` (an unknown expression fails the test)."""

    def value(match: re.Match) -> str:
        expr = match.group(1).strip()
        assert expr in context, (
            f"the workflow test does not know the expression ${{{{ {expr} }}}}; add it to the context"
        )
        return context[expr]

    return re.sub(r"\$\{\{(.*?)\}\}", value, text)


def _condition(expr: str | None, outputs: dict[str, dict[str, str]], context: dict[str, str]) -> bool:
    """A step's ``if:``: ``steps.<id>.outputs.<name> == '<value>'`` or absent."""
    if expr is None:
        return True
    match = re.fullmatch(r"\s*steps\.(\w+)\.outputs\.(\w+)\s*==\s*'([^']*)'\s*", expr)
    assert match, f"the workflow test cannot evaluate the step condition {expr!r}"
    step, name, wanted = match.groups()
    return outputs.get(step, {}).get(name) == wanted


class _Workflow:
    def __init__(self, doc: dict, tmp: Path) -> None:
        self.doc, self.tmp = doc, tmp
        self.workspace = tmp / "workspace"
        self.workspace.mkdir()
        (self.workspace / "dagmm_kdd_not_a_model").write_text("")  # what an unquoted glob would pick up
        self.log = tmp / "calls.log"
        _shims(tmp / "bin", self.log)
        self.executed: set[tuple[str, str]] = set()

    def context(self, matrix: dict[str, str]) -> dict[str, str]:
        ctx = {f"matrix.{k}": str(v) for k, v in matrix.items()}
        ctx.update(
            {
                "github.event.inputs.models || '*'": DISPATCH_MODELS,
                "github.workspace": str(self.workspace),
                "github.token": "test-token",
            }
        )
        return ctx

    def env(self, job: dict, context: dict[str, str], output_file: Path) -> dict[str, str]:
        import os

        env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHGAUGE", "GITHUB", "PYTHONPATH"))}
        env.update(
            {k: _expressions(str(v), context) for k, v in {**self.doc.get("env", {}), **job.get("env", {})}.items()}
        )
        env.update(
            PATH=f"{self.tmp / 'bin'}:{env.get('PATH', '')}",
            GITHUB_OUTPUT=str(output_file),
            GITHUB_REPOSITORY="example/torchgauge",
            XDG_DATA_HOME=str(self.tmp / "xdg"),
        )
        return env

    def run_job(self, name: str, matrix: dict[str, str]) -> dict[str, dict[str, str]]:
        """Run one matrix leg of a job: its ``run:`` steps whose condition holds."""
        import subprocess

        import torch

        job = self.doc["jobs"][name]
        context = self.context(matrix)
        outputs: dict[str, dict[str, str]] = {}
        for index, step in enumerate(job["steps"]):
            if "run" not in step or not _condition(step.get("if"), outputs, context):
                continue
            output_file = self.tmp / f"output-{name}-{index}"
            output_file.write_text("")
            script = _expressions(step["run"], context)
            proc = subprocess.run(
                [*GITHUB_SHELL, "-c", script],
                cwd=self.workspace,
                env=self.env(job, context, output_file),
                capture_output=True,
                text=True,
                timeout=600,
            )
            self.executed.add((name, step.get("name", step["run"][:40])))
            cuda_check = "torch.cuda.is_available()" in script and not torch.cuda.is_available()
            cuda_run = "--device cuda" in script and not torch.cuda.is_available()
            counting_without_valgrind = "--metrics instructions" in script and shutil.which("valgrind") is None
            if cuda_check:  # the GPU job's install check must fail on exactly that assertion here
                assert proc.returncode != 0 and "AssertionError" in proc.stderr, proc.stderr
            elif (cuda_run or counting_without_valgrind) and proc.returncode != 0:
                # a GPU shard on a machine without one, or counting without valgrind: nothing measured (exit 4)
                assert "no run was measured" in proc.stderr and "(exit 4)" in proc.stderr, proc.stderr
            else:
                assert proc.returncode == 0, (
                    f"job {name} {matrix} step {step.get('name')!r} exited "
                    f"{proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
                )
            if "id" in step:
                pairs = (line.split("=", 1) for line in output_file.read_text().splitlines() if "=" in line)
                outputs[step["id"]] = dict(pairs)
        return outputs


def _plant_fewer_ops(db: Path, model: str, mode: str) -> tuple[int, int]:
    """Edit the stored record of ``model``/``mode`` that carries operator counts (the first round's)
    so that it counted fewer: halve its most frequent operator. Returns (old, new) totals."""
    import sqlite3

    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT id, metrics_json FROM runs WHERE model = ? AND mode = ? AND metrics_json LIKE '%op_counts%'",
            (model, mode),
        ).fetchall()
        assert len(rows) == 1, f"{len(rows)} stored records of {model}/{mode} carry operator counts; expected one"
        ((run_id, text),) = rows
        metrics = json.loads(text)
        counts = metrics["op_counts"]
        top = max(counts["by_op"], key=counts["by_op"].get)
        cut = counts["by_op"][top] // 2
        old = counts["total"]
        counts["by_op"][top] -= cut
        counts["total"] -= cut
        con.execute("UPDATE runs SET metrics_json = ? WHERE id = ?", (json.dumps(metrics), run_id))
        con.commit()
    finally:
        con.close()
    return old, old - cut


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two nights of every shard, with valgrind: ~7 min at load 2, more beside other work
def test_every_run_script_executes_with_bash(tmp_path: Path) -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    env = doc["env"]
    flow = _Workflow(doc, tmp_path)
    compare_outputs: dict[str, dict] = {}
    results = flow.workspace / "results"
    planted = (0, 0)
    for night in range(2):  # the first night stores a run, the second compares with it
        for job in ("cpu", "cpu-instructions", "gpu"):
            for shard in doc["jobs"][job]["strategy"]["matrix"]["shard"]:
                flow.run_job(job, {"shard": shard})
        if night == 1:  # last night's build dispatched fewer operators: tonight's count is a regression
            planted = _plant_fewer_ops(flow.workspace / "history" / "cpu.sqlite", "dagmm_kdd", "eval")
            calls_before = len(flow.log.read_text().splitlines())
        for kind in doc["jobs"]["compare"]["strategy"]["matrix"]["kind"]:
            compare_outputs[kind] = flow.run_job("compare", {"kind": kind})
        if night == 0:
            first_runs = json.loads((results / "cpu-merged.json").read_text())["runs"]
    assert (results / "cpu-shard-1.json").exists() and not (results / "cpu-shard-2.json").exists()
    runs = json.loads((results / "cpu-merged.json").read_text())["runs"]
    assert {(r["model"], r["status"]) for r in runs} == {("dagmm_kdd", "ok")}
    # interleaved rounds: each configuration in ROUNDS processes of REPEAT steps, tested on CPU time;
    # the noise-free signals collected once per configuration, in the record that asked for them
    metrics = env["CPU_METRICS"].split(",")
    for night_runs in (first_runs, runs):
        for mode in ("train", "eval"):
            of_mode = [r for r in night_runs if r["mode"] == mode]
            assert len(of_mode) == int(env["ROUNDS"]), (mode, len(of_mode))
            assert {(r["repeat"], r["warmup"]) for r in of_mode} == {(int(env["REPEAT"]), int(env["WARMUP"]))}
            counted = [r for r in of_mode if "op_counts" in r["metrics"]]
            assert len(counted) == 1 and counted[0]["requested_metrics"] == metrics
            assert counted[0]["metrics"]["op_counts"]["total"] > 0 and counted[0]["metrics"]["flops"]["total"] > 0
            assert counted[0]["metrics"]["tensor_memory"]["cpu_peak_mb"] >= 0
            rest = [r for r in of_mode if r is not counted[0]]
            assert {tuple(r["requested_metrics"]) for r in rest} == {("time", "memory")}
            assert not any({"op_counts", "flops", "tensor_memory"} & set(r["metrics"]) for r in rest)
    # the second night: the planted operator count is a regression, compare exits 1 and the issue opens
    assert compare_outputs["cpu"]["compare"] == {"exit": "1"}
    compared = json.loads((results / "cpu-compare.json").read_text())
    flagged = {(f["mode"], f["metric"]): f for f in compared["regressions"]}
    ops = flagged["eval", "op_counts"]
    assert (ops["base"], ops["new"], ops["p_value"]) == (planted[1], planted[0], None)
    assert all(m in ("time_ms", "op_counts") for _, m in flagged)  # time may be flagged by noise, nothing else
    assert compared["time_signal"] == "auto"
    assert compared["time_signals"] == [{"signal": "cpu", "note": None, "configurations": 2}]
    report = (results / "cpu-report.md").read_text()
    assert "Time tested on per-step process CPU time in 2 configuration" in report
    assert "by ATen operators per step, deterministic count" in report  # which signal flagged it
    assert "| dagmm_kdd | eval/cpu/fp32/eager | op_counts | ATen operators per step, deterministic count |" in report
    gh = [line.split("\t") for line in flow.log.read_text().splitlines()[calls_before:] if line.startswith("gh")]
    assert gh and gh[0][1:3] == ["issue", "create"]  # opened by the second night's own compare, not forced
    assert gh[0][gh[0].index("--repo") + 1] == "example/torchgauge"
    assert gh[0][gh[0].index("--body-file") + 1] == "results/cpu-report.md"
    all_steps = {
        (name, s.get("name", s["run"][:40])) for name, job in doc["jobs"].items() for s in job["steps"] if "run" in s
    }
    assert flow.executed == all_steps
    # instruction counts: two nights of the same build agree within the 2% threshold, so no issue opens
    assert any(line.startswith("sudo apt-get install -y -q valgrind") for line in flow.log.read_text().splitlines())
    if shutil.which("valgrind") is not None:
        counted = json.loads((results / "cpu-instructions-merged.json").read_text())["runs"]
        assert {(r["model"], r["mode"], r["status"]) for r in counted} == {
            ("dagmm_kdd", "train", "ok"),
            ("dagmm_kdd", "eval", "ok"),
        }
        assert all(r["metrics"]["instructions"]["per_step"] > 0 for r in counted)
        assert compare_outputs["cpu-instructions"]["compare"] == {"exit": "0"}
        compared = json.loads((results / "cpu-instructions-compare.json").read_text())
        assert compared["regressions"] == [] and compared["inconclusive"] == []
    calls = flow.log.read_text().splitlines()
    assert any("--pre torch" in line for line in calls if line.startswith("pip"))
