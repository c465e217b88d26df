"""Executors: where a suite's runs execute. Every executor has the local runner's shape.

``LocalExecutor`` runs each configuration in an isolated worker process on this machine
(:func:`torchgauge.runner.run_suite`); ``RayExecutor`` (``executors/ray_cluster.py``, extra
``torchgauge[ray]``) sends each one to a Ray cluster, where the task runs the same isolated
worker. Both hand every finished record to ``on_result`` as soon as it exists, so the results
file and the history are written as runs finish, wherever they ran.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from ..results.schema import RunConfig, RunRecord
from ..runner import RunnerOptions
from .local import LocalExecutor

__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "count_runs_by_host", "create_executor"]

EXECUTORS = ("local", "ray")


class Executor(Protocol):
    """What ``run_and_save`` needs from an executor."""

    def environment(self) -> dict[str, Any]:
        """The environment (``collect_env``) of the hardware the suite runs on."""

    def run(
        self,
        configs: Sequence[RunConfig] | Iterable[RunConfig],
        options: RunnerOptions,
        *,
        on_result: Callable[[RunRecord], None] | None = None,
        on_start: Callable[[RunConfig], None] | None = None,
    ) -> list[RunRecord]:
        """Run every config; records in config order, each also passed to ``on_result`` when it ends."""

    def close(self) -> None:
        """Release what the executor holds (a cluster connection)."""


def create_executor(name: str, *, on_note: Callable[[str], None] | None = None, **options: Any) -> Executor:
    """The executor called ``name`` (one of :data:`EXECUTORS`); ``options`` go to its options.

    ``on_note`` receives one-line notes worth showing the user (hardware left out, retries).

    Example:
        >>> create_executor("ray", address="head:6379", cpus_per_run=2)  # doctest: +SKIP
    """
    if name == "local":
        if options:
            raise ValueError(f"the local executor takes no options; got {', '.join(options)}")
        return LocalExecutor()
    if name == "ray":
        from .ray_cluster import RayExecutor, RayOptions

        return RayExecutor(RayOptions(**options), on_note=on_note)
    raise ValueError(f"unknown executor {name!r}; accepted: {', '.join(EXECUTORS)}")


def count_runs_by_host(records: Iterable[RunRecord]) -> dict[str, int]:
    """How many runs each host ran: ``"hostname"`` or ``"hostname (node 1a2b3c4d)"`` for Ray nodes.

    Records without their own environment ran on the suite's machine and count as ``"local"``.
    """
    counts: Counter[str] = Counter()
    for record in records:
        env = record.env or {}
        host = str(env.get("hostname") or "local")
        node = env.get("ray_node_id")
        counts[f"{host} (node {str(node)[:8]})" if node else host] += 1
    return dict(sorted(counts.items()))
