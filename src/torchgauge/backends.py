"""Compiler backends a run can use (``--backend``): a registry keyed by name.

Each backend turns a freshly built (and precision-configured) workload into its compiled
form in place. Compilation itself is lazy: it happens in the first warm-up iteration,
never inside the timed samples (``measure`` refuses ``warmup < 1`` for compiled backends),
and its cost is read back after the timed pass by a :class:`CompileProbe` into
``metrics["compile"]`` (TorchBench paper sec. 3.2; hf_Reformer's 2,699 guards).

Built in:

- ``eager``: nothing to do.
- ``inductor``: ``torch.compile`` (options ``compile_mode`` default | reduce-overhead |
  max-autotune and ``dynamic``).
- ``aot_eager``: AOTAutograd without code generation, to tell tracing cost and graph
  breaks apart from Inductor's code generation.
- ``torchscript``: ``torch.jit.script`` of the module, falling back to ``torch.jit.trace``
  on the workload's inputs; which one worked is in ``metrics["compile"]["notes"]``.
- ``cudagraphs``: dynamo's CUDA-graph backend (captures the forward; CUDA only).
- ``onnxruntime`` / ``tensorrt``: registered only when their package is installed.

What gets compiled: ``Workload.forward`` (the module call plus any custom forward) for
workloads using the standard train/eval steps; for workloads with their own step (GANs,
RL, meta-learning) each top-level network of the module is compiled in place, and the
notes say so. Losses, backward and optimizer steps stay eager.

Graph and break counts come from ``torch._dynamo.utils.counters`` and the per-frame
compilation metrics (guard counts included), which dynamo fills while compiling anyway;
``torch._dynamo.explain`` would give the same counts but compiles everything a second
time, so it is not used.

Register more with::

    @register_backend("mybackend", "what it does", compiles=True, devices=("cuda",))
    def _mybackend(workload, options): ...
"""

from __future__ import annotations

import importlib.util
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .config import BACKEND_OPTIONS, COMPILE_MODES, COMPILE_SCOPES, RunOptions
from .workload import UnsupportedError, Workload

__all__ = [
    "COMPILE_MODES",
    "COMPILE_SCOPES",
    "BackendSpec",
    "CompileError",
    "CompileProbe",
    "register_backend",
    "get_backend",
    "list_backends",
    "apply_backend",
]

# COMPILE_MODES / COMPILE_SCOPES: the values RunOptions accepts; BACKEND_OPTIONS: the
# RunOptions fields only some backends read (BackendSpec.accepts). All live in torchgauge.config.
# Break reasons kept in the record (the first line of each distinct reason).
MAX_BREAK_REASONS = 20

BackendFn = Callable[[Workload, RunOptions], "CompileProbe | None"]


class CompileError(RuntimeError):
    """A backend could not compile the model (the run gets status ``error``)."""


@dataclass(frozen=True)
class BackendSpec:
    """Registry record of one backend."""

    name: str
    description: str  # one line
    apply: BackendFn  # configures the workload in place; returns its CompileProbe (None for eager)
    compiles: bool = True  # compiles during warm-up: needs warmup >= 1, gets metrics["compile"]
    devices: tuple[str, ...] | None = None  # device types it runs on (None: any)
    accepts: tuple[str, ...] = ()  # RunConfig.options keys it reads (compile_mode, dynamic)


_BACKENDS: dict[str, BackendSpec] = {}


def register_backend(
    name: str,
    description: str,
    *,
    compiles: bool = True,
    devices: Sequence[str] | None = None,
    accepts: Sequence[str] = (),
) -> Callable[[BackendFn], BackendFn]:
    """Register ``fn(workload, options) -> CompileProbe | None`` as backend ``name`` (duplicates raise).

    Args:
        name: the ``--backend`` value.
        description: one line for help and errors.
        compiles: it compiles in warm-up (needs warmup >= 1; records ``metrics["compile"]``).
        devices: device types it runs on; others get status ``unsupported``. None: any.
        accepts: the ``RunConfig.options`` keys it reads, e.g. ``("compile_mode", "dynamic")``.
    """

    def decorator(fn: BackendFn) -> BackendFn:
        if name in _BACKENDS:
            raise ValueError(f"backend {name!r} is already registered")
        _BACKENDS[name] = BackendSpec(
            name, description, fn, compiles, tuple(devices) if devices else None, tuple(accepts)
        )
        return fn

    return decorator


def list_backends() -> list[str]:
    """Registered backend names, eager first."""
    return list(_BACKENDS)


def get_backend(name: str) -> BackendSpec:
    """The :class:`BackendSpec` of ``name``; unknown names raise ValueError listing the accepted ones."""
    try:
        return _BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; accepted: {', '.join(_BACKENDS)}") from None


def apply_backend(
    workload: Workload, name: str, options: RunOptions | Mapping[str, Any] | None = None, *, warmup: int = 1
) -> None:
    """Configure ``workload`` for backend ``name``; sets ``workload.compile_probe`` for compiled ones.

    Args:
        workload: a built workload, precision already applied.
        name: a registered backend.
        options: run options (``compile_mode``, ``dynamic``).
        warmup: the run's warm-up count; compiled backends need at least one.

    Raises:
        ValueError: unknown backend, bad option, or ``warmup < 1`` for a compiling backend.
        UnsupportedError: the backend does not run on the workload's device.
        CompileError: scripting and tracing both failed (torchscript).
    """
    spec = get_backend(name)
    options = options if isinstance(options, RunOptions) else RunOptions.from_dict(options or {})
    if spec.devices is not None and workload.device.type not in spec.devices:
        raise UnsupportedError(f"backend {name!r} runs on {', '.join(spec.devices)} only, not {workload.device.type}")
    if spec.compiles and warmup < 1:
        raise ValueError(f"backend {name!r} compiles during warm-up; accepted: warmup >= 1")
    for key in BACKEND_OPTIONS:
        if getattr(options, key) not in (None, "default", "forward") and key not in spec.accepts:
            takers = [b.name for b in _BACKENDS.values() if key in b.accepts]
            raise ValueError(f"option {key} does not apply to backend {name!r}; accepted with: {', '.join(takers)}")
    probe = spec.apply(workload, options)
    kept = workload.compile_probe
    if probe is not None or kept is None or not kept.from_model:
        # A model that compiles part of itself (sam_fast's image encoder) brought its own probe:
        # an eager backend keeps it, so its compile cost is measured and warm-up stays required.
        workload.compile_probe = probe


# -- compile cost -----------------------------------------------------------------------------
def _dynamo_snapshot() -> dict[str, Any]:
    """Graphs, breaks, guards and compile time that dynamo recorded so far in this process."""
    from torch._dynamo import utils

    frames = utils.get_compilation_metrics()
    reasons: list[str] = []
    for reason in utils.counters.get("graph_break", {}):
        first = str(reason).strip().splitlines()[0] if str(reason).strip() else str(reason)
        if first not in reasons:
            reasons.append(first)
    guards = [m.guard_count for m in frames if getattr(m, "guard_count", None) is not None]
    # counters["graph_break"] counts a break again on each restart of a frame, and
    # CompilationMetrics.num_graph_breaks is that cumulative total: neither counts sites.
    # Each break that resumes compiles one resume function named after its line
    # (counters["resumes"]); breaks that skip a frame instead show up only as a reason.
    resume_sites = len(utils.counters.get("resumes", {}))
    return {
        "frames": len(frames),
        "graphs": int(utils.counters.get("stats", {}).get("unique_graphs", 0)),
        "graph_breaks": max(resume_sites, len(reasons)),
        "guards": int(sum(guards)) if guards else None,
        "dynamo_compile_s": float(sum(m.entire_frame_compile_time_s or 0.0 for m in frames)),
        "break_reasons": reasons[:MAX_BREAK_REASONS],
    }


def _reset_dynamo() -> None:
    # A fresh cache per configured workload: counts are this workload's, and earlier
    # compilations of the shared Workload.forward code cannot hit the recompile limit.
    import torch._dynamo
    from torch._dynamo import utils

    torch._dynamo.reset()
    utils.counters.clear()
    utils.clear_compilation_metrics()


@dataclass
class CompileProbe:
    """Compile-cost bookkeeping of one compiled workload.

    ``measure`` calls :meth:`mark_warm` after warm-up and :meth:`read` after the timed pass;
    ``read`` returns the ``metrics["compile"]`` record.
    """

    backend: str
    setup_s: float = 0.0  # time spent before the first step (scripting, tracing)
    notes: str = ""  # what was compiled and how (e.g. "torchscript: traced (script failed: ...)")
    uses_dynamo: bool = True  # graphs/breaks/guards come from dynamo; None otherwise
    from_model: bool = False  # the model compiles part of itself when built (kept under any backend)
    _warm: dict[str, Any] | None = field(default=None, init=False, repr=False)  # snapshot after warm-up

    def mark_warm(self) -> None:
        """Snapshot the compiler state at the end of warm-up."""
        self._warm = _dynamo_snapshot() if self.uses_dynamo else None

    def read(self, warmup_ms: Sequence[float], timed_ms: Sequence[float] | None = None) -> dict[str, Any]:
        """The compile record from the warm-up durations and (when timed) the timed samples.

        ``compile_s`` is the setup time plus the first iteration's excess over the steady
        state (``first_iter_ms - steady_ms``); ``steady_ms`` is the timed median, else the
        median of warm-up iterations after the first, else None (and then ``compile_s``
        counts the whole first iteration).
        """
        if not warmup_ms:
            raise ValueError("compile cost needs at least one warm-up iteration; accepted: warmup >= 1")
        first = float(warmup_ms[0])
        if timed_ms:
            steady: float | None = float(statistics.median(timed_ms))
        elif len(warmup_ms) > 1:
            steady = float(statistics.median(warmup_ms[1:]))
        else:
            steady = None
        excess_ms = first - steady if steady is not None else first
        record: dict[str, Any] = {
            "compile_s": round(self.setup_s + max(excess_ms, 0.0) / 1e3, 6),
            "first_iter_ms": first,
            "steady_ms": steady,
            "graphs": None,
            "graph_breaks": None,
            "guards": None,
            "break_reasons": [],
            "setup_s": round(self.setup_s, 6),
            "notes": self.notes,
        }
        if self.uses_dynamo:
            now = _dynamo_snapshot()
            record.update(
                {k: now[k] for k in ("graphs", "graph_breaks", "guards", "break_reasons", "dynamo_compile_s")}
            )
            if self._warm is not None:
                # Frames compiled after warm-up landed in the timed samples: say so.
                record["recompiles_after_warmup"] = now["frames"] - self._warm["frames"]
        return record


# -- what gets compiled -------------------------------------------------------------------------
def _uses_standard_step(workload: Workload) -> bool:
    cls = type(workload)
    own = cls.train_step if workload.mode == "train" else cls.eval_step
    base = Workload.train_step if workload.mode == "train" else Workload.eval_step
    return cls.step is Workload.step and own is base


def _dynamo_compile(workload: Workload, backend: Any, name: str, options: RunOptions, **extra: Any) -> CompileProbe:
    """Wrap the workload's forward (or its networks) with ``torch.compile``; compiles lazily."""
    mode = options.compile_mode or "default"  # values checked by RunOptions
    dynamic = options.dynamic
    scope = options.compile_scope or "forward"
    kwargs: dict[str, Any] = {"backend": backend, "dynamic": dynamic, **extra}
    if backend == "inductor" and mode != "default":
        kwargs["mode"] = mode
    _reset_dynamo()
    if scope == "step":
        # The bound step is wrapped as an instance attribute: measure() and the accuracy check
        # call workload.step(), so the whole iteration runs under dynamo, optimizer included.
        workload.step = torch.compile(workload.step, **kwargs)
        what = "step (forward, loss, backward, optimizer step)" if workload.mode == "train" else "step"
    elif _uses_standard_step(workload):
        workload.forward = torch.compile(workload.forward, **kwargs)
        what = "forward"
    else:
        # Wrapped, not nn.Module.compile() in place: dynamo skips in-place compiled torch.nn
        # built-ins (Sequential, Linear) as top-level frames. Parameters keep their identity
        # (the optimizers still own them); their names gain a "_orig_mod." component.
        nets = list(workload.module.named_children())
        if nets:
            for child_name, net in nets:
                setattr(workload.module, child_name, torch.compile(net, **kwargs))
        else:
            workload.module = torch.compile(workload.module, **kwargs)
        what = "networks " + (", ".join(n for n, _ in nets) or "module") + " (custom step)"
    details = f"mode={mode}, scope={scope}" + (f", dynamic={dynamic}" if dynamic is not None else "")
    return CompileProbe(name, notes=f"{name}: compiled {what}; {details}")


@register_backend("eager", "PyTorch eager mode (no compilation)", compiles=False)
def _eager(workload: Workload, options: RunOptions) -> None:
    return None


@register_backend(
    "inductor",
    "torch.compile with TorchInductor (compile_mode, dynamic)",
    accepts=("compile_mode", "dynamic", "compile_scope"),
)
def _inductor(workload: Workload, options: RunOptions) -> CompileProbe:
    return _dynamo_compile(workload, "inductor", "inductor", options)


@register_backend(
    "aot_eager", "dynamo + AOTAutograd, eager kernels (no code generation)", accepts=("dynamic", "compile_scope")
)
def _aot_eager(workload: Workload, options: RunOptions) -> CompileProbe:
    return _dynamo_compile(workload, "aot_eager", "aot_eager", options)


@register_backend(
    "cudagraphs",
    "dynamo's CUDA-graph backend: forward captured and replayed",
    devices=("cuda",),
    accepts=("dynamic", "compile_scope"),
)
def _cudagraphs(workload: Workload, options: RunOptions) -> CompileProbe:
    return _dynamo_compile(workload, "cudagraphs", "cudagraphs", options)


@register_backend("torchscript", "torch.jit.script of the module, torch.jit.trace where scripting fails")
def _torchscript(workload: Workload, options: RunOptions) -> CompileProbe:
    module = workload.module
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        # torch >= 2.10 deprecates torch.jit; the backend exists to measure it all the same.
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*torch\.jit")
        try:
            compiled = torch.jit.script(module)
            how = "scripted"
        except Exception as script_exc:  # scripting rejects much dynamic Python: trace instead
            reason = (str(script_exc).strip().splitlines() or [type(script_exc).__name__])[0][:200]
            compiled = _trace(workload, script_exc)
            how = f"traced (script failed: {reason})"
    setup = time.perf_counter() - t0
    _check_shares_parameters(module, compiled)
    workload.module = compiled
    return CompileProbe("torchscript", setup_s=setup, notes=f"torchscript: {how}", uses_dynamo=False)


def _trace(workload: Workload, script_exc: Exception) -> nn.Module:
    inputs = workload.inputs
    try:
        with torch.no_grad() if workload.mode == "eval" else torch.enable_grad():
            if isinstance(inputs, dict):
                return torch.jit.trace(workload.module, example_kwarg_inputs=inputs, strict=False, check_trace=False)
            return torch.jit.trace(workload.module, tuple(inputs), strict=False, check_trace=False)
    except Exception as trace_exc:
        first = lambda e: (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise CompileError(
            f"torchscript: script failed ({first(script_exc)}) and trace failed ({first(trace_exc)})"
        ) from trace_exc


def _check_shares_parameters(original: nn.Module, compiled: nn.Module) -> None:
    # The optimizer was built on the original parameters: the compiled module must use them.
    orig = {id(p) for p in original.parameters()}
    if orig and not orig <= {id(p) for p in compiled.parameters()}:
        raise CompileError("torchscript: the compiled module does not share the original parameters")


# -- optional backends: registered only when their package is installed -------------------------
def _optional_dynamo_backend(package: str, dynamo_name: str, name: str) -> BackendFn:
    def apply(workload: Workload, options: RunOptions) -> CompileProbe:
        importlib.import_module(package)  # registers the dynamo backend as a side effect
        import torch._dynamo

        if dynamo_name not in torch._dynamo.list_backends(exclude_tags=()):
            raise UnsupportedError(f"{package} is installed but torch has no dynamo backend {dynamo_name!r}")
        return _dynamo_compile(workload, dynamo_name, name, options)

    return apply


if importlib.util.find_spec("onnxruntime") is not None:
    register_backend(
        "onnxruntime", "dynamo + ONNX Runtime (torch backend 'onnxrt')", accepts=("dynamic", "compile_scope")
    )(_optional_dynamo_backend("onnxruntime", "onnxrt", "onnxruntime"))
if importlib.util.find_spec("torch_tensorrt") is not None:
    register_backend("tensorrt", "dynamo + Torch-TensorRT", devices=("cuda",), accepts=("dynamic", "compile_scope"))(
        _optional_dynamo_backend("torch_tensorrt", "tensorrt", "tensorrt")
    )
