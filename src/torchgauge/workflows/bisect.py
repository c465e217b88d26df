"""Bisection to the culprit commit or version: build each probed point, measure, judge.

The search itself is :mod:`torchgauge.stats.range_search` (pure); this module supplies the
points and the verdicts:

* :class:`GitRange` lists the first-parent commits ``good..bad`` of a repository and, for
  each probed commit, checks it out in a scratch ``git worktree`` (the user's checkout is
  never touched), creates a fresh scratch virtual environment and runs the user's build
  command there. A build that exits non-zero makes the point a skip.
* :class:`VersionRange` installs each of an ordered list of requirements or wheel/sdist
  files into a fresh scratch virtual environment (``pip install --no-deps``).

Each built point is measured in a fresh process (``torchgauge run --in-process`` under
the point's interpreter; the process is the isolation) and judged against both
endpoints with the test ``compare`` uses (:func:`torchgauge.stats.compare.compare_samples`:
median change >= threshold AND a one-sided Mann-Whitney U test). Measurements are cached
as JSON per (point, configuration), so a second bisection over the same range rebuilds
nothing.

The build contract: the command runs through the shell with the worktree as working
directory, the scratch venv activated (``VIRTUAL_ENV`` set, its ``bin`` first on
``PATH``, created with ``--system-site-packages`` so torch and torchgauge stay visible
without a reinstall) and these variables set:

``TORCHGAUGE_BISECT_WORKTREE``  the checkout of the commit being built
``TORCHGAUGE_BISECT_COMMIT``    its full SHA (the requirement or file in version mode)
``TORCHGAUGE_BISECT_VENV``      the scratch venv
``TORCHGAUGE_BISECT_PYTHON``    the venv's interpreter, which measures unless ``--python``

So ``--build "python -m pip install --no-deps --no-build-isolation ."`` installs into the
venv; a pure-Python package can instead skip installing and be put on ``PYTHONPATH``
with ``--pythonpath src`` (worktree-relative, applied to the measuring process). The
worktree is cleaned (``git clean -fdx``) between points and has no submodules checked
out: the build command initialises them if the project needs them.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from ..harness.threads import DEFAULT_INTRA_OP_THREADS, THREAD_ENV_VARS
from ..results.schema import ResultsFile, RunConfig
from ..results.schema import _json_safe  # strict JSON (NaN/inf -> null), as results files
from ..stats.range_search import (BAD, GOOD, SKIP, BisectionError, BisectResult, bisect_range, find_culprits, is_bimodal,
                              step_is_consistent)
from ..stats.compare import DEFAULT_ALPHA, DEFAULT_THRESHOLD, compare_samples, median, relative_change
from ..stats.deterministic import COUNT_THRESHOLD, INSTRUCTIONS_THRESHOLD, compare_counts
from ..stats.summary import summarize

__all__ = [
    "METRICS",
    "format_change",
    "DEFAULT_REPEAT",
    "DEFAULT_RETRIES",
    "ENV_COMMIT",
    "ENV_PYTHON",
    "ENV_VENV",
    "ENV_WORKTREE",
    "BisectReport",
    "BisectSetupError",
    "BuildFailed",
    "GitRange",
    "Judging",
    "MeasureSpec",
    "Point",
    "PointEnv",
    "PointStore",
    "VersionRange",
    "default_cache_dir",
    "default_threshold",
    "measure_in_subprocess",
    "run_bisect",
]

ENV_WORKTREE = "TORCHGAUGE_BISECT_WORKTREE"
ENV_COMMIT = "TORCHGAUGE_BISECT_COMMIT"
ENV_VENV = "TORCHGAUGE_BISECT_VENV"
ENV_PYTHON = "TORCHGAUGE_BISECT_PYTHON"
# Timed iterations per point: enough for the rank test to reach alpha=0.01 with margin
# (15 vs 15 samples can give p ~ 1e-8), few enough for a slow model.
DEFAULT_REPEAT = 15
# Fresh-process re-measurements of a point that looks like neither endpoint before it is
# assigned to the nearer one.
DEFAULT_RETRIES = 1
DEFAULT_BUILD_TIMEOUT_S = 3 * 3600.0  # building torch from source takes hours
DEFAULT_MEASURE_TIMEOUT_S = 1800.0
# Lines of a failed build's or measurement's output kept in the report.
LOG_TAIL_LINES = 15
# Fresh processes each endpoint is measured in before the range is judged (time only).
ENDPOINT_PROCESSES = 2
CACHE_VERSION = 2  # 2: thread settings in the key (issue 17)
# Metrics a bisection can follow -> where its per-step value sits in RunRecord.metrics
# (None: the timing samples). Counts are deterministic: one value per point, judged by the
# threshold alone (stats.deterministic), immune to machine load; instructions need valgrind.
METRICS = {
    "time": None,
    "instructions": ("instructions", "per_step"),
    "op_counts": ("op_counts", "total"),
    "flops": ("flops", "total"),
}
# Runs ``torchgauge run`` in any interpreter that can import torchgauge (no console script
# needed in a scratch venv).
_RUN_SNIPPET = "import sys; from torchgauge.cli import main; sys.exit(main(sys.argv[1:]))"


class BisectSetupError(ValueError):
    """The range or the request is unusable (unknown SHA, not an ancestor, no such file)."""


class BuildFailed(RuntimeError):
    """A point could not be built or installed; the bisection skips it."""


def _tail(text: str, n: int = LOG_TAIL_LINES) -> str:
    return "\n".join([ln for ln in text.rstrip().splitlines() if ln.strip()][-n:])


def default_threshold(metric: str) -> float:
    """The threshold ``compare`` uses for ``metric``: 7% for time, tighter for exact counts."""
    return {"time": DEFAULT_THRESHOLD, "instructions": INSTRUCTIONS_THRESHOLD}.get(metric, COUNT_THRESHOLD)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/torchgauge/bisect`` (``~/.cache/torchgauge/bisect``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torchgauge" / "bisect"


# -- points and their environments -----------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One point of the range: a commit, a requirement or a package file."""

    label: str  # short SHA, "torch==2.13.0", wheel file name
    ref: str  # full SHA, requirement, or absolute path
    identity: str  # what cached measurements are keyed on
    subject: str = ""  # commit subject (empty for versions)


@dataclass(frozen=True)
class PointEnv:
    """How to run Python in a built point."""

    python: str  # interpreter that sees the build
    env: dict[str, str]  # full environment for the measuring process
    cwd: str  # working directory for it (not the worktree: cwd is on sys.path)


class PointSource(Protocol):
    """What the bisection needs from a kind of range."""

    kind: str  # "git" or "versions"

    def identity(self) -> str: ...
    def points(self) -> list[Point]: ...
    def build(self, point: Point) -> PointEnv: ...
    def describe(self, point: Point) -> dict[str, Any]: ...
    def close(self) -> None: ...


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _make_venv(venv: Path) -> Path:
    """A fresh venv seeing this interpreter's packages (torch is never reinstalled).

    ``--system-site-packages`` exposes the *base* interpreter's packages; when torchgauge
    itself runs in a venv, a ``.pth`` file adds that venv's site-packages too (with
    ``site.addsitedir`` so editable installs' own ``.pth`` files are processed).
    """
    import site

    if venv.exists():
        shutil.rmtree(venv)
    cmd = [sys.executable, "-m", "venv", "--system-site-packages", str(venv)]
    if importlib.util.find_spec("pip") is not None:  # borrow this pip: ensurepip costs seconds
        cmd.insert(-1, "--without-pip")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildFailed(f"could not create a virtual environment at {venv}: {_tail(proc.stderr, 3)}")
    python = _venv_python(venv)
    if sys.prefix != sys.base_prefix:
        out = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
        lines = [f"import site; site.addsitedir({p!r})" for p in site.getsitepackages()]
        Path(out, "_torchgauge_parent_env.pth").write_text("\n".join(lines) + "\n")
    return python


def _point_env(venv: Path, python: Path, variables: dict[str, str], pythonpath: Sequence[str] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "__PYVENV_LAUNCHER__")}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = str(python.parent) + os.pathsep + env.get("PATH", "")
    env[ENV_VENV] = str(venv)
    env[ENV_PYTHON] = str(python)
    env.update(variables)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*pythonpath, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def _run_logged(cmd: str | list[str], *, cwd: str | Path, env: dict[str, str], timeout_s: float, what: str) -> None:
    """Run a build/install step; raise BuildFailed with the output's tail when it fails."""
    try:
        proc = subprocess.run(cmd, shell=isinstance(cmd, str), cwd=cwd, env=env, timeout=timeout_s,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    except subprocess.TimeoutExpired:
        raise BuildFailed(f"{what} timed out after {timeout_s:g} s") from None
    if proc.returncode != 0:
        tail = _tail(proc.stdout)
        raise BuildFailed(f"{what} exited with code {proc.returncode}" + (f"\n{tail}" if tail else ""))


class GitRange:
    """First-parent commits ``good..bad`` of a repository, each built in a scratch worktree.

    Args:
        repo: path of the repository (its own checkout is never modified).
        good: a commit-ish known good; bad: one known bad, a descendant of ``good``.
        build: shell command building/installing the checked-out commit (see module doc).
        workdir: scratch directory for the worktree and the venv (deleted by ``close``).
        python: interpreter measuring each point; relative paths are taken inside the
            worktree (e.g. a venv the build made there). Default: the scratch venv's.
        pythonpath: worktree-relative directories put first on the measuring PYTHONPATH.
        build_timeout_s: seconds before a build counts as failed.
    """

    kind = "git"

    def __init__(self, repo: str | Path, good: str, bad: str, build: str, *, workdir: str | Path,
                 python: str | None = None, pythonpath: Sequence[str] = (),
                 build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S) -> None:
        self.repo = Path(repo).resolve()
        if not self.repo.is_dir():
            raise BisectSetupError(f"--repo {repo}: no such directory")
        if not build.strip():
            raise BisectSetupError("--build is empty; accepted: a shell command, e.g. 'python -m pip install .'")
        if shutil.which("git") is None:
            raise BisectSetupError("git is not on PATH; git bisection needs it")
        self.build_cmd = build
        self.python = python
        self.pythonpath = tuple(pythonpath)
        self.build_timeout_s = build_timeout_s
        self.workdir = Path(workdir)
        self.worktree = self.workdir / "worktree"
        self.venv = self.workdir / "venv"
        self._worktree_added = False
        self.good = self._resolve(good, "--good")
        self.bad = self._resolve(bad, "--bad")
        if self.good == self.bad:
            raise BisectSetupError("--good and --bad are the same commit; accepted: good an ancestor of bad")
        if subprocess.run(["git", "-C", str(self.repo), "merge-base", "--is-ancestor", self.good, self.bad],
                          capture_output=True).returncode:
            raise BisectSetupError(f"--good {good} is not an ancestor of --bad {bad}; accepted: good older than bad on one history")

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        proc = subprocess.run(["git", "-C", str(cwd or self.repo), *args], capture_output=True, text=True, errors="replace")
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["(no message)"])[0]
            raise BisectSetupError(f"git {args[0]} failed in {cwd or self.repo}: {first}")
        return proc.stdout

    def _resolve(self, rev: str, option: str) -> str:
        try:
            return self._git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
        except BisectSetupError:
            raise BisectSetupError(f"{option} {rev!r} is not a commit of {self.repo}") from None

    def identity(self) -> str:
        return json.dumps(["git", self.build_cmd, self.python, self.pythonpath])

    def points(self) -> list[Point]:
        """The good commit, then every first-parent commit after it up to bad, oldest first."""
        log = self._git("log", "--first-parent", "--reverse", "--format=%H%x00%s", f"{self.good}..{self.bad}")
        subject = self._git("log", "-1", "--format=%s", self.good).strip()
        points = [Point(self.good[:10], self.good, self.good, subject)]
        for line in log.splitlines():
            sha, _, subj = line.partition("\x00")
            points.append(Point(sha[:10], sha, sha, subj))
        if points[-1].ref != self.bad:
            raise BisectSetupError(f"--bad {self.bad[:10]} is not on the first-parent history after --good")
        return points

    def build(self, point: Point) -> PointEnv:
        """Check ``point`` out in the scratch worktree, make a fresh venv, run the build."""
        if not self._worktree_added:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._git("worktree", "add", "--detach", "--force", str(self.worktree), point.ref)
            self._worktree_added = True
        else:
            self._git("checkout", "--detach", "--force", "--quiet", point.ref, cwd=self.worktree)
            self._git("clean", "-fdxq", cwd=self.worktree)  # no build outputs of the previous point
        python = _make_venv(self.venv)
        variables = {ENV_WORKTREE: str(self.worktree), ENV_COMMIT: point.ref}
        env = _point_env(self.venv, python, variables)
        _run_logged(self.build_cmd, cwd=self.worktree, env=env, timeout_s=self.build_timeout_s,
                    what=f"build of {point.label}")
        measure_python = Path(self.python) if self.python else python
        if not measure_python.is_absolute():
            measure_python = self.worktree / measure_python
        if not measure_python.exists():
            raise BuildFailed(f"the build of {point.label} left no interpreter at {measure_python}")
        pythonpath = [str(self.worktree / p) for p in self.pythonpath]
        return PointEnv(str(measure_python), _point_env(self.venv, python, variables, pythonpath), str(self.workdir))

    def describe(self, point: Point) -> dict[str, Any]:
        """Subject, author, date and the size of the change (files, insertions, deletions)."""
        meta = self._git("log", "-1", "--format=%an%x00%aI%x00%s", point.ref).rstrip("\n").split("\x00")
        files, insertions, deletions = [], 0, 0
        for line in self._git("diff", "--numstat", f"{point.ref}^1", point.ref).splitlines():
            added, removed, name = line.split("\t", 2)
            files.append(name)
            insertions += int(added) if added.isdigit() else 0  # "-" for binary files
            deletions += int(removed) if removed.isdigit() else 0
        return {"commit": point.ref, "subject": meta[2], "author": meta[0], "date": meta[1],
                "files_changed": len(files), "insertions": insertions, "deletions": deletions, "files": files}

    def close(self) -> None:
        """Remove the scratch worktree (and its registration in the repository)."""
        if self._worktree_added:
            subprocess.run(["git", "-C", str(self.repo), "worktree", "remove", "--force", str(self.worktree)],
                           capture_output=True)
            subprocess.run(["git", "-C", str(self.repo), "worktree", "prune"], capture_output=True)
            self._worktree_added = False
        shutil.rmtree(self.venv, ignore_errors=True)


_FILE_SUFFIXES = (".whl", ".tar.gz", ".zip", ".tar.bz2")


class VersionRange:
    """An ordered list of requirements or package files, each installed in a scratch venv.

    Args:
        specs: oldest (good) first; each a requirement (``torch==2.12.0``), a wheel or sdist
            file, or a package directory.
        workdir: scratch directory for the venv.
        pip_args: extra ``pip install`` arguments (``--index-url ...``, ``--no-index``).
    """

    kind = "versions"

    def __init__(self, specs: Sequence[str], *, workdir: str | Path, pip_args: Sequence[str] = (),
                 build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S) -> None:
        specs = [s.strip() for s in specs if s.strip()]
        if len(specs) < 2:
            raise BisectSetupError(f"--versions needs at least 2 entries (good first, bad last), got {len(specs)}")
        self.specs: list[str] = []
        for spec in specs:
            looks_like_path = spec.endswith(_FILE_SUFFIXES) or os.sep in spec or spec.startswith(".")
            if looks_like_path:
                if not Path(spec).exists():
                    raise BisectSetupError(f"--versions entry {spec!r}: no such file or directory")
                spec = str(Path(spec).resolve())
            self.specs.append(spec)
        if len(set(self.specs)) != len(self.specs):
            raise BisectSetupError("--versions lists an entry twice; accepted: distinct versions, oldest first")
        self.pip_args = tuple(pip_args)
        self.build_timeout_s = build_timeout_s
        self.workdir = Path(workdir)
        self.venv = self.workdir / "venv"

    def identity(self) -> str:
        return json.dumps(["versions", self.pip_args])

    def points(self) -> list[Point]:
        points = []
        for spec in self.specs:
            path = Path(spec)
            if path.is_absolute() and path.exists():
                st = path.stat()  # a rebuilt file of the same name is a new point
                points.append(Point(path.name, spec, f"{spec}:{st.st_size}:{st.st_mtime_ns}"))
            else:
                points.append(Point(spec, spec, spec))
        return points

    def build(self, point: Point) -> PointEnv:
        """A fresh venv with ``point`` installed (``pip install --no-deps``)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        python = _make_venv(self.venv)
        env = _point_env(self.venv, python, {ENV_COMMIT: point.ref})
        cmd = [str(python), "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "--quiet",
               *self.pip_args, point.ref]
        _run_logged(cmd, cwd=self.workdir, env=env, timeout_s=self.build_timeout_s, what=f"install of {point.label}")
        return PointEnv(str(python), env, str(self.workdir))

    def describe(self, point: Point) -> dict[str, Any]:
        return {"version": point.ref}

    def close(self) -> None:
        shutil.rmtree(self.venv, ignore_errors=True)


# -- measuring -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasureSpec:
    """What is re-measured at each point: the flagged models and configuration."""

    models: tuple[str, ...]
    modes: tuple[str, ...] = ("train", "eval")
    device: str = "cpu"
    precision: str = "fp32"
    backend: str = "eager"
    batch_size: int | None = None
    size: str = "full"
    repeat: int = DEFAULT_REPEAT
    warmup: int = 3
    model_files: tuple[str, ...] = ()  # absolute paths
    metric: str = "time"  # a key of METRICS
    # intra-op threads of every measurement (`torchgauge run --threads`; None: one per CPU).
    # One by default: two threads on two shared cores gave bimodal samples (issue 17).
    threads: int | None = DEFAULT_INTRA_OP_THREADS

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise BisectSetupError(f"invalid metric {self.metric!r}; accepted: {', '.join(METRICS)}")
        if not self.models or not self.modes:
            raise BisectSetupError("nothing to measure: give at least one model and one mode")

    @property
    def deterministic(self) -> bool:
        return METRICS[self.metric] is not None

    def configs(self) -> list[RunConfig]:
        """One RunConfig per (model, mode), as ``torchgauge run`` plans them."""
        from ..config import plan

        return plan(self.models, modes=self.modes, batch_size=self.batch_size, device=self.device,
                    precision=self.precision, backend=self.backend, size=self.size, repeat=self.repeat,
                    warmup=self.warmup, metrics=(self.metric,))

    def identity(self) -> str:
        """Cache key part: the spec plus the model files' contents (an edited file re-measures)."""
        files = {p: hashlib.sha1(Path(p).read_bytes()).hexdigest() for p in self.model_files}
        doc = {k: v for k, v in asdict(self).items() if k != "model_files"}
        return json.dumps([doc, files], sort_keys=True, default=list)

    def run_args(self, output: str) -> list[str]:
        """``torchgauge run`` arguments measuring every config in one process."""
        mode = self.modes[0] if len(self.modes) == 1 else "both"
        # --opt=value binds each value to its option and the names follow "--": no value
        # or name (say one read back from the point cache) can be parsed as an option
        args = ["run", f"--mode={mode}", f"--device={self.device}", f"--precision={self.precision}",
                f"--backend={self.backend}", f"--size={self.size}", f"--repeat={self.repeat}",
                f"--warmup={self.warmup}", f"--metrics={self.metric}", "--in-process", "--quiet", f"--output={output}"]
        if self.batch_size is not None:
            args.append(f"--batch-size={self.batch_size}")
        args.append(f"--threads={'all' if self.threads is None else self.threads}")
        args += [f"--model-file={path}" for path in self.model_files]
        return [*args, "--", *self.models]


# label -> timing samples (ms) or [count] for a deterministic metric, or the run's error
Measurement = dict[str, "list[float] | str"]
MeasureFn = Callable[[PointEnv, MeasureSpec], Measurement]


def measure_in_subprocess(point_env: PointEnv, spec: MeasureSpec, *,
                          timeout_s: float = DEFAULT_MEASURE_TIMEOUT_S) -> Measurement:
    """Measure every config of ``spec`` in one fresh process under the point's interpreter.

    Raises:
        BuildFailed: the process produced no results file (torchgauge or torch cannot be
            imported there, a crash); the point is skipped.
    """
    with tempfile.TemporaryDirectory(prefix="torchgauge-bisect-run-") as tmp:
        output = os.path.join(tmp, "results.json")
        cmd = [point_env.python, "-c", _RUN_SNIPPET, *spec.run_args(output)]
        # bisection points are not history: keep them out of the user's run database
        env = {k: v for k, v in point_env.env.items() if k != "TORCHGAUGE_DB"}
        try:
            proc = subprocess.run(cmd, cwd=point_env.cwd, env=env, timeout=timeout_s,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        except subprocess.TimeoutExpired:
            raise BuildFailed(f"measurement timed out after {timeout_s:g} s") from None
        if not os.path.exists(output):
            raise BuildFailed(f"measurement exited with code {proc.returncode} without results\n{_tail(proc.stdout)}")
        try:
            results = ResultsFile.from_dict(json.loads(Path(output).read_text()))
        except ValueError as exc:  # SchemaError and JSONDecodeError are ValueErrors
            raise BuildFailed(f"unreadable results from the measurement: {exc}") from None
    out: Measurement = {}
    path = METRICS[spec.metric]
    for record in results.runs:
        if path is None:
            values = (record.metrics.get("time_ms") or {}).get("samples")
        else:
            value = (record.metrics.get(path[0]) or {}).get(path[1])
            values = [value] if value is not None else None
        if record.ok and values:
            out[record.config.label()] = [float(v) for v in values]
        else:
            error = (record.error or f"no {spec.metric} values").splitlines()[-1]
            out[record.config.label()] = f"{record.status}: {error}"
    return out


# -- points built and measured on demand, cached ---------------------------------------------


@dataclass
class _PointData:
    groups: dict[str, list[list[float]]] = field(default_factory=dict)  # label -> samples per process
    errors: dict[str, str] = field(default_factory=dict)  # label -> why this config has no samples
    build_error: str | None = None  # set when the point is skipped altogether


def _host_identity() -> list[str]:
    """Machine and base environment: a cache shared by several hosts (or surviving a torch
    upgrade of the base environment) must not mix their timings."""
    import importlib.metadata
    import platform

    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = ""
    # the thread environment changes timings as much as the threads themselves
    thread_env = {k: os.environ[k] for k in THREAD_ENV_VARS if k in os.environ}
    return [platform.node(), platform.machine(), sys.executable, torch_version, json.dumps(thread_env, sort_keys=True)]


class PointStore:
    """Builds and measures points on demand; caches each point's measurements as JSON.

    Cache files live in ``cache_dir/<sha1>.json`` keyed by the host and base environment,
    the source (build command or pip arguments), the point (commit SHA, requirement, file)
    and the :class:`MeasureSpec`.
    A failed build is cached too (builds can take hours); delete the file or pass
    ``cache_dir=None`` to retry it.
    """

    def __init__(self, source: PointSource, spec: MeasureSpec, *, measure: MeasureFn | None = None,
                 cache_dir: str | Path | None = None, on_event: Callable[[str], None] | None = None) -> None:
        self.source = source
        self.spec = spec
        self.measure = measure or measure_in_subprocess
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.on_event = on_event or (lambda message: None)
        self.points = source.points()
        self.labels = [c.label() for c in spec.configs()]
        self.builds = 0  # builds (or installs) actually run
        self.cache_hits = 0
        self.measurements = 0  # measuring processes run
        self._data: dict[int, _PointData] = {}
        self._built: tuple[int, PointEnv] | None = None

    def _cache_path(self, index: int) -> Path | None:
        if self.cache_dir is None:
            return None
        key = json.dumps([CACHE_VERSION, _host_identity(), self.source.identity(), self.points[index].identity,
                          self.spec.identity()])
        return self.cache_dir / f"{hashlib.sha1(key.encode()).hexdigest()}.json"

    def _save(self, index: int) -> None:
        path = self._cache_path(index)
        if path is None:
            return
        point, data = self.points[index], self._data[index]
        doc = {"cache_version": CACHE_VERSION, "point": point.label, "ref": point.ref,
               "saved_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               "build_error": data.build_error, "groups": data.groups, "errors": data.errors}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, path)  # atomic: an interrupted bisection leaves whole files only

    def _load(self, index: int) -> _PointData | None:
        path = self._cache_path(index)
        if path is None or not path.exists():
            return None
        try:
            doc = json.loads(path.read_text())
            return _PointData(groups=doc["groups"], errors=doc["errors"], build_error=doc["build_error"])
        except (OSError, ValueError, KeyError):
            return None  # unreadable cache entry: measure again

    def _build(self, index: int) -> PointEnv:
        if self._built is not None and self._built[0] == index:
            return self._built[1]
        point = self.points[index]
        self.on_event(f"building {point.label}" + (f" ({point.subject})" if point.subject else ""))
        self.builds += 1
        self._built = None
        env = self.source.build(point)
        self._built = (index, env)
        return env

    def _measure_once(self, index: int, data: _PointData) -> None:
        try:
            env = self._build(index)
            self.measurements += 1
            result = self.measure(env, self.spec)
        except BuildFailed as exc:
            data.build_error = str(exc)
            self.on_event(f"skipping {self.points[index].label}: {str(exc).splitlines()[0]}")
            return
        for label in self.labels:
            value = result.get(label, "error: no result for this configuration")
            if isinstance(value, str):
                data.errors[label] = value
            else:
                data.groups.setdefault(label, []).append(list(value))
                data.errors.pop(label, None)

    def data(self, index: int) -> _PointData:
        """The point's measurements, from memory, the cache, or a build and a measurement."""
        if index not in self._data:
            cached = self._load(index)
            if cached is not None:
                self.cache_hits += 1
                self._data[index] = cached
            else:
                data = self._data[index] = _PointData()
                self._measure_once(index, data)
                self._save(index)
        return self._data[index]

    def groups(self, index: int, label: str) -> list[list[float]] | None:
        """Samples of one config at a point, one list per measuring process; None for a skip."""
        data = self.data(index)
        if data.build_error is not None or not data.groups.get(label):
            return None
        return data.groups[label]

    def samples(self, index: int, label: str) -> list[float] | None:
        """Every sample of one config at a point, pooled over processes; None for a skip."""
        groups = self.groups(index, label)
        return None if groups is None else [v for group in groups for v in group]

    def remeasure(self, index: int) -> None:
        """One more fresh-process measurement of a point (rebuilding it if needed)."""
        data = self.data(index)
        if data.build_error is None:
            self._measure_once(index, data)
            self._save(index)

    def skip_reason(self, index: int, label: str) -> str:
        data = self.data(index)
        return data.build_error or data.errors.get(label, "")


# -- judging and the report --------------------------------------------------------------------


@dataclass
class CulpritReport:
    """One culprit of one configuration."""

    reason: str  # "found", "skipped" (candidates hidden by failed builds), "gradual", or "uncertain"
    # (bimodal or overlapping evidence: any candidate may be the culprit; ConfigOutcome.message says why)
    last_good: str  # point label
    candidates: list[dict[str, Any]]  # label, subject and describe() of each candidate
    change: float | None  # relative change of the median, last good -> first bad

    @property
    def first_bad(self) -> dict[str, Any] | None:
        return self.candidates[0] if self.reason == "found" else None


@dataclass
class ConfigOutcome:
    """The bisection of one configuration (model/mode/...)."""

    config: str  # RunConfig.label()
    status: str  # "bisected", "uncertain" (culprit candidates, no single one), "not_reproduced" or "error"
    direction: str | None = None  # "regression" or "improvement" (good -> bad)
    change: float | None = None  # relative median change good -> bad
    p_value: float | None = None
    culprits: list[CulpritReport] = field(default_factory=list)
    probes: list[tuple[str, str]] = field(default_factory=list)  # (point label, verdict)
    uncertain: list[str] = field(default_factory=list)  # points assigned to the nearer end
    noise: float | None = None  # largest IQR / median of one point's judged samples (time only)
    message: str = ""


@dataclass
class BisectReport:
    """Everything a bisection found, JSON-ready via :meth:`to_dict`."""

    kind: str  # "git" or "versions"
    points: int  # points in the range, endpoints included
    builds: int
    cache_hits: int
    measurements: int
    measured_points: int  # distinct points with measurements (endpoints included)
    skipped_points: list[str]
    outcomes: list[ConfigOutcome]
    threshold: float
    alpha: float
    metric: str = "time"
    threads: int | None = None  # intra-op threads of the measurements (None: one per CPU)

    @property
    def ok(self) -> bool:
        return bool(self.outcomes) and all(o.status == "bisected" for o in self.outcomes)

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))


_OPPOSITE = {"regression": "improvement", "improvement": "regression"}


@dataclass(frozen=True)
class Judging:
    """How points are judged; the defaults are ``compare``'s."""

    threshold: float = DEFAULT_THRESHOLD  # relative median change that counts
    alpha: float = DEFAULT_ALPHA  # significance level of the one-sided rank test
    retries: int = DEFAULT_RETRIES  # fresh re-measurements of an unclear point
    # Fraction of each point's fastest timing samples that is compared (1.0: all, as
    # ``compare`` does). Machine load only ever adds time, so on a shared machine the
    # fastest half still shows the code's speed when preemption inflates the rest.
    fastest: float = 1.0

    def __post_init__(self) -> None:
        if self.threshold <= 0:
            raise BisectSetupError(f"threshold must be > 0, got {self.threshold}")
        if not 0 < self.alpha < 1:
            raise BisectSetupError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.retries < 0:
            raise BisectSetupError(f"retries must be >= 0, got {self.retries}")
        if not 0 < self.fastest <= 1:
            raise BisectSetupError(f"fastest must be in (0, 1], got {self.fastest}")


class _ConfigJudge:
    """Verdicts for one configuration: like the good end, like the bad end, or a skip."""

    def __init__(self, store: PointStore, label: str, n: int, judging: Judging) -> None:
        self.store, self.label, self.n, self.judging = store, label, n, judging
        self.direction: str | None = None
        self.uncertain: list[str] = []

    def samples(self, index: int) -> list[float] | None:
        """The point's values as judged.

        For time: the process with the lowest median when the point was measured more than
        once (load only ever slows a process down, so the fastest one is the least
        disturbed; pooling would mix a slow process into the verdict), then the fastest
        fraction of its samples. For counts: the latest measurement.
        """
        groups = self.store.groups(index, self.label)
        if groups is None:
            return None
        if self.store.spec.deterministic:
            return groups[-1]
        values = min(groups, key=median)
        if self.judging.fastest >= 1:
            return values
        return sorted(values)[: max(1, math.ceil(len(values) * self.judging.fastest))]

    def compare(self, base: list[float], new: list[float]):
        """``compare``'s test: rank test + threshold for time, the threshold alone for counts."""
        if self.store.spec.deterministic:
            return compare_counts(median(base), median(new), threshold=self.judging.threshold)
        return compare_samples(base, new, threshold=self.judging.threshold, alpha=self.judging.alpha)

    def endpoints(self) -> tuple[Any, str]:
        """Compare the endpoints; returns (Change, message) and sets the direction.

        For time, each endpoint is first measured in :data:`ENDPOINT_PROCESSES` fresh
        processes: one slow process at an end must not make the whole range look unchanged
        (a doubling used to read ``not_reproduced``) or changed.
        """
        if not self.store.spec.deterministic:
            for index in (0, self.n - 1):
                for _ in range(ENDPOINT_PROCESSES):
                    groups = self.store.groups(index, self.label)
                    if groups is None or len(groups) >= ENDPOINT_PROCESSES:
                        break
                    self.store.on_event(f"re-measuring the endpoint {self.store.points[index].label} in a fresh process")
                    self.store.remeasure(index)
        good, bad = self.samples(0), self.samples(self.n - 1)
        for index, samples, which in ((0, good, "good"), (self.n - 1, bad, "bad")):
            if samples is None:
                reason = (self.store.skip_reason(index, self.label) or "no samples").splitlines()[0]
                return None, f"the {which} endpoint {self.store.points[index].label} has no measurement: {reason}"
        change = self.compare(good, bad)
        if change.verdict != "unchanged":
            self.direction = change.verdict
        return change, ""

    def classify(self, index: int) -> str:
        """GOOD/BAD/SKIP for :func:`bisect_range`, judged against both endpoints.

        A point is bad when it differs from the good end in the endpoints' direction and
        not from the bad end; good when it differs from the bad end the opposite way and
        not from the good end. Anything else (between the ends, beyond either end: noise,
        a process that ran slow, an intermediate step) is re-measured in a fresh process;
        if still unclear the point goes to the end whose median is nearer in log-ratio and
        is listed as uncertain.
        """
        if index in (0, self.n - 1):  # judged by endpoints() already
            return GOOD if index == 0 else BAD
        good, bad = self.samples(0), self.samples(self.n - 1)
        for attempt in range(self.judging.retries + 1):
            x = self.samples(index)
            if x is None:
                return SKIP
            vs_good, vs_bad = self.compare(good, x).verdict, self.compare(bad, x).verdict
            if vs_good == self.direction and vs_bad == "unchanged":
                return BAD
            if vs_good == "unchanged" and vs_bad == _OPPOSITE[self.direction]:
                return GOOD
            if attempt < self.judging.retries and not self.store.spec.deterministic:
                self.store.on_event(f"{self.store.points[index].label} is unclear for {self.label}; measuring again")
                self.store.remeasure(index)
        self.uncertain.append(self.store.points[index].label)
        mg, mb, mx = median(good), median(bad), median(x)
        if min(mg, mb, mx) <= 0:  # counts can be 0: compare distances instead of ratios
            return GOOD if abs(mx - mg) <= abs(mx - mb) else BAD
        return GOOD if abs(math.log(mx / mg)) <= abs(math.log(mx / mb)) else BAD

    def differs(self, i: int, j: int) -> bool:
        """For :func:`find_culprits`: points i < j differ beyond threshold and noise."""
        return self.compare(self.samples(i), self.samples(j)).verdict != "unchanged"

    def change(self, i: int, j: int) -> float | None:
        """Relative change of the judged medians from point i to point j."""
        a, b = self.samples(i), self.samples(j)
        return relative_change(median(a), median(b)) if a and b else None

    def doubts(self, last_good: int, first_bad: int, total: float) -> list[str]:
        """Why a found culprit is not certain: bimodal samples around it, a step that cannot
        explain the endpoints' change, or points between assigned by nearness (time only)."""
        if self.store.spec.deterministic:
            return []
        points, reasons = self.store.points, []
        for index in sorted({0, last_good, first_bad, self.n - 1}):
            judged = self.samples(index)  # after --fastest: a deliberately dropped slow mode is no doubt
            if judged and is_bimodal(judged):
                reasons.append(f"bimodal samples at {points[index].label}")
        step = self.change(last_good, first_bad)
        if step is not None and not step_is_consistent(step, total, self.judging.threshold):
            reasons.append(f"the step {format_change(step)} does not match the endpoints' {format_change(total)}")
        if self.uncertain:
            reasons.append(f"points assigned by nearness: {', '.join(self.uncertain)}")
        return reasons


def run_bisect(
    source: PointSource,
    spec: MeasureSpec,
    *,
    measure: MeasureFn | None = None,
    judging: Judging = Judging(),
    multiple: bool = False,
    cache_dir: str | Path | None = None,
    on_event: Callable[[str], None] | None = None,
) -> BisectReport:
    """Bisect every configuration of ``spec`` over ``source``'s range; points are shared.

    Each probed point is built once and measured for all configurations in one process,
    so bisecting several flagged models costs about as many builds as one.

    Args:
        source: a :class:`GitRange` or :class:`VersionRange`.
        spec: the models, configuration and metric to re-measure.
        measure: ``measure(point_env, spec) -> {config label: values | error}``; the
            default runs ``torchgauge run`` in a fresh process (tests inject their own).
        judging: threshold, alpha, retries (defaults: ``compare``'s 7% and 0.01).
        multiple: find every change in the range, not just the first bad point.
        cache_dir: where measurements are cached (None: no cache).
        on_event: called with one-line progress messages.

    Returns:
        A :class:`BisectReport`; the source is closed (scratch worktree removed) on return.

    Example:
        >>> source = GitRange("~/pytorch", "v2.12.0", "main", "python setup.py develop",
        ...                   workdir="/tmp/bisect")  # doctest: +SKIP
        >>> report = run_bisect(source, MeasureSpec(models=("resnet50",), modes=("eval",)))  # doctest: +SKIP
        >>> report.outcomes[0].culprits[0].first_bad["subject"]  # doctest: +SKIP
    """
    try:
        store = PointStore(source, spec, measure=measure, cache_dir=cache_dir, on_event=on_event)
        n = len(store.points)
        outcomes = [_bisect_config(store, label, n, judging, multiple) for label in store.labels]
    finally:
        source.close()
    measured = sorted(i for i, d in store._data.items() if d.build_error is None)
    skipped = [store.points[i].label for i, d in sorted(store._data.items()) if d.build_error is not None]
    return BisectReport(kind=source.kind, points=n, builds=store.builds, cache_hits=store.cache_hits,
                        measurements=store.measurements, measured_points=len(measured), skipped_points=skipped,
                        outcomes=outcomes, threshold=judging.threshold, alpha=judging.alpha, metric=spec.metric, threads=spec.threads)


def _bisect_config(store: PointStore, label: str, n: int, judging: Judging, multiple: bool) -> ConfigOutcome:
    judge = _ConfigJudge(store, label, n, judging)
    change, message = judge.endpoints()
    if change is None:
        return ConfigOutcome(label, "error", message=message)
    outcome = ConfigOutcome(label, "bisected", direction=judge.direction, change=change.change, p_value=change.p_value)
    if judge.direction is None:
        outcome.status = "not_reproduced"
        outcome.noise = _noise(judge, (0, n - 1))
        test = "" if change.p_value is None else f", p={change.p_value:.3g} (alpha {judging.alpha:g})"
        outcome.message = (f"good and bad do not differ: {store.spec.metric} change {change.change:+.1%}"
                           f"{test}, threshold {judging.threshold:.0%}")
        return outcome
    store.on_event(f"{label}: {judge.direction} of {change.change:+.1%} between the endpoints; bisecting")
    try:
        if multiple:
            result: BisectResult = find_culprits(n, lambda i: judge.samples(i) is not None, judge.differs)
        else:
            result = bisect_range(n, judge.classify)
    except BisectionError as exc:
        outcome.status, outcome.message = "error", str(exc)
        return outcome
    points = store.points
    doubts: list[str] = []
    for culprit in result.culprits:
        indices, reason = list(culprit.candidates), culprit.reason
        culprit_doubts = judge.doubts(culprit.last_good, indices[-1], change.change) if reason == "found" else []
        if culprit_doubts:  # name every point the evidence allows, not one confident culprit
            labels = {p.label: i for i, p in enumerate(points)}
            nearby = {labels[u] for u in judge.uncertain} | {labels[u] + 1 for u in judge.uncertain}
            indices = sorted({*indices, *(i for i in nearby if 0 < i < n)})
            reason = "uncertain"
            doubts += culprit_doubts
        candidates = [{"label": points[i].label, **store.source.describe(points[i])} for i in indices]
        outcome.culprits.append(CulpritReport(reason, points[culprit.last_good].label, candidates,
                                              judge.change(culprit.last_good, culprit.candidates[-1])))
    if doubts:
        outcome.status = "uncertain"
        outcome.message = ("the evidence does not single out one culprit: " + "; ".join(dict.fromkeys(doubts))
                           + ". Re-run with --threads 1 on a quieter machine or with --metric instructions")
    outcome.probes = [(points[i].label, v) for i, v in result.probes]
    outcome.uncertain = judge.uncertain
    outcome.noise = _noise(judge, [i for i, _ in result.probes])
    return outcome


def format_change(change: float) -> str:
    """``+12.3%`` below a doubling, ``3.46x`` from there (a +34,592% step reads 346.9x)."""
    return f"{change:+.1%}" if -0.5 < change < 1.0 else f"{1 + change:.3g}x"


def _noise(judge: _ConfigJudge, indices: Sequence[int]) -> float | None:
    """Largest IQR/median of the samples judged at these points (None for counts)."""
    if judge.store.spec.deterministic:
        return None
    spreads = [summarize(s).relative_iqr for i in indices if (s := judge.samples(i))]
    return max(spreads, default=None)
