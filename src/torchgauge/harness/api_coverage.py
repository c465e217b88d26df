"""The ``coverage`` metric: one step under the API and operator recorders.

Registered here, torch-free at import, so that reading the metric registry (``compare``,
the store, the CLI) does not import torch; the recorders (:mod:`.api_recorders`) subclass
torch's dispatch modes and load only when the metric runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .metrics import register_metric

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..workload import Workload


@register_metric("coverage", "PyTorch APIs (TorchFunctionMode) and ATen ops (TorchDispatchMode) one step reaches")
def collect_coverage(workload: Workload, config: RunConfig, measured: dict[str, Any]) -> dict[str, Any]:
    """One step under the recorders; the sets go into ``metrics["coverage"]``."""
    from .api_recorders import api_universe, module_classes, record_coverage

    apis, ops = record_coverage(workload.step)
    universe = api_universe()
    return {
        "coverage": {
            "apis": sorted(apis),
            "ops": sorted(ops),
            "modules": module_classes(workload.module),
            "api_count": len(apis),
            "api_in_universe": len(universe.intersection(apis)),
            "op_count": len(ops),
            "universe_size": len(universe),
        }
    }
