"""The range a bisection searches: its points, and how each is built into an interpreter.

* :class:`GitRange` lists the first-parent commits ``good..bad`` of a repository and, for
  each probed commit, checks it out in a scratch ``git worktree`` (the user's checkout is
  never touched), creates a fresh scratch virtual environment and runs the user's build
  command there (the contract is in :mod:`.venvs`). A build that exits non-zero makes the
  point a skip. The worktree is cleaned (``git clean -fdx``) between points and has no
  submodules checked out: the build command initialises them if the project needs them.
* :class:`VersionRange` installs each of an ordered list of requirements or wheel/sdist
  files into a fresh scratch virtual environment (``pip install --no-deps``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .errors import BisectSetupError, BuildFailed
from .venvs import ENV_COMMIT, ENV_WORKTREE, make_venv, point_environment, run_logged

__all__ = ["DEFAULT_BUILD_TIMEOUT_S", "GitRange", "Point", "PointEnv", "PointSource", "VersionRange"]

DEFAULT_BUILD_TIMEOUT_S = 3 * 3600.0  # building torch from source takes hours


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

    def __init__(
        self,
        repo: str | Path,
        good: str,
        bad: str,
        build: str,
        *,
        workdir: str | Path,
        python: str | None = None,
        pythonpath: Sequence[str] = (),
        build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S,
    ) -> None:
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
        if subprocess.run(
            ["git", "-C", str(self.repo), "merge-base", "--is-ancestor", self.good, self.bad], capture_output=True
        ).returncode:
            raise BisectSetupError(
                f"--good {good} is not an ancestor of --bad {bad}; accepted: good older than bad on one history"
            )

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        proc = subprocess.run(
            ["git", "-C", str(cwd or self.repo), *args], capture_output=True, text=True, errors="replace"
        )
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
        python = make_venv(self.venv)
        variables = {ENV_WORKTREE: str(self.worktree), ENV_COMMIT: point.ref}
        env = point_environment(self.venv, python, variables)
        run_logged(
            self.build_cmd, cwd=self.worktree, env=env, timeout_s=self.build_timeout_s, what=f"build of {point.label}"
        )
        measure_python = Path(self.python) if self.python else python
        if not measure_python.is_absolute():
            measure_python = self.worktree / measure_python
        if not measure_python.exists():
            raise BuildFailed(f"the build of {point.label} left no interpreter at {measure_python}")
        pythonpath = [str(self.worktree / p) for p in self.pythonpath]
        measure_env = point_environment(self.venv, python, variables, pythonpath)
        return PointEnv(str(measure_python), measure_env, str(self.workdir))

    def describe(self, point: Point) -> dict[str, Any]:
        """Subject, author, date and the size of the change (files, insertions, deletions)."""
        meta = self._git("log", "-1", "--format=%an%x00%aI%x00%s", point.ref).rstrip("\n").split("\x00")
        files, insertions, deletions = [], 0, 0
        for line in self._git("diff", "--numstat", f"{point.ref}^1", point.ref).splitlines():
            added, removed, name = line.split("\t", 2)
            files.append(name)
            insertions += int(added) if added.isdigit() else 0  # "-" for binary files
            deletions += int(removed) if removed.isdigit() else 0
        return {
            "commit": point.ref,
            "subject": meta[2],
            "author": meta[0],
            "date": meta[1],
            "files_changed": len(files),
            "insertions": insertions,
            "deletions": deletions,
            "files": files,
        }

    def close(self) -> None:
        """Remove the scratch worktree (and its registration in the repository)."""
        if self._worktree_added:
            subprocess.run(
                ["git", "-C", str(self.repo), "worktree", "remove", "--force", str(self.worktree)], capture_output=True
            )
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

    def __init__(
        self,
        specs: Sequence[str],
        *,
        workdir: str | Path,
        pip_args: Sequence[str] = (),
        build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S,
    ) -> None:
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
        python = make_venv(self.venv)
        env = point_environment(self.venv, python, {ENV_COMMIT: point.ref})
        cmd = [
            str(python),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--disable-pip-version-check",
            "--quiet",
            *self.pip_args,
            point.ref,
        ]
        run_logged(cmd, cwd=self.workdir, env=env, timeout_s=self.build_timeout_s, what=f"install of {point.label}")
        return PointEnv(str(python), env, str(self.workdir))

    def describe(self, point: Point) -> dict[str, Any]:
        return {"version": point.ref}

    def close(self) -> None:
        shutil.rmtree(self.venv, ignore_errors=True)
