"""Bisection to the culprit commit or version: build each probed point, measure, judge.

Each part reads on its own:

- :mod:`.ranges` the points of a git range or a list of versions, and how each is built
  (in a scratch venv, :mod:`.venvs`, whose contract the build command relies on);
- :mod:`.spec` and :mod:`.measure` what is measured and how: every configuration in one fresh
  ``torchgauge run`` process under the point's interpreter (:mod:`.metric_facts` the metric);
- :mod:`.point_cache` points built and measured on demand, cached as JSON per (host, point,
  spec), so a second bisection over the same range rebuilds nothing;
- :mod:`.judging` and :mod:`.driver` the verdicts and the search over each configuration;
  :mod:`.report` what was found.
"""

from __future__ import annotations

from .driver import run_bisect
from .errors import BisectSetupError, BuildFailed
from .judging import DEFAULT_RETRIES, Judging
from .measure import measure_in_subprocess
from .metric_facts import bisect_metrics, default_threshold
from .point_cache import PointStore, default_cache_dir, resolve_cache_dir
from .ranges import GitRange, Point, PointEnv, VersionRange
from .report import REPORT_COLUMNS, BisectReport, format_change, report_rows, report_summary, report_warnings
from .spec import DEFAULT_REPEAT, MeasureSpec
from .venvs import ENV_COMMIT, ENV_PYTHON, ENV_VENV, ENV_WORKTREE

__all__ = [
    "DEFAULT_REPEAT",
    "DEFAULT_RETRIES",
    "ENV_COMMIT",
    "ENV_PYTHON",
    "ENV_VENV",
    "ENV_WORKTREE",
    "bisect_metrics",
    "REPORT_COLUMNS",
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
    "format_change",
    "measure_in_subprocess",
    "report_rows",
    "report_summary",
    "report_warnings",
    "resolve_cache_dir",
    "run_bisect",
]
