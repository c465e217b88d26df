"""Scratch virtual environments a bisection point is built and measured in.

The build contract: the build command runs through the shell with the worktree as working
directory, the scratch venv activated (``VIRTUAL_ENV`` set, its ``bin`` first on ``PATH``,
created with ``--system-site-packages`` so torch and torchgauge stay visible without a
reinstall) and these variables set:

``TORCHGAUGE_BISECT_WORKTREE``  the checkout of the commit being built
``TORCHGAUGE_BISECT_COMMIT``    its full SHA (the requirement or file in version mode)
``TORCHGAUGE_BISECT_VENV``      the scratch venv
``TORCHGAUGE_BISECT_PYTHON``    the venv's interpreter, which measures unless ``--python``

So ``--build "python -m pip install --no-deps --no-build-isolation ."`` installs into the
venv; a pure-Python package can instead skip installing and be put on ``PYTHONPATH`` with
``--pythonpath src`` (worktree-relative, applied to the measuring process).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import BuildFailed, output_tail

__all__ = ["ENV_COMMIT", "ENV_PYTHON", "ENV_VENV", "ENV_WORKTREE", "make_venv", "point_environment", "run_logged"]

ENV_WORKTREE = "TORCHGAUGE_BISECT_WORKTREE"
ENV_COMMIT = "TORCHGAUGE_BISECT_COMMIT"
ENV_VENV = "TORCHGAUGE_BISECT_VENV"
ENV_PYTHON = "TORCHGAUGE_BISECT_PYTHON"


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def make_venv(venv: Path) -> Path:
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
        raise BuildFailed(f"could not create a virtual environment at {venv}: {output_tail(proc.stderr, 3)}")
    python = _venv_python(venv)
    if sys.prefix != sys.base_prefix:
        out = subprocess.run(
            [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        lines = [f"import site; site.addsitedir({p!r})" for p in site.getsitepackages()]
        Path(out, "_torchgauge_parent_env.pth").write_text("\n".join(lines) + "\n")
    return python


def point_environment(
    venv: Path, python: Path, variables: dict[str, str], pythonpath: Sequence[str] = ()
) -> dict[str, str]:
    """This process's environment with ``venv`` activated, the contract's variables and
    ``pythonpath`` put first on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "__PYVENV_LAUNCHER__")}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = str(python.parent) + os.pathsep + env.get("PATH", "")
    env[ENV_VENV] = str(venv)
    env[ENV_PYTHON] = str(python)
    env.update(variables)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*pythonpath, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def run_logged(cmd: str | list[str], *, cwd: str | Path, env: dict[str, str], timeout_s: float, what: str) -> None:
    """Run a build/install step; raise BuildFailed with the output's tail when it fails."""
    try:
        proc = subprocess.run(
            cmd,
            shell=isinstance(cmd, str),
            cwd=cwd,
            env=env,
            timeout=timeout_s,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        raise BuildFailed(f"{what} timed out after {timeout_s:g} s") from None
    if proc.returncode != 0:
        tail = output_tail(proc.stdout)
        raise BuildFailed(f"{what} exited with code {proc.returncode}" + (f"\n{tail}" if tail else ""))
