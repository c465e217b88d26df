"""torchgauge: a benchmark suite for the PyTorch software stack.

Public API (imported lazily so that ``import torchgauge.stats`` stays torch-free)::

    import torchgauge
    w = torchgauge.create("resnet50", mode="eval", device="cpu", size="smoke")
    record = torchgauge.measure(w, repeat=10, warmup=3)
    record.metrics["time_ms"]["median"]

    results = torchgauge.run(["resnet18", "hf_bert"], mode="eval", size="smoke")   # a suite
    results.to_pandas()                                     # one row per run (needs pandas)
    torchgauge.compare(torchgauge.load("eager.json"), torchgauge.load("inductor.json"))
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "create": "torchgauge.registry",
    "list_models": "torchgauge.registry",
    "get_spec": "torchgauge.registry",
    "register_model": "torchgauge.registry",
    "load_model_file": "torchgauge.registry",
    "Workload": "torchgauge.workload",
    "BuildContext": "torchgauge.workload",
    "UnsupportedError": "torchgauge.workload",
    "image_classification": "torchgauge.workload",
    "language_modeling": "torchgauge.workload",
    "measure": "torchgauge.measurement",
    "RunRecord": "torchgauge.results.schema",
    "run": "torchgauge.api",
    "load": "torchgauge.api",
    # torchgauge.compare is the subpackage, made callable as torchgauge.api.compare (see there).
    "compare": "torchgauge.compare",
    "Results": "torchgauge.api",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:  # PEP 562 lazy exports
    if name in _EXPORTS:
        module = importlib.import_module(_EXPORTS[name])
        value = module if module.__name__ == f"{__name__}.{name}" else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'torchgauge' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
