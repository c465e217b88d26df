"""What to run: :class:`RunConfig` (one model in one configuration), its typed
:class:`RunOptions`, and :func:`plan`, which turns a model selection, modes and a base
configuration into the list of RunConfigs every workflow runs.

Every command plans here: ``run`` (and the library's ``torchgauge.run``), ``scale`` (a
grid, ``vary=``), ``compare-backends`` (two backends interleaved, ``vary=``), ``tune-batch``
(one eval configuration per batch size), ``coverage`` and ``bisect``. ``--batch-size auto``
is resolved here, from the batch-size store that ``tune-batch`` writes.

This module imports no torch: names that need the backend registry (what a backend
accepts) are looked up inside the functions that check them.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .suite import Selection

__all__ = [
    "BACKEND_OPTIONS",
    "CONFIG_AXES",
    "COMPILE_MODES",
    "COMPILE_SCOPES",
    "DEFAULT_METRICS",
    "MODES",
    "SIZES",
    "TORCHBENCH_PRECISION",
    "Adaptive",
    "ConfigError",
    "RunConfig",
    "RunOptions",
    "backend_options",
    "check_names",
    "later_round",
    "plan",
]

MODES = ("train", "eval")
SIZES = ("full", "smoke")
DEFAULT_METRICS = ("time", "memory")
# torch.compile modes accepted by RunOptions.compile_mode; "default" means mode=None.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")
# RunOptions.compile_scope: what torch.compile wraps. "forward": the model's forward only,
# backward and optimizer step stay eager; "step": the whole iteration (forward, loss,
# backward, optimizer step), as the dynamo harness compiles its model_iter_fn.
COMPILE_SCOPES = ("forward", "step")
# precision= this names TorchBench run.py's default per model, device and mode (its models' and
# framework factories' DEFAULT_{EVAL,TRAIN}_CUDA_PRECISION, else fp32): plan() resolves it from the
# registry's ``torchbench_precision``, so no RunConfig it returns, and no record, holds this name.
TORCHBENCH_PRECISION = "torchbench"
# RunOptions fields that only some backends read (torchgauge.backends.BackendSpec.accepts).
BACKEND_OPTIONS = ("compile_mode", "dynamic", "compile_scope")


class ConfigError(ValueError):
    """A configuration value is not accepted; ``option`` names the field (``compile_mode``, ...)."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option

    def __reduce__(self) -> tuple:  # raised in a worker, it crosses a process boundary
        return (type(self), (self.option, str(self)))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Adaptive:
    """Adaptive repeats: time until the median's 95% interval is narrower than ``target`` of
    it, at most ``max_repeat`` steps (the config's ``repeat`` is the minimum)."""

    target: float
    max_repeat: int

    def __post_init__(self) -> None:
        if isinstance(self.target, bool) or not isinstance(self.target, (int, float)) or not 0 < self.target < 1:
            raise ConfigError(
                "adaptive", f"adaptive target {self.target!r}; accepted: a fraction between 0 and 1, e.g. 0.05"
            )
        if not _is_int(self.max_repeat) or self.max_repeat < 1:
            raise ConfigError("max_repeat", f"adaptive max_repeat {self.max_repeat!r}; accepted: an integer >= 1")


def _check_option(name: str, value: Any) -> None:
    """ConfigError naming the option and what it accepts, unless ``value`` fits it."""
    from .stats.leak import min_samples

    if value is None:
        return
    accepted = {
        "channels_last": (lambda v: isinstance(v, bool), "true or false"),
        "accuracy": (lambda v: isinstance(v, bool), "true or false"),
        "compile_mode": (lambda v: v in COMPILE_MODES, ", ".join(COMPILE_MODES)),
        "dynamic": (lambda v: isinstance(v, bool), "true, false or unset"),
        "compile_scope": (lambda v: v in COMPILE_SCOPES, ", ".join(COMPILE_SCOPES)),
        "profile_dir": (lambda v: isinstance(v, str) and v != "", "a directory path"),
        "leak_iterations": (lambda v: _is_int(v) and v >= min_samples(), f"an integer >= {min_samples()}"),
        "instruction_steps": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
        "adaptive": (lambda v: isinstance(v, Adaptive), "target and max_repeat"),
        "stable_warmup": (
            lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1,
            "a fraction between 0 and 1, e.g. 0.1",
        ),
    }
    check, words = accepted[name]
    if not check(value):
        raise ConfigError(name, f"invalid {name} {value!r}; accepted: {words}")


# RunOptions fields that are on or off: absent from the JSON when off.
_FLAGS = ("channels_last", "accuracy")


@dataclass(frozen=True)
class RunOptions:
    """Backend, precision and metric extras of a run; every field None/False when not asked for.

    Serialised as the ``options`` object of a run record (:meth:`to_dict`): only the fields
    that are set, under their field names, as results files have always held them.
    """

    channels_last: bool = False  # channels_last memory format (convolutional models)
    compile_mode: str | None = None  # torch.compile mode (inductor): one of COMPILE_MODES
    dynamic: bool | None = None  # torch.compile dynamic shapes; None: torch decides
    compile_scope: str | None = None  # what a dynamo backend compiles (COMPILE_SCOPES); None off dynamo
    accuracy: bool = False  # check the run against an eager fp64 reference (torchgauge.accuracy)
    profile_dir: str | None = None  # write a Chrome trace per run here (breakdown's profiled pass)
    leak_iterations: int | None = None  # steps of the leak metric; None: harness.leak's default
    instruction_steps: int | None = None  # steps counted by the instructions metric; None: its default
    adaptive: Adaptive | None = None  # adaptive repeats; None: exactly ``repeat`` timed steps
    # Warm up until two consecutive steps agree within this fraction (``warmup`` is then the
    # maximum; stats.adaptive.StableWarmup); None: exactly ``warmup`` warm-up steps.
    stable_warmup: float | None = None
    # Keys this torchgauge does not know (a file from a newer one): kept so the file
    # round-trips, never read. Only loading fills it; user input with such keys is refused.
    unknown: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "unknown":
                _check_option(f.name, getattr(self, f.name))

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, strict: bool = True) -> RunOptions:
        """Options from a record's ``options`` object. ``strict``: an unknown key is a
        ConfigError (user input); otherwise it is kept in ``unknown`` (a stored record)."""
        if not isinstance(doc, Mapping):
            raise ConfigError("options", f"options {doc!r}; accepted: an object of option names and values")
        known = {f.name for f in fields(cls)} - {"unknown"}
        extra = tuple(sorted((str(k), v) for k, v in doc.items() if k not in known))
        if extra and strict:
            raise ConfigError(extra[0][0], f"unknown run option {extra[0][0]!r}; accepted: {', '.join(sorted(known))}")
        values = {k: v for k, v in doc.items() if k in known}
        if isinstance(values.get("adaptive"), Mapping):
            spec = values["adaptive"]
            values["adaptive"] = Adaptive(spec.get("target"), spec.get("max_repeat"))
        return cls(**values, unknown=extra)

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``options`` object: set fields only (None and the flags' False are absent;
        ``dynamic: false`` is a choice and is kept)."""
        doc: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "unknown" or value is None or (value is False and f.name in _FLAGS):
                continue
            doc[f.name] = {"target": value.target, "max_repeat": value.max_repeat} if f.name == "adaptive" else value
        doc.update(self.unknown)
        return doc

    def without(self, *names: str) -> RunOptions:
        """These options back to unset (e.g. an eager baseline drops the compiler's)."""
        return replace(self, **{n: False if n in _FLAGS else None for n in names})


# The fields that identify a run across results (the rest are how it was measured); pairing
# (compare.matching.config_key) drops the axis being compared from these.
CONFIG_AXES = ("model", "mode", "device", "precision", "backend", "batch_size")


@dataclass(frozen=True)
class RunConfig:
    """What to run: one model in one configuration. Immutable; picklable for workers."""

    model: str
    mode: str = "train"  # "train" | "eval"
    device: str = "cpu"
    precision: str = "fp32"  # fp32 | tf32 | fp16 | bf16 | amp (plan resolves "torchbench" to one)
    backend: str = "eager"  # eager | inductor | aot_eager | torchscript | cudagraphs | ...
    batch_size: int | None = None  # None: the model's registered default for the mode
    size: str = "full"  # "full" | "smoke"
    repeat: int = 10  # timed iterations (the paper's setting)
    warmup: int = 3  # untimed iterations before timing (compilation happens here)
    seed: int = 0
    metrics: tuple[str, ...] = DEFAULT_METRICS
    options: RunOptions = field(default_factory=RunOptions)  # backend/precision/metric extras
    model_kwargs: Mapping[str, Any] = field(default_factory=dict)  # architecture overrides

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", tuple(self.metrics))
        if not isinstance(self.options, RunOptions):  # a stored record's dict: unknown keys kept
            object.__setattr__(self, "options", RunOptions.from_dict(self.options or {}, strict=False))
        object.__setattr__(self, "model_kwargs", dict(self.model_kwargs))

    def label(self) -> str:
        """Short human label, e.g. ``resnet50/eval/cpu/fp32/eager``."""
        return f"{self.model}/{self.mode}/{self.device}/{self.precision}/{self.backend}"

    def key(self) -> tuple:
        """Identity used to match runs across results: its :data:`CONFIG_AXES` values."""
        return tuple(getattr(self, axis) for axis in CONFIG_AXES)

    def with_(self, **changes: Any) -> RunConfig:
        return replace(self, **changes)


def check_names(precision: str, backend: str) -> None:
    """ConfigError unless ``precision`` (or ``torchbench``) and ``backend`` are registered (imports torch)."""
    from .configure import BACKENDS, PRECISIONS

    if precision not in (*PRECISIONS, TORCHBENCH_PRECISION):
        accepted = ", ".join((*PRECISIONS, TORCHBENCH_PRECISION))
        raise ConfigError("precision", f"invalid precision {precision!r}; accepted: {accepted}")
    if backend not in BACKENDS:
        raise ConfigError("backend", f"invalid backend {backend!r}; accepted: {', '.join(BACKENDS)}")


def backend_options(
    backend: str, *, warmup: int | None = None, compile_scope: str = "forward", **values: Any
) -> RunOptions:
    """The RunOptions of a run on ``backend``, checked against what the backend accepts.

    ``compile_scope`` is recorded for every backend that reads it (the default too) and must
    stay ``forward`` for the others; ``values`` are further RunOptions fields.

    Raises:
        ConfigError: a compiling backend with ``warmup < 1`` (when ``warmup`` is given), or an
            option the backend does not read.
    """
    from .backends import get_backend

    spec = get_backend(backend)
    if spec.compiles and warmup is not None and warmup < 1:
        raise ConfigError("warmup", f"{warmup}: backend {spec.name} compiles during warm-up; accepted: >= 1")
    options = RunOptions(**values)
    if "compile_scope" in spec.accepts:
        options = replace(options, compile_scope=compile_scope)
    elif compile_scope != "forward":
        raise ConfigError("compile_scope", f"does not apply to backend {spec.name}")
    for key in ("compile_mode", "dynamic"):
        if getattr(options, key) is not None and key not in spec.accepts:
            raise ConfigError(key, f"does not apply to backend {spec.name}")
    return options


# Fields plan() sets from the selection and the modes; no vary axis may set them.
_PLANNED_ELSEWHERE = ("model", "mode")


def _apply_axis(config: RunConfig, names: tuple[str, ...], values: tuple[Any, ...]) -> RunConfig:
    """Set each name: a RunConfig field directly, anything else as a model argument."""
    own = {f.name for f in fields(RunConfig)}
    run = {n: v for n, v in zip(names, values) if n in own}
    arch = {n: v for n, v in zip(names, values) if n not in own}
    return config.with_(**run, model_kwargs={**config.model_kwargs, **arch}) if arch else config.with_(**run)


def _axes(vary: Mapping[Any, Sequence[Any]]) -> list[tuple[tuple[str, ...], list[tuple[Any, ...]]]]:
    """``vary`` as (names, rows of values); ConfigError on an empty, repeated or planned axis."""
    axes, seen = [], []
    for key, values in vary.items():
        names = (key,) if isinstance(key, str) else tuple(key)
        rows = [tuple(v) if len(names) > 1 else (v,) for v in values]
        if not rows:
            raise ConfigError(names[0], f"vary {', '.join(names)} has no values; accepted: one value or more")
        if any(len(r) != len(names) for r in rows):
            raise ConfigError(names[0], f"vary {key!r}: every value must give {len(names)} fields ({', '.join(names)})")
        for name in names:
            if name in seen or name in _PLANNED_ELSEWHERE:
                why = "is varied twice" if name in seen else "is planned from the selection and modes"
                raise ConfigError(name, f"{name} {why}; accepted: each parameter in one vary axis")
            seen.append(name)
        axes.append((names, rows))
    return axes


def plan(
    models: Selection | Sequence[str],
    base: RunConfig | None = None,
    *,
    modes: Sequence[str] = MODES,
    vary: Mapping[Any, Sequence[Any]] | None = None,
    rounds: int = 1,
    batch_size: int | str | None = None,
    batch_store: str | os.PathLike | None = None,
    on_note: Callable[[str], None] | None = None,
    **settings: Any,
) -> list[RunConfig]:
    """The RunConfigs to run, in run order: rounds, then models, then modes, then the grid.

    Args:
        models: a :class:`torchgauge.suite.Selection` (patterns and filters), or model names taken as they are.
        base: everything not planned (device, precision, backend, size, repeat, metrics,
            options, model arguments, ...); its ``model`` and ``mode`` are ignored. Precision
            ``torchbench`` (:data:`TORCHBENCH_PRECISION`, also as a vary value) becomes, per
            model, mode and device, the concrete precision TorchBench's run.py defaults to.
        settings: RunConfig fields for every run, over ``base``'s (``size="smoke"``, ...).
        modes: ``train`` and/or ``eval``, in run order.
        vary: axis -> values; the grid is their product, first axis outermost, innermost of
            all (so ``{"backend": ("eager", "inductor")}`` interleaves two backends per
            configuration). An axis is a RunConfig field (``batch_size``, ``backend``,
            ``options``, ...) or else a model argument; a tuple of names moves several
            together (``{("backend", "options"): [("eager", RunOptions()), ...]}``).
        rounds: the whole plan this many times, round-major (load drift hits every config alike).
            What is the same in every process is done in the first round only (:func:`later_round`):
            the deterministic metrics (``op_counts``, ``flops``, ...) and the ``accuracy`` check;
            a configuration with nothing left to measure after them runs once.
        batch_size: overrides ``base``'s; ``"auto"``: eval runs take the size ``tune-batch``
            stored for this device in ``batch_store`` (default store when None), train runs
            keep the model's default; models without a stored size are named to ``on_note``.

    Raises:
        ConfigError: a bad mode, size, repeat, warmup, rounds, batch size or vary axis. SelectionError: a
        pattern matches nothing (UnknownModelError: precision ``torchbench`` for a name taken
        as it is that no model registers). StoreError: the batch store cannot be read (``auto``).
    """
    planned = [k for k in settings if k in _PLANNED_ELSEWHERE or k == "batch_size"]
    if planned:
        raise ConfigError(
            planned[0],
            f"{planned[0]} is planned from the models, modes and batch_size arguments; "
            "accepted: the other RunConfig fields",
        )
    base = (base if base is not None else RunConfig(model="")).with_(**settings)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        given = f"invalid mode {bad[0]!r}" if bad else "no mode given"
        raise ConfigError("mode", f"{given}; accepted: {', '.join(MODES)}")
    if not _is_int(rounds) or rounds < 1:
        raise ConfigError("rounds", f"invalid rounds {rounds!r}; accepted: an integer >= 1")
    if batch_size not in (None, "auto") and (not _is_int(batch_size) or batch_size < 1):
        raise ConfigError("batch_size", f"invalid batch size {batch_size!r}; accepted: an integer >= 1 or 'auto'")
    _check_base(base)
    axes = _axes(vary or {})
    if batch_size == "auto" and any("batch_size" in names for names, _ in axes):
        raise ConfigError("batch_size", "batch size 'auto' and a batch_size axis; accepted: one of the two")
    if _is_int(batch_size):
        base = base.with_(batch_size=batch_size)
    from .suite import Selection  # suite imports this module

    names = models.models() if isinstance(models, Selection) else [models] if isinstance(models, str) else list(models)
    grid = list(itertools.product(*(rows for _, rows in axes)))
    one_round = []
    for model in names:
        for mode in modes:
            for point in grid:
                config = base.with_(model=model, mode=mode)
                for (axis, _), values in zip(axes, point):
                    config = _apply_axis(config, axis, values)
                one_round.append(_torchbench_precision(config) if config.precision == TORCHBENCH_PRECISION else config)
    if batch_size == "auto":
        one_round = _tuned_batch_sizes(one_round, batch_store, on_note)
    later = [c for c in (later_round(c) for c in one_round) if c is not None] if rounds > 1 else []
    return one_round + [c for _ in range(rounds - 1) for c in later]


def _torchbench_precision(config: RunConfig) -> RunConfig:
    """``config`` at the precision TorchBench's run.py defaults to for its model, mode and device type.

    A model that cannot run it (``unsupported_precisions``) is refused by the worker exactly as
    when that precision is asked for by name: status ``unsupported`` with the reason.

    Example: ``resnet50`` eval on ``cuda:1`` -> fp16; train on CUDA, or anything on CPU -> fp32.
    """
    from .registry import get_spec

    device_type = config.device.split(":", 1)[0]
    return config.with_(precision=get_spec(config.model).torchbench_default(config.mode, device_type))


def later_round(config: RunConfig) -> RunConfig | None:
    """``config`` as rounds after the first run it, or None when nothing is left to measure.

    A configuration's first round does everything asked; later rounds add independent samples
    of what varies between processes, so they drop what is the same in every process: the
    metrics whose judged quantities are all deterministic (the registry's facts:
    :func:`torchgauge.harness.metrics.collected_once`) and the ``accuracy`` check, which builds
    its own seeded workloads and does not depend on the process. Each record's
    ``requested_metrics`` and ``options`` say what it measured. A configuration left with no
    metric (only deterministic ones were asked) is not repeated. The training-divergence check
    stays in every process: it vouches for that process's own timings (measurement.py).

    Example:
        >>> later_round(RunConfig("dlrm", metrics=("time", "memory", "op_counts"))).metrics
        ('time', 'memory')
        >>> later_round(RunConfig("dlrm", metrics=("op_counts",))) is None
        True
    """
    from .harness.metrics import collected_once

    metrics = tuple(m for m in config.metrics if not collected_once(m))
    if not metrics:
        return None
    return config.with_(metrics=metrics, options=config.options.without("accuracy"))


def _check_base(base: RunConfig) -> None:
    """ConfigError unless the settings every planned run shares are in range."""
    if base.size not in SIZES:
        raise ConfigError("size", f"invalid size {base.size!r}; accepted: {', '.join(SIZES)}")
    if not _is_int(base.repeat) or base.repeat < 1:
        raise ConfigError("repeat", f"invalid repeat {base.repeat!r}; accepted: an integer >= 1")
    if not _is_int(base.warmup) or base.warmup < 0:
        raise ConfigError("warmup", f"invalid warmup {base.warmup!r}; accepted: an integer >= 0")
    adaptive = base.options.adaptive
    if adaptive is not None and adaptive.max_repeat < base.repeat:
        raise ConfigError(
            "max_repeat", f"adaptive repeats {base.repeat}..{adaptive.max_repeat}; accepted: repeat <= max_repeat"
        )
    from .stats.adaptive import MIN_STABLE_WARMUP

    if base.options.stable_warmup is not None and base.warmup < MIN_STABLE_WARMUP:
        raise ConfigError(
            "warmup",
            f"warmup {base.warmup} is the most warm-up steps with stable_warmup; accepted: warmup >= "
            f"{MIN_STABLE_WARMUP}, since stability is judged between two consecutive steps",
        )


def _tuned_batch_sizes(configs: list[RunConfig], store_path: Any, on_note: Callable[[str], None] | None) -> list:
    """Eval configs take tune-batch's size for their device; train keeps the model's (paper, sec. 2.2)."""
    if not configs:
        return configs
    from .workflows.tune_batch import BatchSizeStore, apply_tuned_batch_sizes, device_name

    name = device_name(configs[0].device)
    configs, missing = apply_tuned_batch_sizes(configs, BatchSizeStore(store_path), name)
    if missing and on_note is not None:
        on_note(
            f"no tuned batch size on {name} ({configs[0].size}) for {', '.join(missing)}; "
            "using the default (run `torchgauge tune-batch` first)"
        )
    return configs
