"""A small stored history covering every part of the dashboard, shared by the site tests.

Three models over 8 nights in eager and inductor, train and eval: ``bert`` steps up 30% at
night 4 (a step on its page), the hostile-named model 25% on the last night (a regression in
the index), ``resnet18`` fails on the last night, and a model named with markup
(:data:`HOSTILE`) checks the escaping; every run has a CPU breakdown, ``bert``'s names a
trace file; a second machine's run on ``cuda`` gives the device comparison.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from torchgauge.results.schema import ResultsFile, RunRecord
from torchgauge.results.store import Store

HOSTILE = "<img src=x onerror=alert(1)></script>\u2028"
ERROR = "RuntimeError: boom </script><b>bold</b>"
NIGHTS = 8
STEP_NIGHT = 4
MODELS = ("resnet18", "bert", HOSTILE)
COVERAGE = {
    "summary": {
        "models": 3,
        "against": "mlperf",
        "cover_target": 0.9,
        "modules": 40,
        "apis": {
            "suite": 300,
            "tagged": 100,
            "ratio": 3.0,
            "universe": 1000,
            "fraction_of_universe": 0.3,
            "cover_subset": ["bert", HOSTILE],
            "greedy": [
                {"model": "bert", "new": 200, "cumulative": 200},
                {"model": HOSTILE, "new": 80, "cumulative": 280},
                {"model": "resnet18", "new": 20, "cumulative": 300},
            ],
        },
        "ops": {"suite": 500, "tagged": 200, "ratio": 2.5, "cover_subset": ["bert"]},
        "per_domain": {"nlp": {"models": 1, "apis": 200, "ops": 300}, "vision": {"models": 2, "apis": 150, "ops": 250}},
    }
}


def load_history_factory():
    path = Path(__file__).resolve().parent.parent / "fixtures" / "history_factory.py"
    spec = importlib.util.spec_from_file_location("history_factory", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["history_factory"] = module
    spec.loader.exec_module(module)
    return module


def write_site_history(db: Path, trace: Path, *, second_machine: bool = True) -> Path:
    """Store the history described in the module docstring into ``db``; returns ``db``."""
    factory = load_history_factory()
    trace.parent.mkdir(parents=True, exist_ok=True)
    trace.write_text("{}")
    spec = factory.HistorySpec(
        models=MODELS,
        nights=NIGHTS,
        backends=("eager", "inductor"),
        stepped={"bert": (STEP_NIGHT, 0.3), HOSTILE: (NIGHTS - 1, 0.25)},
        failing={"resnet18": ERROR},
        breakdown=True,
        traces={"bert": str(trace)},
    )
    with Store(db) as store:
        factory.write_history(store, spec)
        if second_machine:
            first = store.load(store.resolve("latest"))
            runs = [
                RunRecord(
                    r.config.with_(device="cuda"),
                    r.status,
                    domain=r.domain,
                    error=r.error,
                    metrics={"time_ms": {"samples": [s * 0.4 for s in r.metrics["time_ms"]["samples"]]}},
                    batch_size=r.batch_size,
                )
                for r in first.runs
                if r.ok
            ]
            env = {
                "hostname": "gpu-box",
                "machine_fingerprint": "m2",
                "gpu_name": "Test GPU X1",
                "torch_version": "2.13.0+cu128",
            }
            # The newest run: the index shows machine m1's latest run only when asked (machine="m1").
            store.save(ResultsFile(env=env, runs=runs, created_at="2026-08-09T05:00:00+00:00"))
    return db
