"""Confirmation reruns with stand-in interpreters: orchestration, ABBA order, keep/dismiss."""

from __future__ import annotations

import dataclasses
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from torchgauge.compare.regression import compare_results
from torchgauge.harness.metrics import CPU_PEAK_SPREAD
from torchgauge.results.schema import ResultsFile, RunConfig, RunRecord
from torchgauge.workflows.confirm import ConfirmError, ConfirmRequest, confirm_comparison, rerun_command

PLANTED = str(Path(__file__).parents[1] / "fixtures" / "planted_models.py")

# Names must be registered models (confirm refuses any other name from a file).
A, B = "planted_ok", "planted_eval_only"

# Stands in for `python -m torchgauge.cli run --mode=M ... --output=PATH -- MODEL...`: writes a
# results file whose per-process level is LEVEL (+-1% process noise) and whose peak memory is
# PEAK or PEAK + 20 MiB (the steps fresh processes show at full size), and logs its call.
_FAKE = textwrap.dedent("""\
    #!{python}
    import json, random, sys
    args = sys.argv[1:]
    assert args[:3] == ["-m", "torchgauge.cli", "run"], args
    value = lambda opt: next(a.split("=", 1)[1] for a in args if a.startswith(opt + "="))
    out, mode = value("--output"), value("--mode")
    models = args[args.index("--") + 1:]
    with open({log!r}, "a") as fh:
        fh.write({side!r} + " " + " ".join(models) + "\\n")
    rng = random.Random()
    runs = []
    for m in models:
        level = {levels!r}.get(m, 10.0) * (1 + 0.01 * rng.gauss(0, 1))
        samples = [level * (1 + 0.002 * rng.gauss(0, 1)) for _ in range(10)]
        peak = {peaks!r}.get(m, 400.0) + rng.choice([0.0, 20.0])
        runs.append({{"model": m, "mode": mode, "device": "cpu", "status": "ok", "batch_size": 2,
                      "requested_batch_size": None,
                      "metrics": {{"time_ms": {{"samples": samples}}, "cpu_peak_mb": peak}}}})
    json.dump({{"schema_version": 1, "env": {{"side": {side!r}}}, "runs": runs}}, open(out, "w"))
""")


def _fake(tmp_path, side: str, levels: dict[str, float], peaks: dict[str, float] | None = None) -> str:
    path = tmp_path / f"python-{side}"
    log = str(tmp_path / "calls.log")
    path.write_text(_FAKE.format(python=sys.executable, log=log, side=side, levels=levels, peaks=peaks or {}))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _flagged() -> tuple:
    def rf(level_a: float, level_b: float) -> ResultsFile:
        runs = [
            RunRecord(
                RunConfig(m, mode="eval"),
                "ok",
                metrics={"time_ms": {"samples": [lv * (1 + 0.001 * i) for i in range(10)]}},
            )
            for m, lv in ((A, level_a), (B, level_b))
        ]
        return ResultsFile(env={}, runs=runs)

    cmp = compare_results(rf(10.0, 10.0), rf(12.0, 12.0))  # one base process vs one new: both flagged
    assert {f.config.model for f in cmp.regressions} == {A, B}
    return cmp


def test_confirm_keeps_real_and_dismisses_process_noise(tmp_path) -> None:
    # in fresh processes "a" really is 20% slower; "b" was a slow process
    request = ConfirmRequest(
        baseline_python=_fake(tmp_path, "base", {}),
        candidate_python=_fake(tmp_path, "cand", {A: 12.0}),
        rounds=5,
        model_files=(PLANTED,),
    )
    rounds_seen = []
    out = confirm_comparison(_flagged(), request, on_round=lambda r, n: rounds_seen.append((r, n)))
    assert [f.config.model for f in out.regressions] == [A] and [f.config.model for f in out.dismissed] == [B]
    kept = out.regressions[0]
    assert (kept.n_base, kept.n_new) == (5, 5) and kept.p_value < 0.01  # process medians, not pooled samples
    assert kept.detail["first_change"] == pytest.approx(0.2, abs=0.01)
    assert rounds_seen == [(r, 5) for r in range(1, 6)] and out.confirm_rounds == 5
    calls = (tmp_path / "calls.log").read_text().split("\n")[:-1]
    # ABBA order, one call per side and round
    base, cand = f"base {B} {A}", f"cand {B} {A}"  # sorted names
    assert calls == [base, cand, cand, base] * 2 + [base, cand]


def test_confirm_re_measures_flagged_memory_and_judges_the_process_medians(tmp_path) -> None:
    # first comparison, one process a side: "a" +30% (real), "b" +18% (an outlying process); both
    # beyond the threshold and the one-process floor (2 x CPU_PEAK_SPREAD of the base peak)
    def rf(peak_a: float, peak_b: float) -> ResultsFile:
        return ResultsFile(
            env={},
            runs=[
                RunRecord(
                    RunConfig(m, mode="eval"),
                    "ok",
                    metrics={"time_ms": {"samples": [10.0 + 0.01 * i for i in range(10)]}, "cpu_peak_mb": peak},
                )
                for m, peak in ((A, peak_a), (B, peak_b))
            ],
        )

    cmp = compare_results(rf(400.0, 380.0), rf(520.0, 450.0))
    assert {(f.config.model, f.metric) for f in cmp.regressions} == {(A, "cpu_peak_mb"), (B, "cpu_peak_mb")}
    request = ConfirmRequest(
        baseline_python=_fake(tmp_path, "base", {}),
        candidate_python=_fake(tmp_path, "cand", {}, peaks={A: 520.0}),
        rounds=4,
        model_files=(PLANTED,),
    )
    out = confirm_comparison(cmp, request)
    # reruns: base 400/420, candidate a 520/540, b 400/420 MiB: the medians keep "a" only
    assert [(f.config.model, f.metric) for f in out.regressions] == [(A, "cpu_peak_mb")]
    assert [(f.config.model, f.metric) for f in out.dismissed] == [(B, "cpu_peak_mb")]
    kept = out.regressions[0]
    assert (kept.n_base, kept.n_new) == (4, 4) and kept.detail["first_change"] == pytest.approx(0.3)
    # 2 x the larger of CPU_PEAK_SPREAD of the base median (400-420 MiB) and the spread seen (0 or 20 MiB)
    assert 2 * CPU_PEAK_SPREAD * 400 - 0.1 <= kept.detail["floor_mb"] <= 2 * max(CPU_PEAK_SPREAD * 420, 20.0) + 0.1


def test_confirm_keeps_a_flag_it_could_not_remeasure(tmp_path) -> None:
    request = ConfirmRequest(
        baseline_python=_fake(tmp_path, "base", {}),
        candidate_python=_fake(tmp_path, "cand", {}),
        rounds=2,
        model_files=(PLANTED,),
    )
    cmp = _flagged()
    cmp.regressions = [
        f.__class__(
            f.config.with_(precision="bf16"),
            *[getattr(f, k) for k in ("metric", "base", "new", "change", "p_value", "verdict")],
        )
        for f in cmp.regressions[:1]
    ]
    out = confirm_comparison(cmp, request)  # the fake writes fp32 runs only: bf16 never comes back
    assert len(out.regressions) == 1 and "not re-measured" in out.regressions[0].detail["confirmation"]


def test_confirm_without_regressions_runs_nothing(tmp_path) -> None:
    cmp = _flagged()
    cmp.regressions = []
    request = ConfirmRequest(baseline_python="/nonexistent/python", candidate_python="/nonexistent/python")
    assert confirm_comparison(cmp, request) is cmp


def test_confirm_reports_an_interpreter_that_cannot_run(tmp_path) -> None:
    broken = tmp_path / "python-broken"
    broken.write_text("#!/bin/sh\necho 'No module named torchgauge' >&2\nexit 1\n")
    broken.chmod(0o755)
    request = ConfirmRequest(
        baseline_python=str(broken), candidate_python=str(broken), rounds=2, model_files=(PLANTED,)
    )
    with pytest.raises(ConfirmError, match="No module named torchgauge"):
        confirm_comparison(_flagged(), request)


def test_rerun_command_carries_the_configuration() -> None:
    c = RunConfig("m", mode="train", batch_size=8, size="smoke", repeat=5, warmup=1, metrics=("time", "memory"))
    cmd = rerun_command("py", [c, c.with_(model="k")], os.devnull, ConfirmRequest(model_files=("/x/models.py",)))
    assert cmd[:4] == ["py", "-m", "torchgauge.cli", "run"] and cmd[-3:] == ["--", "k", "m"]
    for part in (
        "--mode=train",
        "--batch-size=8",
        "--size=smoke",
        "--repeat=5",
        "--warmup=1",
        "--metrics=time,memory",
        "--model-file=/x/models.py",
        "--no-db",
        f"--output={os.devnull}",
    ):
        assert part in cmd


def test_reruns_use_the_thread_count_the_compared_runs_recorded(tmp_path) -> None:
    from torchgauge.workflows.confirm import recorded_intra_op_threads

    one = RunRecord(RunConfig("m"), "ok", threads={"intra_op": 1})
    two = RunRecord(RunConfig("m"), "ok", threads={"intra_op": 2})
    assert recorded_intra_op_threads([one, one]) == 1
    assert (
        recorded_intra_op_threads([one, two]) is None
        and recorded_intra_op_threads([RunRecord(RunConfig("m"), "ok")]) is None
    )
    cmd = rerun_command("py", [RunConfig("m")], tmp_path / "o.json", ConfirmRequest(threads=1))
    assert "--threads=1" in cmd
    default = rerun_command("py", [RunConfig("m")], tmp_path / "o.json", ConfirmRequest())
    assert not any(arg.startswith("--threads") for arg in default)


def test_confirm_re_measures_deterministic_metrics_in_its_first_round_only(monkeypatch) -> None:
    """As run --rounds: reruns after the first drop the counts; flagged counts alone take one round."""
    from torchgauge.workflows import confirm

    asked: list[tuple[int, tuple]] = []

    def fake_rerun(python, configs, workdir, request, tag):
        asked.append((int(tag.rsplit("-", 1)[1]), tuple(c.metrics for c in configs)))
        runs = []
        for c in configs:
            metrics = {"time_ms": {"samples": [12.0 if tag.startswith("new") else 10.0]}}
            if "op_counts" in c.metrics:
                metrics["op_counts"] = {"total": 130 if tag.startswith("new") else 100, "by_op": {}}
            runs.append(RunRecord(c, "ok", metrics=metrics))
        return ResultsFile(env={}, runs=runs)

    monkeypatch.setattr(confirm, "rerun_configs", fake_rerun)
    monkeypatch.setattr(confirm, "_check_names", lambda configs, request: None)
    counted = RunConfig(A, mode="eval", metrics=("time", "memory", "op_counts"))
    flagged = _flagged()
    flagged.regressions = [dataclasses.replace(f, config=counted) for f in flagged.regressions[:1]]
    flagged.regressions.append(dataclasses.replace(flagged.regressions[0], metric="op_counts", p_value=None))
    out = confirm_comparison(flagged, ConfirmRequest(rounds=3))
    assert asked == [(0, (counted.metrics,))] * 2 + [(r, (("time", "memory"),)) for r in (1, 1, 2, 2)]
    assert {f.metric for f in out.regressions} == {"time_ms", "op_counts"} and out.confirm_rounds == 3
    asked.clear()
    flagged.regressions = flagged.regressions[1:]
    flagged.regressions[0] = dataclasses.replace(flagged.regressions[0], config=counted.with_(metrics=("op_counts",)))
    out = confirm_comparison(flagged, ConfirmRequest(rounds=3))
    assert asked == [(0, (("op_counts",),))] * 2 and out.confirm_rounds == 1
    assert [f.metric for f in out.regressions] == ["op_counts"]
