"""Bisection drivers over a generated git repository and local package versions.

The repository holds a tiny package ``slowpkg`` whose ``work()`` loops ``ITERATIONS``
times; one commit raises the count by 30% (the planted regression). The git, build,
skip and cache mechanics run with an injected, deterministic measurement that reads the
built package's ``ITERATIONS`` in the point's own interpreter (so it also proves each
point sees its own build); one end-to-end test times a ``--model-file`` plugin model
for real through the CLI.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from torchgauge.cli import main
from torchgauge.config import RunConfig
from torchgauge.workflows.bisect import (
    DEFAULT_REPEAT,
    BisectSetupError,
    BuildFailed,
    GitRange,
    Judging,
    MeasureSpec,
    Point,
    PointEnv,
    VersionRange,
    run_bisect,
)

# The planted-slowdown repository, shared with benchmarks/bisect_accuracy.py (tests are not a package).
_SPEC = importlib.util.spec_from_file_location(
    "slowpkg_repo", Path(__file__).resolve().parents[1] / "fixtures" / "slowpkg_repo.py"
)
slowpkg_repo = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(slowpkg_repo)

N_COMMITS = slowpkg_repo.N_COMMITS
BASE_ITERATIONS = slowpkg_repo.BASE_ITERATIONS
CULPRIT = 20  # index in good..bad (0 is the good endpoint)
BROKEN = 15  # fails to build; also the first point a 32-point search probes
CHEAP_BUILD = slowpkg_repo.BUILD
SPEC = MeasureSpec(models=("slowpkg_work",), modes=("eval",), base=RunConfig(model="", size="smoke", repeat=15))
LABEL = "slowpkg_work/eval/cpu/fp32/eager"
_PKG, _PYPROJECT, PLUGIN = slowpkg_repo.PACKAGE, slowpkg_repo.PYPROJECT, slowpkg_repo.PLUGIN
_git, _make_repo = slowpkg_repo.git, slowpkg_repo.make_repo


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    path = tmp_path_factory.mktemp("bisect") / "slowpkg"
    shas = _make_repo(path, {CULPRIT: int(BASE_ITERATIONS * 1.3)}, broken={BROKEN})
    return path, shas


class _FakeMeasure:
    """Deterministic 'timing': the built package's ITERATIONS, read in the point's interpreter."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, point_env: PointEnv, spec: MeasureSpec):
        out = subprocess.run(
            [point_env.python, "-c", "import slowpkg; print(slowpkg.ITERATIONS)"],
            env=point_env.env,
            cwd=point_env.cwd,
            capture_output=True,
            text=True,
            check=True,
        )
        iterations = int(out.stdout)
        self.seen.append(iterations)
        # 15 distinct samples around iterations/1000 ms: a clean 30% step, 1% spread
        return {c.label(): [iterations / 1000 * (1 + 0.001 * k) for k in range(15)] for c in spec.configs()}


def _git_range(repo, tmp_path, build=CHEAP_BUILD, **kw):
    path, shas = repo
    return GitRange(path, shas[0], shas[-1], build, workdir=tmp_path / "work", pythonpath=["."], **kw)


def test_git_bisection_skips_the_broken_build_and_caches(repo, tmp_path):
    path, shas = repo
    status_before = _git(path, "status", "--porcelain")
    measure = _FakeMeasure()
    report = run_bisect(_git_range(repo, tmp_path), SPEC, measure=measure, cache_dir=tmp_path / "cache")
    outcome = report.outcomes[0]
    assert outcome.status == "bisected" and outcome.direction == "regression"
    assert outcome.change == pytest.approx(0.3, abs=0.001)
    culprit = outcome.culprits[0]
    assert culprit.reason == "found"
    first_bad = culprit.first_bad
    assert first_bad["commit"] == shas[CULPRIT]
    assert first_bad["subject"] == "make work() slower (ITERATIONS=26000)"
    assert (first_bad["files_changed"], first_bad["insertions"], first_bad["deletions"]) == (1, 2, 2)
    assert first_bad["files"] == ["slowpkg/__init__.py"]
    assert culprit.last_good == shas[CULPRIT - 1][:10]
    assert report.skipped_points == [shas[BROKEN][:10]]
    assert report.measured_points <= 7  # the bound, endpoints included
    assert report.builds == report.measured_points + 1  # + the broken one
    # each endpoint is measured in two fresh processes before the range is judged
    assert report.measurements == len(measure.seen) == report.measured_points + 2
    # the user's checkout is untouched and the scratch worktree is gone
    assert _git(path, "status", "--porcelain") == status_before
    assert _git(path, "rev-parse", "HEAD").strip() == shas[-1]
    assert len(_git(path, "worktree", "list").splitlines()) == 1

    again = _FakeMeasure()
    cached = run_bisect(_git_range(repo, tmp_path), SPEC, measure=again, cache_dir=tmp_path / "cache")
    assert cached.builds == 0 and again.seen == []
    assert cached.cache_hits == report.measured_points + 1
    assert cached.outcomes[0].culprits[0].first_bad["commit"] == shas[CULPRIT]
    assert json.loads(json.dumps(cached.to_dict()))["outcomes"][0]["culprits"][0]["reason"] == "found"


def test_git_multiple_culprits(tmp_path):
    path = tmp_path / "two"
    shas = _make_repo(path, {5: 26_000, 11: 33_800}, n=16)
    measure = _FakeMeasure()
    source = GitRange(path, shas[0], shas[-1], CHEAP_BUILD, workdir=tmp_path / "work", pythonpath=["."])
    report = run_bisect(source, SPEC, measure=measure, multiple=True)
    culprits = report.outcomes[0].culprits
    assert [c.first_bad["commit"] for c in culprits] == [shas[5], shas[11]]
    assert [round(c.change, 3) for c in culprits] == [0.3, 0.3]
    assert report.measured_points <= 2 + 2 * 4


def test_git_endpoints_that_do_not_differ_are_reported(repo, tmp_path):
    path, shas = repo
    source = GitRange(path, shas[0], shas[CULPRIT - 1], CHEAP_BUILD, workdir=tmp_path / "w", pythonpath=["."])
    report = run_bisect(source, SPEC, measure=_FakeMeasure())
    assert not report.ok
    assert report.outcomes[0].status == "not_reproduced"
    assert "do not differ" in report.outcomes[0].message


def test_git_setup_errors_are_one_line(repo, tmp_path):
    path, shas = repo
    with pytest.raises(BisectSetupError, match="--good 'nope' is not a commit"):
        GitRange(path, "nope", shas[-1], "true", workdir=tmp_path)
    with pytest.raises(BisectSetupError, match="is not an ancestor"):
        GitRange(path, shas[-1], shas[0], "true", workdir=tmp_path)
    with pytest.raises(BisectSetupError, match="--build is empty"):
        GitRange(path, shas[0], shas[-1], " ", workdir=tmp_path)
    with pytest.raises(BisectSetupError, match="no such file"):
        VersionRange(["torch==2.12.0", "./missing.whl"], workdir=tmp_path)
    with pytest.raises(BisectSetupError, match="at least 2 entries"):
        VersionRange(["torch==2.12.0"], workdir=tmp_path)


def test_versions_installed_into_scratch_venvs(tmp_path):
    """Three local package versions, installed offline with pip; the last two are slow."""
    dirs = []
    for version, iterations in (("1.0", 20_000), ("1.1", 26_000), ("1.2", 26_000)):
        d = tmp_path / f"slowpkg-{version}"
        (d / "slowpkg").mkdir(parents=True)
        (d / "pyproject.toml").write_text(_PYPROJECT.format(version=version))
        (d / "slowpkg" / "__init__.py").write_text(_PKG.format(rev=version, iterations=iterations))
        dirs.append(str(d))
    source = VersionRange(dirs, workdir=tmp_path / "work", pip_args=("--no-index", "--no-build-isolation"))
    measure = _FakeMeasure()
    report = run_bisect(source, SPEC, measure=measure)
    # each venv saw its own version; the endpoints were measured in two processes each
    assert measure.seen == [20_000, 20_000, 26_000, 26_000, 26_000]
    culprit = report.outcomes[0].culprits[0]
    assert culprit.first_bad["version"] == dirs[1] and culprit.last_good == "slowpkg-1.0"
    assert report.builds == 3
    # nothing leaked into this interpreter's environment
    assert subprocess.run([sys.executable, "-c", "import slowpkg"], capture_output=True).returncode != 0


class _ListSource:
    """A range without git: point i 'builds' unless its level is None."""

    kind = "list"

    def __init__(self, levels) -> None:
        self.levels = levels

    def identity(self) -> str:
        return "list"

    def points(self) -> list[Point]:
        return [Point(f"p{i}", str(i), str(i)) for i in range(len(self.levels))]

    def build(self, point: Point) -> PointEnv:
        if self.levels[int(point.ref)] is None:
            raise BuildFailed("planted build failure")
        return PointEnv(sys.executable, {"POINT": point.ref}, ".")  # the measure reads POINT

    def describe(self, point: Point) -> dict:
        return {"level": self.levels[int(point.ref)]}

    def close(self) -> None:
        pass


def _clean(level: float, n: int = 30) -> list[float]:
    return [level * (1 + 0.001 * k) for k in range(n)]


def test_fastest_half_sees_through_preemption():
    """Half of every point's samples inflated 5-50x at random: the fastest half still decides."""
    import random

    levels = [1.0] * 13 + [1.3] * 19
    rng = random.Random(1)

    def measure(env, spec):
        samples = _clean(levels[int(env.env["POINT"])])
        for k in rng.sample(range(30), 15):
            samples[k] *= rng.uniform(5, 50)
        return {c.label(): samples for c in spec.configs()}

    source = _ListSource(levels)
    report = run_bisect(source, SPEC, measure=measure, judging=Judging(fastest=0.5))
    outcome = report.outcomes[0]
    assert outcome.culprits[0].first_bad == {"label": "p13", "level": 1.3}
    assert outcome.culprits[0].change == pytest.approx(0.3, abs=0.01)
    assert outcome.noise < 0.07  # the spread of the compared (fastest) samples


def test_unclear_point_is_measured_again_then_assigned_to_the_nearer_end():
    # p5 first looks halfway (+14%) and then clean; p7 stays at +20% (nearer the bad end);
    # p3 (good) first ran twice as slow as the bad end (a slow process), then normally
    answers = {3: [2.6, 1.0], 5: [1.14, 1.0], 7: [1.2, 1.2]}
    levels = [1.0] * 7 + [1.3] * 9

    def measure(env, spec):
        i = int(env.env["POINT"])
        level = answers[i].pop(0) if answers.get(i) else levels[i]
        return {c.label(): _clean(level) for c in spec.configs()}

    source = _ListSource(levels)
    report = run_bisect(source, SPEC, measure=measure, judging=Judging(retries=1))
    outcome = report.outcomes[0]
    # p7 was assigned by nearness: no confident culprit, the candidates around it instead
    assert outcome.status == "uncertain" and outcome.culprits[0].reason == "uncertain"
    assert [c["label"] for c in outcome.culprits[0].candidates] == ["p7", "p8"]
    assert outcome.uncertain == ["p7"] and "assigned by nearness: p7" in outcome.message
    # p3, p5 and p7 measured twice, and both endpoints
    assert report.measurements == report.measured_points + 3 + 2


def test_deterministic_metric_and_several_configs():
    """Counts are judged by the threshold alone; each config gets its own culprit."""
    spec = MeasureSpec(models=("a", "b"), modes=("eval",), metric="op_counts")
    counts = {
        "a/eval/cpu/fp32/eager": lambda i: 100 + 50 * (i >= 9),
        "b/eval/cpu/fp32/eager": lambda i: 100 - 20 * (i >= 3),
    }

    def measure(env, spec):
        i = int(env.env["POINT"])
        return {label: [float(f(i))] for label, f in counts.items()}

    source = _ListSource([0] * 16)
    report = run_bisect(source, spec, measure=measure)
    a, b = report.outcomes
    assert (a.direction, a.culprits[0].first_bad["label"], a.p_value, a.noise) == ("regression", "p9", None, None)
    assert (b.direction, b.culprits[0].first_bad["label"]) == ("improvement", "p3")
    assert report.builds == report.measured_points  # points are shared between the configs
    assert report.metric == "op_counts"


def test_failing_model_makes_the_point_a_skip_and_bad_options_raise():
    def measure(env, spec):
        i = int(env.env["POINT"])
        value = "error: RuntimeError: planted" if i == 7 else _clean(1.0 + 0.3 * (i >= 10))
        return {c.label(): value for c in spec.configs()}

    source = _ListSource([0] * 8 + [None] + [0] * 7)  # p8 fails to build, p7's model fails
    report = run_bisect(source, SPEC, measure=measure)
    assert report.outcomes[0].culprits[0].first_bad["label"] == "p10"
    assert ("p7", "skip") in report.outcomes[0].probes and ("p8", "skip") in report.outcomes[0].probes
    assert report.skipped_points == ["p8"]  # a build failure skips the point for every config
    report = run_bisect(_ListSource([None] + [0] * 7), SPEC, measure=measure)
    assert not report.ok and report.outcomes[0].status == "error"
    assert report.outcomes[0].message == "the good endpoint p0 has no measurement: planted build failure"
    with pytest.raises(BisectSetupError, match="fastest must be in"):
        Judging(fastest=0)
    with pytest.raises(BisectSetupError, match="invalid metric 'cycles'"):
        MeasureSpec(models=("a",), metric="cycles")


@pytest.mark.slow
@pytest.mark.timing
def test_cli_end_to_end_real_timing(repo, tmp_path, capsys):
    """The issue's done-means: a plugin model timed for real finds the 30% commit in <= 7 points."""
    path, shas = repo
    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    code = main(
        [
            "bisect",
            "slowpkg_work",
            "--model-file",
            str(plugin),
            "--mode",
            "eval",
            "--size",
            "smoke",
            "--repo",
            str(path),
            "--good",
            shas[0],
            "--bad",
            shas[-1],
            "--build",
            CHEAP_BUILD,
            "--pythonpath",
            ".",
            # 60 one-millisecond steps per point, of which the fastest 20% are compared: load on
            # a shared machine only ever adds time (preempted steps measure 10-50x too slow)
            "--repeat",
            "60",
            "--warmup",
            "2",
            "--threshold",
            "7%",
            "--fastest",
            "20%",
            "--retries",
            "2",
            "--no-cache",
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    culprit = report["outcomes"][0]["culprits"][0]
    assert culprit["reason"] == "found"
    assert culprit["candidates"][0]["commit"] == shas[CULPRIT]
    assert report["measured_points"] <= 7
    assert report["skipped_points"] == [shas[BROKEN][:10]]
    assert "builds" in err


def test_thread_settings_are_pinned_and_part_of_the_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchgauge.workflows.bisect import MeasureSpec
    from torchgauge.workflows.bisect.point_cache import _host_identity

    one, two = MeasureSpec(models=("m",)), MeasureSpec(models=("m",), threads=2)
    args = one.run_args("out.json")
    assert "--threads=1" in args  # one intra-op thread unless told otherwise
    assert MeasureSpec(models=("m",), threads=None).run_args("o")[-3:] != one.run_args("o")[-3:]
    assert one.identity() != two.identity()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with_one = _host_identity()
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert _host_identity() != with_one  # a rerun under other OpenMP settings does not reuse points
    with_two = _host_identity()
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    assert _host_identity() != with_two  # nor one under other allocator settings


def test_bimodal_endpoints_make_the_culprit_uncertain():
    """Two threads on shared cores: some processes run 0.4 ms, some 24-170 ms (issue 17)."""
    levels = [1.0] * 10 + [1.5] * 6

    def measure(env, spec):
        i = int(env.env["POINT"])
        samples = _clean(levels[i])
        if i == 0:  # the good end's samples split into two modes
            samples = samples[:22] + [v * 60 for v in samples[22:]]
        return {c.label(): samples for c in spec.configs()}

    report = run_bisect(_ListSource(levels), SPEC, measure=measure, judging=Judging(retries=0))
    outcome = report.outcomes[0]
    assert outcome.status == "uncertain" and "bimodal samples at p0" in outcome.message
    assert outcome.culprits[0].reason == "uncertain" and outcome.culprits[0].first_bad is None
    # the advice names only remedies not already used (6 of 8 measured trials ran one thread)
    advice = "Re-run on a quieter machine, with --fastest 20% --repeat 60 or with --metric instructions"
    assert outcome.message.endswith(advice)
    two = run_bisect(_ListSource(levels), replace(SPEC, threads=2), measure=measure, judging=Judging(retries=0))
    assert "Re-run with --threads 1, on a quieter machine" in two.outcomes[0].message
    from torchgauge.workflows.bisect.driver import _rerun_advice

    assert "--fastest" not in _rerun_advice(SPEC, Judging(fastest=0.2))
    assert _rerun_advice(replace(SPEC, metric="instructions"), Judging()) == ". Re-run on a quieter machine"


def test_format_change_reads_large_steps_as_factors():
    from torchgauge.workflows.bisect import format_change

    assert format_change(0.123) == "+12.3%" and format_change(345.92) == "347x" and format_change(1.0) == "2x"


def _report(**overrides):
    from torchgauge.workflows.bisect.report import BisectReport, ConfigOutcome, CulpritReport

    found = CulpritReport(
        "found",
        "aaa",
        [{"label": "bbb", "commit": "b" * 40, "subject": "slow", "files_changed": 2, "insertions": 5, "deletions": 1}],
        0.3,
    )
    outcomes = [
        ConfigOutcome("m/eval", "bisected", direction="regression", change=0.31, culprits=[found], noise=0.02),
        ConfigOutcome("m/train", "not_reproduced", change=0.01, noise=0.2, message="good and bad do not differ"),
    ]
    fields = dict(
        kind="git",
        points=8,
        builds=3,
        cache_hits=1,
        measurements=4,
        measured_points=4,
        skipped_points=["ccc"],
        outcomes=outcomes,
        threshold=0.07,
        alpha=0.01,
        threads=2,
    )
    return BisectReport(**{**fields, **overrides})


def test_report_rows_warnings_and_summary():
    from torchgauge.workflows.bisect import REPORT_COLUMNS, report_rows, report_summary, report_warnings

    rows = report_rows(_report())
    assert len(REPORT_COLUMNS) == 5 and all(len(row) == 5 for row in rows)
    assert rows[0] == ["m/eval", "+31.0% regression", "aaa", "+30.0%", "bbb 'slow' (2 files, +5/-1)"]
    assert rows[1] == ["m/train", "+1.0% not_reproduced", None, None, "good and bad do not differ"]
    (noisy,) = report_warnings(_report())  # only m/train's 20% spread is above the 7% threshold
    assert noisy.startswith("m/train: the compared samples' spread (IQR) reached 20%") and "--threads 1" in noisy
    assert "--threads 1" not in report_warnings(_report(threads=1))[0]
    assert (
        report_summary(_report()) == "3 builds (1 points from cache), 4 measurements, 4 of 8 points measured, "
        "skipped: ccc"
    )


def test_cache_dir_and_judging_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from torchgauge.workflows.bisect import resolve_cache_dir
    from torchgauge.workflows.bisect.metric_facts import record_values

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert resolve_cache_dir(None) == tmp_path / "torchgauge" / "bisect"
    assert resolve_cache_dir("here") == Path("here") and resolve_cache_dir("here", no_cache=True) is None
    assert Judging.for_metric("time").threshold == 0.07
    assert Judging.for_metric("instructions").threshold < Judging.for_metric("time").threshold
    assert Judging.for_metric("flops", threshold=0.5, retries=3) == Judging(threshold=0.5, retries=3)
    assert record_values({"time_ms": {"samples": [1.0, 2.0]}}, "time") == [1.0, 2.0]
    assert record_values({"flops": {"total": 7}}, "flops") == [7] and record_values({}, "op_counts") is None


def test_fastest_fraction_that_leaves_too_few_samples_is_refused() -> None:
    """--fastest 20% of 15 repeats leaves 3 samples: 3 vs 3 never reaches alpha 0.01 (8 of 8 trials uncertain)."""
    levels = [1.0] * 10 + [1.5] * 6
    with pytest.raises(BisectSetupError, match=r"leaves 3 samples a point.*use --repeat 21 or more"):
        run_bisect(_ListSource(levels), SPEC, measure=lambda env, spec: {}, judging=Judging(fastest=0.2))
    Judging(fastest=0.2).check_power(21)  # 5 samples: p can reach 0.004
    counts = replace(SPEC, metric="instructions")  # one count a point: no rank test, no check
    report = run_bisect(
        _ListSource(levels),
        counts,
        measure=lambda env, spec: {c.label(): [levels[int(env.env["POINT"])]] for c in spec.configs()},
        judging=Judging.for_metric("instructions", fastest=0.2),
    )
    assert report.outcomes[0].status == "bisected"


def test_measure_spec_of_puts_run_fields_into_the_base_configuration() -> None:
    spec = MeasureSpec.of(["m"], ["eval"], device="cpu", size="smoke", warmup=1, metric="op_counts", threads=2)
    assert (spec.models, spec.modes, spec.metric, spec.threads) == (("m",), ("eval",), "op_counts", 2)
    assert (spec.base.size, spec.base.warmup, spec.base.repeat) == ("smoke", 1, DEFAULT_REPEAT)
    assert [(c.model, c.mode, c.size, c.metrics) for c in spec.configs()] == [("m", "eval", "smoke", ("op_counts",))]
