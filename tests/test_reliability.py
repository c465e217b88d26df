"""Planted faults and hostile inputs (issue 16): nothing a model, a signal or a file does may
take the suite down, leave processes behind, run code or inject into a report.

docs/reliability.md maps every fault class to the test here that checks it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from torchgauge.cli import main
from torchgauge.compare.regression import compare_results
from torchgauge.registry import ModelFileError, UnknownModelError, load_model_file, validate_model_names
from torchgauge.report.escape import html_text, markdown_code, markdown_text, terminal_text
from torchgauge.report.regression import render_markdown
from torchgauge.report.table import error_line
from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord, SchemaError, load_results
from torchgauge.results.store import STORE_SCHEMA_VERSION, Store, StoreLockedError
from torchgauge.runner import ERROR_LINE_CHARS, RunnerOptions, run_suite
from torchgauge.workflows.confirm import ConfirmError, ConfirmRequest, confirm_comparison, rerun_command

FIXTURES = Path(__file__).parent / "fixtures"
HOSTILE = str(FIXTURES / "hostile_models.py")
PLANTED = str(FIXTURES / "planted_models.py")
# Generous for a loaded 2-core CI machine.
TIMEOUT_S = 30.0
# For a run that is meant to time out, once the forkserver is warm.
SHORT_TIMEOUT_S = 6.0
# The promise: after the parent dies, nothing of the run is alive within this many seconds.
ORPHAN_DEADLINE_S = 5.0

# Strings an attacker (or a confused tool) may put into model names, errors, hostnames.
HOSTILE_STRINGS = [
    "cannot open dataset shard [/data/shard-0]",
    "[bold red]x[/bold red] [/] [link=http://e.com]y[/link]",
    "<script>alert(1)</script>",
    "</details><img src=x onerror=alert(1)>",
    "a | b | c",
    "line one\n# Fake heading\n- fake item",
    "\r\n## injected\r\n",
    "`code` and ``` fence",
    "@octocat please look",
    "[click me](http://evil.example/x) ![img](http://evil.example/i.png)",
    "see http://evil.example and www.evil.example",
    "fixes #1 and org/repo#2",
    "**bold** _em_ ~~strike~~",
    "& &amp; &lt; \\ backslash",
    "\x1b[31mred\x1b[0m \x00 nul",
]


@pytest.fixture
def cli(capsys):
    def invoke(*args: str):
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return invoke


def _run(cli, tmp_path, *models: str, extra: tuple[str, ...] = ()):
    out = tmp_path / "r.json"
    code, stdout, stderr = cli(
        "run",
        *models,
        "--model-file",
        HOSTILE,
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--mode",
        "eval",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--timeout",
        str(TIMEOUT_S),
        "-o",
        str(out),
        *extra,
    )
    return code, stdout, stderr, out


# -- 1. markup and failures while reporting ------------------------------------------------


def test_markup_in_errors_and_names_never_stops_the_suite(cli, tmp_path) -> None:
    code, stdout, stderr, out = _run(
        cli, tmp_path, "hostile_bracket_error", "hostile_markup_error", "hostile_*name", "planted_ok"
    )
    assert code == 1
    runs = {r["model"]: r for r in json.loads(out.read_text())["runs"]}
    assert set(runs) == {"hostile_bracket_error", "hostile_markup_error", "hostile_[/red]name", "planted_ok"}
    assert runs["planted_ok"]["status"] == "ok"
    text = "".join((stdout + stderr).split())  # tables wrap long cells
    for verbatim in ("[/data/shard-0]", "[boldred]notbold[/boldred]and[/]", "hostile_[/red]name"):
        assert verbatim in text
    code, stdout, _ = cli("show", str(out))
    stdout = "".join(stdout.split())
    assert code == 0 and "[/data/shard-0]" in stdout and "hostile_[/red]name" in stdout


def test_a_failing_result_callback_is_a_warning_and_the_suite_goes_on() -> None:
    configs = [RunConfig("planted_ok", mode=m, size="smoke", repeat=2, warmup=1) for m in ("train", "eval")]
    seen = []

    def broken(record) -> None:
        seen.append(record)
        raise RuntimeError("reporting broke [/red]")

    with pytest.warns(RuntimeWarning, match="reporting the finished run .* failed"):
        records = run_suite(configs, RunnerOptions(timeout_s=TIMEOUT_S, model_files=(PLANTED,)), on_result=broken)
    assert [r.status for r in records] == ["ok", "ok"] and len(seen) == 2


def test_a_locked_database_fails_within_its_bound(tmp_path, monkeypatch) -> None:
    db = tmp_path / "h.sqlite"
    with Store(db) as store:
        suite = store.begin_suite({"machine_fingerprint": "m"})
    store = Store(db, lock_wait_s=0.3)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreLockedError, match="locked by another process"):
            store.add_run(suite, RunRecord(RunConfig("m"), "ok"))
        assert time.monotonic() - t0 < 20  # bounded (generous: a loaded CI machine)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.add_run(suite, RunRecord(RunConfig("m"), "ok"))  # the lock gone, writing works again
    store.close()


def test_a_run_the_database_refuses_is_marked_not_stored(cli, tmp_path, monkeypatch) -> None:
    real_add = Store.add_run

    def add_run(self, suite_id, record):
        if record.config.mode == "eval":
            raise StoreLockedError(f"{self.path} stayed locked by another process for more than 30 s")
        return real_add(self, suite_id, record)

    monkeypatch.setattr(Store, "add_run", add_run)
    db = tmp_path / "h.sqlite"
    out = tmp_path / "r.json"
    code, _, stderr = cli(
        "run",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "-o",
        str(out),
        "--db",
        str(db),
    )
    assert code == 0
    assert len(json.loads(out.read_text())["runs"]) == 2  # the JSON file keeps both
    assert "not stored" in stderr and "planted_ok/eval" in stderr
    with Store(db, readonly=True) as store:
        (suite,) = store.suites()
        assert suite.runs == 1 and suite.complete


# -- 2. processes and signals --------------------------------------------------------------


def _descendants(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(procs: list[psutil.Process], deadline_s: float) -> list[psutil.Process]:
    end = time.monotonic() + deadline_s
    alive = procs
    while alive and time.monotonic() < end:
        alive = [p for p in alive if _alive(p)]
        time.sleep(0.05)
    return alive


@pytest.mark.parametrize("signame,code", [("SIGKILL", -9), ("SIGTERM", 143)])  # SIGINT: the next test
def test_a_dead_parent_leaves_no_process_and_no_scratch(tmp_path, signame, code) -> None:
    pidfile = tmp_path / "pids"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out, db = tmp_path / "r.json", tmp_path / "h.sqlite"
    env = dict(
        os.environ,
        TMPDIR=str(scratch),
        PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1] / "src"), os.environ.get("PYTHONPATH", "")]),
    )
    proc = subprocess.Popen(
        # hostile_bracket_error fails at once (a finished run to save); then the hang
        [
            sys.executable,
            "-m",
            "torchgauge.cli",
            "run",
            "hostile_bracket_error",
            "hostile_spawns_and_hangs",
            "--mode",
            "eval",
            "--size",
            "smoke",
            "--model-file",
            HOSTILE,
            "--model-arg",
            f"pidfile={pidfile}",
            "--timeout",
            "300",
            "-o",
            str(out),
            "--db",
            str(db),
        ],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        t0 = time.monotonic()
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert proc.poll() is None and time.monotonic() - t0 < 120, "the hanging model never started"
            time.sleep(0.1)
        worker_pid, child_pid = (int(p) for p in pidfile.read_text().split())
        procs = _descendants(proc.pid)
        assert {worker_pid, child_pid} <= {p.pid for p in procs}
        proc.send_signal(getattr(signal, signame))
        assert proc.wait(60) == code
        left = _wait_gone(procs, ORPHAN_DEADLINE_S)
        assert not left, [p.cmdline() for p in left]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not [p for p in scratch.iterdir() if p.name.startswith(("torchgauge-", "pymp-"))]
    doc = json.loads(out.read_text())  # the finished run was saved, the file says incomplete
    assert [r["model"] for r in doc["runs"]] == ["hostile_bracket_error"] and doc["complete"] is False
    with Store(db, readonly=True) as store:
        (suite,) = store.suites()
        assert suite.runs == 1 and not suite.complete
    if signame != "SIGKILL":
        stderr = proc.stderr.read()
        assert f"interrupted by {signame}: 1 of 2 run(s) finished and saved in {out}" in stderr
        assert "1 stored as incomplete run" in stderr


def test_ctrl_c_says_what_was_saved(cli, tmp_path, monkeypatch) -> None:
    import torchgauge.suite

    real = torchgauge.suite.run_and_save

    def interrupted_after_one(configs, options, output, **kw):
        def on_result(record):
            kw["on_result"](record)
            raise KeyboardInterrupt  # Ctrl-C right after the first run finished

        return real(configs, options, output, **{**kw, "on_result": on_result})

    monkeypatch.setattr(torchgauge.suite, "run_and_save", interrupted_after_one)
    out, db = tmp_path / "r.json", tmp_path / "h.sqlite"
    code, _, stderr = cli(
        "run",
        "planted_ok",
        "--model-file",
        PLANTED,
        "--size",
        "smoke",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "-o",
        str(out),
        "--db",
        str(db),
    )
    assert code == 130
    assert (
        f"error: interrupted by SIGINT: 1 of 2 run(s) finished and saved in {out} (marked incomplete); "
        f"1 stored as incomplete run 1 in {db}"
    ) in stderr
    assert json.loads(out.read_text())["complete"] is False


def test_a_timeout_kills_what_the_model_started(tmp_path) -> None:
    pidfile = tmp_path / "pids"
    warm = RunConfig("hostile_bracket_error", mode="eval", size="smoke")  # starts the forkserver first
    config = RunConfig("hostile_spawns_and_hangs", mode="eval", size="smoke", model_kwargs={"pidfile": str(pidfile)})
    _, rec = run_suite([warm, config], RunnerOptions(timeout_s=SHORT_TIMEOUT_S, model_files=(HOSTILE,)))
    assert rec.status == "timeout" and pidfile.exists()
    _, child_pid = (int(p) for p in pidfile.read_text().split())
    try:
        child = [psutil.Process(child_pid)]
    except psutil.NoSuchProcess:
        child = []
    assert not _wait_gone(child, ORPHAN_DEADLINE_S)


# -- 3. names from files are data ------------------------------------------------------------


def _side(model: str, level: float) -> ResultsFile:
    return ResultsFile(
        env={},
        runs=[
            RunRecord(
                RunConfig(model, mode="eval"),
                "ok",
                metrics={"time_ms": {"samples": [level * (1 + 0.001 * i) for i in range(10)]}},
            )
        ],
    )


def test_confirm_never_passes_a_crafted_name_to_a_command(tmp_path) -> None:
    marker = tmp_path / "ran"
    payload = tmp_path / "payload.py"
    payload.write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    name = f"--model-file={payload}"
    cmp = compare_results(_side(name, 10.0), _side(name, 12.0))
    assert cmp.regressions
    request = ConfirmRequest(baseline_python=sys.executable, candidate_python=sys.executable, rounds=2)
    with pytest.raises(ConfirmError, match="not a registered model name"):
        confirm_comparison(cmp, request)
    assert not marker.exists()
    for bad in (name, "*", "planted_[ok]", "-x"):
        with pytest.raises(UnknownModelError):
            validate_model_names([bad])


def test_rerun_commands_bind_values_and_put_names_after_double_dash() -> None:
    c = RunConfig("resnet18", mode="eval", device="--model-file=/x.py")
    cmd = rerun_command("py", [c], Path("o.json"), ConfirmRequest())
    assert cmd[-2:] == ["--", "resnet18"] and "--device=--model-file=/x.py" in cmd
    assert "--model-file=/x.py" not in cmd  # only ever as the value of --device


def test_compare_confirm_cli_refuses_a_crafted_results_file(cli, tmp_path) -> None:
    marker = tmp_path / "ran"
    payload = tmp_path / "payload.py"
    payload.write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    base, new = tmp_path / "b.json", tmp_path / "n.json"
    _side(f"--model-file={payload}", 10.0).write(base)
    _side(f"--model-file={payload}", 12.0).write(new)
    code, _, stderr = cli("compare", str(base), str(new), "--confirm", "--confirm-runs", "2", "-q")
    assert code == 1 and "not a registered model name" in stderr and not marker.exists()


# -- 4. Markdown injection -----------------------------------------------------------------


def _assert_inert_markdown(text: str) -> None:
    assert "<" not in text and ">" not in text.replace("&gt;", "")
    assert "\n" not in text and "\r" not in text
    assert not re.search(r"(?<!\\)[|`\[\]()*]", text.replace("&amp;", "").replace("&lt;", "").replace("&gt;", ""))
    assert not re.search(r"@[A-Za-z0-9]", text) and not re.search(r"#\d", text)
    assert "://" not in text and "www." not in text.lower()


@pytest.mark.parametrize("hostile", HOSTILE_STRINGS)
def test_markdown_escaping_corpus(hostile) -> None:
    _assert_inert_markdown(markdown_text(hostile))
    code = markdown_code(hostile)
    assert "\n" not in code and not re.search(r"(?<!\\)\|", code)
    fence = re.match(r"`+", code).group(0)
    assert code.endswith(fence) and fence not in code[len(fence) : -len(fence)]
    assert "<" not in html_text(hostile) and '"' not in html_text(hostile)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", terminal_text(hostile))


def test_escape_sequences_from_a_results_file_are_shown_not_sent(cli, tmp_path) -> None:
    path = tmp_path / "r.json"
    ResultsFile(
        env={"cpu_model": "\x1b]0;pwned\x07"},
        runs=[RunRecord(RunConfig("m\x1b[2J", mode="eval"), "error", error="boom \x1b[31mred\x9b")],
    ).write(path)
    code, stdout, stderr = cli("show", str(path))
    assert code == 0 and "\x1b" not in stdout + stderr and "\x9b" not in stdout + stderr
    assert "\\x1b[2J" in stdout and "\\x1b]0;pwned" in stderr


def test_markdown_text_at_a_line_start_escapes_block_markers() -> None:
    assert [markdown_text(v, line_start=True) for v in ("- x", "+ y", "12. z", "3) w", "1.5 ms")] == [
        "\\- x",
        "\\+ y",
        "12\\. z",
        "3\\) w",
        "1.5 ms",
    ]
    assert markdown_text("- x") == "- x" and markdown_text("torch_version") == "torch_version"


def test_the_report_escapes_every_untrusted_value() -> None:
    hostile = "\n".join(HOSTILE_STRINGS)
    base = ResultsFile(
        env={"hostname": hostile, "torch_version": "</details>@team"},
        runs=[
            RunRecord(
                RunConfig(hostile, mode="eval"),
                "ok",
                metrics={"time_ms": {"samples": [10.0 + 0.01 * i for i in range(10)]}},
            ),
            RunRecord(RunConfig("gone" + hostile, mode="eval"), "ok", metrics={"time_ms": {"samples": [1.0] * 10}}),
            RunRecord(RunConfig("breaks" + hostile, mode="eval"), "ok", metrics={"time_ms": {"samples": [1.0] * 10}}),
        ],
    )
    new = ResultsFile(
        env={"hostname": "h"},
        runs=[
            RunRecord(
                RunConfig(hostile, mode="eval"),
                "ok",
                metrics={"time_ms": {"samples": [20.0 + 0.01 * i for i in range(10)]}},
            ),
            RunRecord(RunConfig("breaks" + hostile, mode="eval"), "error", error=hostile),
        ],
    )
    md = render_markdown(compare_results(base, new), base_label=hostile, new_label="new")
    headings = [ln for ln in md.splitlines() if ln.startswith("#")]
    assert headings[0].startswith("# torchgauge: regressions found (new vs ") and set(headings[1:]) == {
        "## Regressions",
        "## Improvements",
        "## New failures and fixes",
        "## Environments",
    }
    assert md.count("<details>") == md.count("</details>") <= 1 and "<script" not in md and "<img" not in md
    assert not re.search(r"@[A-Za-z0-9]", md) and "](" not in md.replace("\\](", "")
    width = None  # every row of a table keeps its header's column count
    for line in md.splitlines():
        cells = len(re.split(r"(?<!\\)\|", line)) if line.startswith("|") else None
        width = (width or cells) if cells else None
        assert cells == width, line


# -- 5. user errors are one line -----------------------------------------------------------


def test_unwritable_output_is_one_line(cli) -> None:
    code, _, stderr = cli("run", "planted_ok", "--model-file", PLANTED, "--size", "smoke", "-o", "/proc/x.json")
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 1 and errors == ["error: cannot write results file /proc/x.json: No such file or directory"]
    assert "Traceback" not in stderr


@pytest.mark.parametrize(
    "source,where,message",
    [
        ("def broken(:\n    pass\n", ":1:", "SyntaxError"),
        ("x = 1\nraise RuntimeError('boom at import [/x]')\n", ":2:", "RuntimeError: boom at import [/x]"),
        (
            "from torchgauge import register_model\n"
            "@register_model(domain='other', task='t', source='s', batch_size=1)\n"
            "def resnet50(ctx):\n    pass\n",
            ":2:",
            "already registered",
        ),
    ],
)
def test_a_bad_model_file_names_path_line_and_message(cli, tmp_path, source, where, message) -> None:
    bad = tmp_path / "bad_models.py"
    bad.write_text(source)
    with pytest.raises(ModelFileError, match=re.escape(f"{bad}{where}")):
        load_model_file(bad)
    code, _, stderr = cli("run", "planted_ok", "--model-file", str(bad), "--size", "smoke")
    assert code == 1 and f"{bad}{where}" in stderr and message in stderr and "Traceback" not in stderr


def test_debug_shows_the_traceback(tmp_path, monkeypatch) -> None:
    bad = tmp_path / "bad_models.py"
    bad.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ModelFileError):
        main(["--debug", "run", "planted_ok", "--model-file", str(bad)])
    monkeypatch.setenv("TORCHGAUGE_DEBUG", "1")
    with pytest.raises(ModelFileError):
        main(["run", "planted_ok", "--model-file", str(bad)])


_GOOD_RUN = {
    "model": "m",
    "mode": "eval",
    "device": "cpu",
    "status": "ok",
    "metrics": {"time_ms": {"samples": [1.0, 2.0], "median": 1.5}},
}


@pytest.mark.parametrize(
    "doc,message",
    [
        ({"schema_version": 1, "env": {}, "runs": [1]}, "runs[0] is int"),
        ({"schema_version": 1, "env": "x", "runs": []}, "field 'env' is str"),
        ({"schema_version": 1, "env": {}, "runs": [dict(_GOOD_RUN, wall_s="x")]}, "field 'wall_s' is str"),
        (
            {"schema_version": 1, "env": {}, "runs": [dict(_GOOD_RUN, metrics={"time_ms": {"median": "fast"}})]},
            "metrics.time_ms.median is str",
        ),
        (
            {"schema_version": 1, "env": {}, "runs": [dict(_GOOD_RUN, metrics={"time_ms": {"samples": ["a"]}})]},
            "metrics.time_ms.samples is not a list of numbers",
        ),
        ({"schema_version": 1, "env": {}, "runs": [dict(_GOOD_RUN, model=["m"])]}, "field 'model' is list"),
        ({"schema_version": 1, "env": {}, "runs": [dict(_GOOD_RUN, batch_size="8")]}, "field 'batch_size' is str"),
    ],
)
def test_results_with_wrong_types_are_one_line(cli, tmp_path, doc, message) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match=re.escape(message)):
        load_results(path)
    for args in (("show", str(path)), ("compare", str(path), str(path))):
        code, _, stderr = cli(*args)
        assert code == 1 and message in stderr and "Traceback" not in stderr


def test_null_versions_and_non_utf8(cli, tmp_path) -> None:
    nulls = tmp_path / "nulls.json"
    nulls.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "torchgauge_version": None,
                "created_at": None,
                "env": {"torch_version": None, "torch_git_version": None},
                "runs": [_GOOD_RUN],
            }
        )
    )
    assert cli("show", str(nulls))[0] == 0
    assert cli("compare", str(nulls), str(nulls), "-q")[0] == 0
    binary = tmp_path / "binary.json"
    binary.write_bytes(b'{"schema_version": 1, "runs": [], "env": {"h": "\xff\xfe"}}')
    code, _, stderr = cli("show", str(binary))
    assert code == 1 and "is not UTF-8" in stderr and "Traceback" not in stderr


def _damaged_db(path: Path) -> None:
    with Store(path) as store:
        for _k in range(3):
            runs = [
                RunRecord(
                    RunConfig(f"m{i}", mode="eval"),
                    "ok",
                    metrics={"time_ms": {"samples": [float(j) for j in range(200)]}},
                )
                for i in range(30)
            ]
            store.save(ResultsFile(env={"machine_fingerprint": "m"}, runs=runs))
    data = bytearray(path.read_bytes())
    for offset in range(4096 * 3, min(len(data) - 4096, 4096 * 12)):  # garbage in the middle pages
        data[offset] = (offset * 131) % 251
    path.write_bytes(bytes(data))


def test_a_damaged_database_is_one_line_for_every_command(cli, tmp_path) -> None:
    db = tmp_path / "h.sqlite"
    _damaged_db(db)
    for args in (
        ("history", "m1", "--db", str(db)),
        ("compare", "previous", "latest", "--db", str(db)),
        ("export", "latest", "--db", str(db)),
        ("export", "--list", "--db", str(db)),
        (
            "run",
            "planted_ok",
            "--model-file",
            PLANTED,
            "--size",
            "smoke",
            "--db",
            str(db),
            "-o",
            str(tmp_path / "r.json"),
        ),
    ):
        code, _, stderr = cli(*args)
        assert code == 1 and str(db) in stderr and "Traceback" not in stderr, (args, stderr)


# -- 6. numeric options --------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("run", "planted_ok", "--timeout"),
        ("run", "planted_ok", "--memory-limit"),
        ("compare-backends", "planted_ok", "--timeout"),
        ("compare-backends", "planted_ok", "--memory-limit"),
        ("tune-batch", "planted_ok", "--timeout"),
        ("tune-batch", "planted_ok", "--memory-limit"),
        ("tune-batch", "planted_ok", "--budget-s"),
        ("scale", "planted_ok", "--timeout"),
        ("coverage", "--timeout"),
        ("compare", "a.json", "b.json", "--timeout"),
        ("bisect", "--timeout"),
        ("bisect", "--build-timeout"),
        ("bisect", "--alpha"),
    ],
)
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "-inf", "abc"])
def test_every_numeric_limit_is_validated(cli, args, value) -> None:
    code, _, stderr = cli(*args[:-1], f"{args[-1]}={value}")
    assert code == 2 and "accepted:" in stderr and args[-1] in stderr


def test_sweep_values_must_be_finite() -> None:
    from torchgauge.workflows.scale import parse_vary

    for text in ("embedding_dim=16,nan", "embedding_dim=inf", "embedding_dim=-inf,2"):
        with pytest.raises(ValueError, match="must be > 0 and finite"):
            parse_vary(text)


# -- 7. bounded error text -----------------------------------------------------------------


def test_megabytes_of_output_stay_out_of_the_record(tmp_path) -> None:
    logs = tmp_path / "logs"
    configs = [RunConfig(m, mode="eval", size="smoke") for m in ("hostile_huge_line", "hostile_huge_message")]
    records = run_suite(configs, RunnerOptions(timeout_s=TIMEOUT_S, model_files=(HOSTILE,), log_dir=str(logs)))
    for rec in records:
        assert rec.status == "error" and len(rec.error) < 25 * ERROR_LINE_CHARS, len(rec.error)
        assert "characters cut" in rec.error
    assert "exited with code 7" in records[0].error and "the end" in records[1].error
    kept = sorted(logs.iterdir())
    assert len(kept) == 2 and kept[0].stat().st_size > 5 * 1024 * 1024  # --keep-logs keeps it all


def test_keep_logs_keeps_every_workers_output(cli, tmp_path) -> None:
    logs = tmp_path / "logs"
    code, _, _, _ = _run(cli, tmp_path, "hostile_bracket_error", "planted_ok", extra=("--keep-logs", str(logs)))
    assert code == 1 and sorted(p.name for p in logs.glob("*.log")) == [
        "0000-hostile_bracket_error-eval.log",
        "0001-planted_ok-eval.log",
    ]


# -- 8. read-only commands, incomplete runs, missing configurations --------------------------


def test_read_only_commands_never_write_a_database(cli, tmp_path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    for args in (
        ("history", "m", "--db", str(empty)),
        ("compare", "previous", "latest", "--db", str(empty)),
        ("export", "--list", "--db", str(empty)),
    ):
        code, _, stderr = cli(*args)
        assert code == 1 and "not a torchgauge history database" in stderr
    assert empty.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite"]
    db = tmp_path / "h.sqlite"
    with Store(db) as store:
        store.save(_side("m", 1.0))
    before = db.read_bytes()
    assert cli("export", "--list", "--db", str(db))[0] == 0
    assert db.read_bytes() == before


def test_latest_and_previous_skip_incomplete_runs(tmp_path) -> None:
    db = tmp_path / "h.sqlite"
    with Store(db) as store:
        first, second = store.save(_side("m", 1.0)), store.save(_side("m", 1.0))
        partial = store.begin_suite({})
        store.add_run(partial, RunRecord(RunConfig("m", mode="eval"), "ok"))  # killed before finish_suite
        assert (store.resolve("latest"), store.resolve("previous")) == (second, first)
        assert store.resolve("latest", include_incomplete=True) == partial
        store.finish_suite(partial)
        assert store.resolve("latest") == partial


def test_a_version_1_database_is_migrated_with_its_suites_complete(tmp_path) -> None:
    db = tmp_path / "v1.sqlite"
    with Store(db) as store:
        store.save(_side("m", 1.0))
    conn = sqlite3.connect(db)  # make it look like a database written before completed_at
    conn.executescript(
        "ALTER TABLE suites DROP COLUMN completed_at; ALTER TABLE runs DROP COLUMN model_code_hash;"
        " ALTER TABLE runs DROP COLUMN threads_json; UPDATE meta SET value = '1';"
    )
    conn.close()
    with Store(db, readonly=True) as store:
        assert store.suites()[0].complete and store.resolve("latest") == 1
    with Store(db) as store:
        assert store.schema_version == STORE_SCHEMA_VERSION and store.suites()[0].complete


def test_compare_says_loudly_what_one_side_lacks(cli, tmp_path) -> None:
    base, new = tmp_path / "b.json", tmp_path / "n.json"
    full = _side("m", 1.0)
    full.runs.append(RunRecord(RunConfig("other", mode="eval"), "ok", metrics={"time_ms": {"samples": [1.0] * 10}}))
    full.write(base)
    partial = _side("m", 1.0)
    partial.complete = False
    partial.write(new)
    report = tmp_path / "report.md"
    code, _, stderr = cli("compare", str(base), str(new), "--markdown", str(report))
    assert "MISSING from n.json" in stderr and "n.json is an interrupted run" in stderr
    assert "**Warning: 1 configuration(s) missing from n.json**" in report.read_text()


# -- 9. a GPU job without a GPU ------------------------------------------------------------


def test_every_run_skipped_for_a_missing_device_fails(cli, tmp_path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = tmp_path / "r.json"
    code, _, stderr = cli(
        "run", "planted_ok", "--model-file", PLANTED, "--device", "cuda", "--size", "smoke", "-o", str(out)
    )
    assert code == 4 and "no run was measured: cuda requested but no CUDA device is available" in stderr
    assert {r["status"] for r in json.loads(out.read_text())["runs"]} == {"skipped"}
    # models that cannot use the device at all do not turn a misconfigured job green
    cpu_only = tmp_path / "cpu_only.py"
    cpu_only.write_text(
        "from torchgauge import register_model\n"
        "@register_model(domain='other', task='t', source='s', batch_size=1, devices=('cpu',))\n"
        "def reliability_cpu_only(ctx):\n    raise RuntimeError('never built')\n"
    )
    code, _, _ = cli(
        "run",
        "planted_ok",
        "reliability_cpu_only",
        "--model-file",
        PLANTED,
        "--model-file",
        str(cpu_only),
        "--device",
        "cuda",
        "--size",
        "smoke",
        "-o",
        str(out),
    )
    assert code == 4 and {r["status"] for r in json.loads(out.read_text())["runs"]} == {"skipped", "unsupported"}


# -- 10. messages --------------------------------------------------------------------------


def test_the_status_cell_shows_the_meaningful_error_line() -> None:
    enforce = (
        'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: [enforce fail at '
        "alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried\n"
    )
    assert error_line(enforce) == "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried"
    assert error_line("ValueError: bad\n  continued detail\n") == "ValueError: bad"
    assert error_line("worker killed by SIGSEGV") == "worker killed by SIGSEGV"
