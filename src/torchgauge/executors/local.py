"""The local executor: each run in an isolated worker process on this machine."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..results.schema import RunConfig, RunRecord
from ..runner import RunnerOptions, run_suite

__all__ = ["LocalExecutor"]


class LocalExecutor:
    """:func:`torchgauge.runner.run_suite` behind the executor interface."""

    def environment(self) -> dict[str, Any]:
        from ..harness.env import collect_env

        return collect_env()

    def run(
        self,
        configs: Sequence[RunConfig] | Iterable[RunConfig],
        options: RunnerOptions,
        *,
        on_result: Callable[[RunRecord], None] | None = None,
        on_start: Callable[[RunConfig], None] | None = None,
    ) -> list[RunRecord]:
        return run_suite(configs, options, on_result=on_result, on_start=on_start)

    def close(self) -> None:
        pass
