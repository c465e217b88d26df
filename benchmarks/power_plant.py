"""The planted slowdown of ``benchmarks/detection_power.py`` and its calibration.

``HOOK`` is written as ``sitecustomize.py`` into a folder put first on the candidate's
``PYTHONPATH``: every process of the candidate (the ``torchgauge`` command, its forkserver and
workers) then runs the stock torch with a wrapper around ``Module.__call__`` that makes every
outermost forward of a module containing a planted layer type (default ``Conv2d``) cost
``1 + PLANT`` times its process CPU time. :func:`calibrate` measures what that does to each
configuration's step, in a stock process, so that detections are scored against the change the
step actually sees (a forward-only plant is a smaller change of a train step).

    PYTHONPATH=src python benchmarks/power_plant.py SPEC_JSON   # the calibration worker (internal)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

PLANTED_LAYERS = ["Conv2d"]

HOOK = textwrap.dedent(
    '''
"""Planted slowdown (benchmarks/detection_power.py): every outermost call of a module that
contains one of the planted layer types (TORCHGAUGE_PLANT_LAYERS) is followed by a busy loop
that spends PLANT times the call's own process CPU time, so that forward costs 1 + PLANT times
its CPU time, as slower code would, whatever share of a CPU the process gets. Modules without
those layers only pass through a Python wrapper of Module.__call__ (its cost: --calibrate).

TORCHGAUGE_PLANT_KIND=work plants a known number of instructions instead (power_icount.py):
every outermost call of a module containing a planted layer is followed by a pure-Python loop
of TORCHGAUGE_PLANT_WORK[plant_key(module)] iterations (a JSON object; "*" is the default for
other keys), no torch operation, so operator counts and FLOPs stay as they are, as with a slower
kernel. Modules are found when the harness sets their mode (Module.train, at build time) and the
ones containing a planted layer get a subclass whose __call__ plants: modules without those
layers, and so the unaffected models, run exactly the stock code in their steps."""
import json, os, threading, time, weakref

PLANT = float(os.environ.get("TORCHGAUGE_PLANT", "0"))
LAYERS = os.environ.get("TORCHGAUGE_PLANT_LAYERS", "Conv2d")
planted_calls = 0  # outermost calls slowed so far: which models the plant reaches
planted_ns = 0  # process CPU time spent in the busy loops so far: what the plant added
_state = threading.local()
_original = None


def install(layers=LAYERS):
    global _original
    import torch

    if _original is not None:
        return
    types = tuple(getattr(torch.nn, n) for n in layers.split(","))
    contains = weakref.WeakKeyDictionary()  # not id(): a freed module's id is reused
    call = _original = torch.nn.Module.__call__
    clock = time.process_time_ns

    def planted_call(self, *args, **kwargs):
        global planted_calls, planted_ns
        if getattr(_state, "depth", 0):
            return call(self, *args, **kwargs)
        uses = contains.get(self)
        if uses is None:
            uses = contains[self] = any(isinstance(m, types) for m in self.modules())
        _state.depth = 1
        try:
            if not uses or PLANT <= 0:  # no clock reads: an unaffected model pays only the wrapper
                return call(self, *args, **kwargs)
            t0 = clock()
            out = call(self, *args, **kwargs)
            planted_calls += 1
            t1 = clock()
            end = t1 + PLANT * (t1 - t0)
            while clock() < end:
                pass
            planted_ns += clock() - t1
            return out
        finally:
            _state.depth = 0

    torch.nn.Module.__call__ = planted_call


def uninstall():
    global _original
    if _original is not None:
        import torch

        torch.nn.Module.__call__ = _original
        _original = None


KIND = os.environ.get("TORCHGAUGE_PLANT_KIND", "time")
WORK = json.loads(os.environ.get("TORCHGAUGE_PLANT_WORK") or "{}")
planted_keys = {}  # work plant: plant_key -> outermost calls planted so far
_depth = 0  # work plant: > 0 inside the call of a planted module
_iterations = weakref.WeakKeyDictionary()  # module -> (training, loop iterations per call, key)
_planted_classes = {}  # original class -> its planting subclass


def plant_key(module):
    """What the work plant's sizes are keyed by: computable from the module alone, in any process."""
    params = sum(p.numel() for p in module.parameters())
    return f"{type(module).__name__}/{params}/{'train' if module.training else 'eval'}"


def spin(iterations):
    for _ in range(iterations):
        pass


def _work_call(self, *args, **kwargs):
    global _depth
    call = super(type(self), self).__call__
    if _depth:
        return call(*args, **kwargs)
    _depth = 1
    try:
        out = call(*args, **kwargs)
    finally:
        _depth = 0
    entry = _iterations.get(self)
    if entry is None or entry[0] != self.training:  # the key once per module and mode, not per call
        key = plant_key(self)
        entry = _iterations[self] = (self.training, int(WORK.get(key, WORK.get("*", 0))), key)
    planted_keys[entry[2]] = planted_keys.get(entry[2], 0) + 1
    spin(entry[1])
    return out


def install_work(layers=LAYERS):
    """Plant the work loop into every module (built from now on) that contains a planted layer."""
    import torch

    if getattr(torch.nn.Module.train, "_planted", False):
        return
    types = tuple(getattr(torch.nn, n) for n in layers.split(","))
    train = torch.nn.Module.train

    def planted_train(self, mode=True):
        out = train(self, mode)
        cls = type(self)
        if cls not in _planted_classes.values() and any(isinstance(m, types) for m in self.modules()):
            sub = _planted_classes.get(cls)
            if sub is None:
                attrs = {"__call__": _work_call, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
                sub = _planted_classes[cls] = type(cls.__name__, (cls,), attrs)
            self.__class__ = sub
        return out

    planted_train._planted = True
    torch.nn.Module.train = planted_train


if KIND == "work":
    install_work()
elif PLANT > 0:
    install()
'''
)


def calibrate(hook: Path, models: list[str], plants: list[float], steps: int, env: dict[str, str]) -> dict:
    """Each configuration's (both modes) effective step change under each plant, in one stock process.

    Returns ``{"model/mode": row}``: ``change`` and ``change_range`` per plant, planted calls and
    module calls per step, the stock step's CPU ms, the wrapper's own cost as a fraction of the
    step, ``has_layers``; or ``error`` for a configuration that does not build.
    """
    configs = [[m, mode] for m in models for mode in ("train", "eval")]
    spec = {"hook": str(hook), "configs": configs, "plants": plants, "steps": steps, "layers": ",".join(PLANTED_LAYERS)}
    argv = [sys.executable, __file__, json.dumps(spec)]
    proc = subprocess.run(argv, env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    return {f"{r['model']}/{r['mode']}": r for r in rows}


def calibration_worker(spec: dict) -> None:
    """The process ``Bench.calibrate`` starts: one JSON line per configuration on stdout.

    The plant spins for PLANT times an outermost forward's CPU time, so within one planted step
    of CPU time ``T`` of which ``B`` was spent spinning, the plant changed the step by
    ``B / (T - B)``: a ratio of two times taken in the same step, which the load on a shared
    machine moves far less than it moves the step itself (comparing the medians of stock and
    planted steps: +-20% on unchanged models at load 5-7). The wrapper's own cost on a step is
    its module calls times the measured extra cost of a wrapped call (outermost or nested).
    """
    import importlib.util
    import statistics

    import torch

    import torchgauge

    torch.set_num_threads(1)
    loader = importlib.util.spec_from_file_location("planted_slowdown", spec["hook"])
    hook = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(hook)
    types = tuple(getattr(torch.nn, n) for n in spec["layers"].split(","))
    per_call_ns = _wrapper_cost_ns(hook, spec["layers"])
    for model, mode in spec["configs"]:
        row: dict = {"model": model, "mode": mode, "wrapper_call_ns": {k: round(v) for k, v in per_call_ns.items()}}
        try:
            w = torchgauge.create(model, mode=mode, device="cpu", size="smoke")
        except Exception as exc:  # unsupported mode, or a model that does not build: say so, go on
            print(json.dumps({**row, "error": f"{type(exc).__name__}: {exc}"[:300]}), flush=True)
            continue
        row["has_layers"] = any(isinstance(m, types) for m in w.module.modules())
        hook.uninstall()
        stock = []
        for i in range(spec["steps"] + 2):
            t0 = time.process_time_ns()
            w.step()
            if i >= 2:  # after two warm-up steps
                stock.append(time.process_time_ns() - t0)
        row["stock_cpu_ms"] = round(statistics.median(stock) / 1e6, 4)
        calls, outermost = _module_calls(w)
        wrapper_ns = outermost * per_call_ns["outermost"] + (calls - outermost) * per_call_ns["nested"]
        row.update(module_calls_per_step=calls, outermost_calls_per_step=outermost)
        row["wrapper_change"] = round(wrapper_ns / statistics.median(stock), 4)
        hook.install(spec["layers"])
        row["change"], row["change_range"] = {}, {}
        for plant in spec["plants"]:
            hook.PLANT = plant
            ratios, calls = [], 0
            for _ in range(spec["steps"]):
                c0, b0, t0 = hook.planted_calls, hook.planted_ns, time.process_time_ns()
                w.step()
                spent, busy = time.process_time_ns() - t0, hook.planted_ns - b0
                ratios.append(busy / max(1, spent - busy))
                calls += hook.planted_calls - c0
            row["change"][str(plant)] = round(statistics.median(ratios), 4)
            row["change_range"][str(plant)] = [round(min(ratios), 4), round(max(ratios), 4)]
            row["planted_calls_per_step"] = round(calls / spec["steps"], 2)
        hook.uninstall()
        print(json.dumps(row), flush=True)
        del w


def _wrapper_cost_ns(hook, layers: str, calls: int = 20000) -> dict[str, float]:
    """CPU ns that one call of a layer-free module costs more through the hook's wrapper, for an
    outermost call (a weak-dictionary look-up) and a nested one (a thread-local read)."""
    import torch

    class Repeat(torch.nn.Module):  # one outermost call, then ``calls`` nested ones
        def __init__(self) -> None:
            super().__init__()
            self.inner = torch.nn.Identity()

        def forward(self, x):
            for _ in range(calls):
                self.inner(x)
            return x

    identity, repeat, x = torch.nn.Identity(), Repeat(), torch.zeros(1)
    cost: dict[tuple[str, bool], list[float]] = {}
    for wrapped in (False, True, False, True, False, True):
        hook.install(layers) if wrapped else hook.uninstall()
        hook.PLANT = 0.0
        t0 = time.process_time_ns()
        for _ in range(calls):
            identity(x)
        t1 = time.process_time_ns()
        repeat(x)
        t2 = time.process_time_ns()
        cost.setdefault(("outermost", wrapped), []).append((t1 - t0) / calls)
        cost.setdefault(("nested", wrapped), []).append((t2 - t1) / calls)
    hook.uninstall()
    return {kind: max(0.0, min(cost[kind, True]) - min(cost[kind, False])) for kind in ("outermost", "nested")}


def _module_calls(w) -> tuple[int, int]:
    """(module calls, outermost module calls) in one step: each passes through the hook's wrapper."""
    import torch

    calls = outermost = depth = 0
    original = torch.nn.Module.__call__

    def counting(self, *args, **kwargs):
        nonlocal calls, outermost, depth
        calls += 1
        outermost += depth == 0
        depth += 1
        try:
            return original(self, *args, **kwargs)
        finally:
            depth -= 1

    torch.nn.Module.__call__ = counting
    try:
        w.step()
    finally:
        torch.nn.Module.__call__ = original
    return calls, outermost


def survey_work_plant(hook: Path, models: list[str], env: dict[str, str]) -> dict[str, dict]:
    """Which modules the work plant reaches in each configuration (both modes), in one stock process.

    Returns ``{"model/mode": row}``: ``keys`` (each planted module's :func:`plant_key` and its
    planted calls per step) and ``has_layers``; or ``error`` for a configuration that does not build.
    No valgrind: the keys and call counts are what a ``torchgauge run`` worker's hook computes.
    """
    configs = [[m, mode] for m in models for mode in ("train", "eval")]
    spec = {"hook": str(hook), "configs": configs, "layers": ",".join(PLANTED_LAYERS), "survey": True}
    proc = subprocess.run(
        [sys.executable, __file__, json.dumps(spec)],
        env={**env, "OMP_NUM_THREADS": "1", "TORCHGAUGE_PLANT_KIND": "work", "TORCHGAUGE_PLANT_WORK": "{}"},
        capture_output=True,
        text=True,
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    return {f"{r['model']}/{r['mode']}": r for r in rows}


def survey_worker(spec: dict) -> None:
    """The process :func:`survey_work_plant` starts: the hook installed before any model is built
    (it finds modules when their mode is set), two steps per configuration, the second counted."""
    import importlib.util

    import torch

    import torchgauge

    torch.set_num_threads(1)
    loader = importlib.util.spec_from_file_location("planted_work", spec["hook"])
    hook = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(hook)  # TORCHGAUGE_PLANT_KIND=work: installs itself, zero iterations
    types = tuple(getattr(torch.nn, n) for n in spec["layers"].split(","))
    for model, mode in spec["configs"]:
        row: dict = {"model": model, "mode": mode}
        try:
            w = torchgauge.create(model, mode=mode, device="cpu", size="smoke")
            w.step()
            before = dict(hook.planted_keys)
            w.step()
        except Exception as exc:  # unsupported mode, or a model that does not build: say so, go on
            print(json.dumps({**row, "error": f"{type(exc).__name__}: {exc}"[:300]}), flush=True)
            continue
        row["has_layers"] = any(isinstance(m, types) for m in w.module.modules())
        row["keys"] = {k: n - before.get(k, 0) for k, n in hook.planted_keys.items() if n != before.get(k, 0)}
        print(json.dumps(row), flush=True)
        del w


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    survey_worker(spec) if spec.get("survey") else calibration_worker(spec)
