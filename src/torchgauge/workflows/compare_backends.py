"""Two backends compared model by model: either run both, interleaved, or read two results files.

Running plans one configuration per (model, mode) and backend through
:func:`torchgauge.config.plan` with the backend as the innermost ``vary=`` axis, so each
baseline run is followed by its candidate run: load or thermal drift during a long session
then hits both sides of a ratio alike instead of one side wholesale. Each backend's runs
go to their own results file, rewritten after each of its runs. The comparison itself is
:func:`torchgauge.compare.backend_ratios.compare_backends`.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ConfigError, RunConfig, RunOptions, backend_options, check_names, plan
from ..results.schema import ResultsFile, RunRecord

__all__ = ["DEFAULT_BASELINE", "DEFAULT_CANDIDATE", "BackendPair", "plan_backend_pair", "read_backend_pair"]

DEFAULT_BASELINE = "eager"
DEFAULT_CANDIDATE = "inductor"


@dataclass
class BackendPair:
    """The interleaved configurations of a baseline and a candidate backend and their two results files."""

    baseline: str
    candidate: str
    configs: list[RunConfig]  # baseline, candidate, baseline, candidate, ...
    paths: dict[str, Path]  # backend -> results file

    def run(
        self,
        runner_options: Any,
        env: dict[str, Any],
        *,
        on_start: Callable[[RunConfig], None] | None = None,
        on_result: Callable[[RunRecord], None] | None = None,
    ) -> tuple[list[RunRecord], list[RunRecord]]:
        """Run every configuration isolated; (baseline runs, candidate runs)."""
        from .. import __version__
        from ..runner import run_suite

        files = {b: ResultsFile(env=dict(env), torchgauge_version=__version__) for b in self.paths}

        def save(record: RunRecord) -> None:  # each side's file is rewritten atomically after each of its runs
            backend = record.config.backend
            files[backend].runs.append(record)
            files[backend].write(self.paths[backend])
            if on_result:
                on_result(record)

        for backend, results in files.items():
            results.write(self.paths[backend])  # the environment, before anything runs
        run_suite(self.configs, runner_options, on_result=save, on_start=on_start)
        return files[self.baseline].runs, files[self.candidate].runs


def plan_backend_pair(
    models: Sequence[str],
    *,
    modes: Sequence[str],
    baseline: str = DEFAULT_BASELINE,
    candidate: str = DEFAULT_CANDIDATE,
    compile_scope: str = "forward",
    accuracy: bool = False,
    results_dir: str | Path = "torchgauge-results",
    **settings: Any,
) -> BackendPair:
    """Plan ``models`` with both backends, interleaved; the candidate alone gets ``accuracy``
    and ``compile_scope`` (the eager baseline compiles nothing and is the reference).
    ``settings`` are RunConfig fields for both (device, size, repeat, warmup, ...).

    Raises:
        ConfigError: an unknown backend (``option`` is ``baseline`` or ``candidate``), the same
            backend twice, or a ``compile_scope`` the candidate does not read.
    """
    for name, side in ((baseline, "baseline"), (candidate, "candidate")):
        try:
            check_names(settings.get("precision", "fp32"), name)
        except ConfigError as exc:
            raise ConfigError(side, str(exc)) from None
    if baseline == candidate:
        raise ConfigError("candidate", f"baseline and candidate are both {baseline!r}; name two different backends")
    options = backend_options(candidate, warmup=None, compile_scope=compile_scope, accuracy=accuracy)
    configs = plan(
        models, modes=modes, vary={("backend", "options"): [(baseline, RunOptions()), (candidate, options)]}, **settings
    )
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    paths = {b: Path(results_dir) / f"backends-{stamp}-{b}.json" for b in (baseline, candidate)}
    return BackendPair(baseline, candidate, configs, paths)


def read_backend_pair(
    base_path: str, cand_path: str, baseline: str | None, candidate: str | None
) -> tuple[list[RunRecord], list[RunRecord], str, str]:
    """(baseline runs, candidate runs, baseline label, candidate label) from two results files
    (they may be the same file). A backend left None is the file's only one; when both sides
    name the same backend (two torch builds, say) the labels name the files.

    Raises:
        SchemaError: a file is not a results file. CompareError: no run of a named backend.
        ConfigError: a file holds several backends and none was named (``option`` is the side).
    """
    from ..compare.backend_ratios import select_backend
    from ..results.schema import load_results

    base_runs = select_backend(load_results(base_path).runs, baseline, base_path)
    cand_runs = select_backend(load_results(cand_path).runs, candidate, cand_path)
    baseline = baseline or _single_backend(base_runs, base_path, "baseline")
    candidate = candidate or _single_backend(cand_runs, cand_path, "candidate")
    if baseline == candidate:
        tags = (Path(base_path).stem, Path(cand_path).stem)
        tags = tags if tags[0] != tags[1] else ("baseline", "candidate")
        baseline, candidate = f"{baseline} ({tags[0]})", f"{candidate} ({tags[1]})"
    return base_runs, cand_runs, baseline, candidate


def _single_backend(runs: Sequence[RunRecord], path: str, side: str) -> str:
    names = sorted({r.config.backend for r in runs})
    if len(names) != 1:
        raise ConfigError(
            side, f"{path} holds runs of several backends ({', '.join(names)}); pick one with --baseline/--candidate"
        )
    return names[0]
