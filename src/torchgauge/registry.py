"""Model registry: a decorator keyed by the builder's function name.

Shape follows torchvision's ``_api.py`` (duplicate names raise) with timm's
``list_models`` (fnmatch include/exclude, natural sort) and tags as data.

Example::

    @register_model(domain="vision", task="classification", batch_size=(32, 64),
                    source="He et al., Deep Residual Learning, 2015")
    def resnet50(ctx: BuildContext, **kwargs) -> Workload:
        return _create_resnet(ctx, layers=(3, 4, 6, 3), **kwargs)
"""

from __future__ import annotations

import difflib
import hashlib
import fnmatch
import importlib
import importlib.metadata
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:  # pragma: no cover
    from .workload import BuildContext, Workload

__all__ = [
    "DOMAINS",
    "MODES",
    "SIZES",
    "ModelFileError",
    "ModelSpec",
    "UnknownModelError",
    "AmbiguousModelError",
    "register_model",
    "add_spec",
    "list_models",
    "get_spec",
    "resolve_name",
    "get_builder",
    "create",
    "load_model_file",
    "load_plugins",
    "validate_model_names",
]

# The six domains of the TorchBench paper's Table 1.
DOMAINS = ("vision", "nlp", "recommendation", "rl", "speech", "other")
MODES = ("train", "eval")
SIZES = ("full", "smoke")
ENTRY_POINT_GROUP = "torchgauge.models"


class UnknownModelError(KeyError):
    """Raised for a model name that is not registered; the message lists close matches."""

    def __str__(self) -> str:  # KeyError quotes its message; we want plain text
        return str(self.args[0])


class AmbiguousModelError(UnknownModelError):
    """Raised for a name that matches several registered names case-insensitively (all listed)."""


class ModelFileError(ValueError):
    """A ``--model-file`` could not be loaded; the message is ``path:line: Type: message``."""


@dataclass(frozen=True)
class ModelSpec:
    """Registry record of one model: its builder plus metadata as data."""

    name: str
    # None for a model listed from the generated index whose module is not imported yet;
    # get_builder() imports it (see torchgauge.model_index).
    builder: Callable[..., "Workload"] | None
    domain: str  # one of DOMAINS
    task: str  # e.g. "classification", "language_modeling"
    source: str  # paper or reference implementation the architecture follows
    train_batch_size: int  # the original training code's batch size (paper, sec. 2.2)
    eval_batch_size: int  # default inference batch size (tune-batch can search a better one)
    # (train, eval) defaults on CPU where they differ (TorchBench divides several eval batches
    # on CPU, e.g. BERT_pytorch 16 -> 2); None: the same as on any other device.
    cpu_batch_size: tuple[int, int] | None = None
    modes: tuple[str, ...] = MODES  # modes the model supports
    devices: tuple[str, ...] = ("cpu", "cuda")  # device types the model supports
    tags: frozenset[str] = frozenset()  # free-form labels, e.g. "mlperf", "hf", "generation"
    param_count: int | None = None  # reference architecture's published parameter count
    unsupported_precisions: tuple[str, ...] = ()  # e.g. ("fp16",) with reasons in `notes`
    notes: str = ""  # anything a user should know (why a mode or precision is unsupported)
    module: str = ""  # python module that registered it (the architecture family)
    # Heavy modules the builder imports lazily (e.g. transformers): a suite run that selects
    # the model imports them once in the runner's forkserver, not again in every worker.
    preload: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def batch_size(self, mode: str, device_type: str | None = None) -> int:
        """Default batch size for ``mode`` on ``device_type`` (``"cpu"``, ``"cuda"``; None: not CPU)."""
        if device_type == "cpu" and self.cpu_batch_size is not None:
            return self.cpu_batch_size[0] if mode == "train" else self.cpu_batch_size[1]
        return self.train_batch_size if mode == "train" else self.eval_batch_size

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready metadata (no builder)."""
        return {
            "name": self.name,
            "domain": self.domain,
            "task": self.task,
            "source": self.source,
            "train_batch_size": self.train_batch_size,
            "eval_batch_size": self.eval_batch_size,
            "cpu_batch_size": list(self.cpu_batch_size) if self.cpu_batch_size else None,
            "modes": list(self.modes),
            "devices": list(self.devices),
            "tags": sorted(self.tags),
            "param_count": self.param_count,
            "module": self.module,
            "notes": self.notes,
        }


_specs: dict[str, ModelSpec] = {}
_module_to_names: dict[str, set[str]] = {}
_builtins_loaded = False


def register_model(
    *,
    domain: str,
    task: str,
    source: str,
    batch_size: int | tuple[int, int],
    cpu_batch_size: int | tuple[int, int] | None = None,
    modes: Iterable[str] = MODES,
    devices: Iterable[str] = ("cpu", "cuda"),
    tags: Iterable[str] = (),
    param_count: int | None = None,
    unsupported_precisions: Iterable[str] = (),
    notes: str = "",
    preload: Iterable[str] = (),
    **extra: Any,
) -> Callable[[Callable[..., "Workload"]], Callable[..., "Workload"]]:
    """Register the decorated builder under its function name.

    Args:
        domain: one of :data:`DOMAINS`.
        task: the model's task, free text in snake_case.
        source: the paper or implementation the architecture follows.
        batch_size: one int for both modes, or ``(train, eval)``.
        cpu_batch_size: the defaults on CPU where they differ, same form; None: as ``batch_size``.
        modes: subset of ``("train", "eval")``.
        devices: device types supported (``"cpu"``, ``"cuda"``, ...).
        tags: labels as data (``"mlperf"``, ``"hf"``, ...).
        param_count: reference parameter count, checked by tests where given.
        unsupported_precisions: precisions the model cannot run in.
        notes: free text shown by ``torchgauge list``.
        preload: modules the builder imports lazily and slowly; the runner imports them
            once in its forkserver when the model is selected, so workers start warm.
        extra: further metadata kept in ``ModelSpec.extra``.

    Raises:
        ValueError: on a duplicate name, an unknown domain or mode.
    """
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; accepted: {', '.join(DOMAINS)}")
    modes = tuple(modes)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"invalid modes {modes!r}; accepted: {', '.join(MODES)}")
    train_bs, eval_bs = (batch_size, batch_size) if isinstance(batch_size, int) else batch_size
    cpu_bs = (cpu_batch_size, cpu_batch_size) if isinstance(cpu_batch_size, int) else cpu_batch_size

    def decorator(fn: Callable[..., "Workload"]) -> Callable[..., "Workload"]:
        name = fn.__name__
        spec = ModelSpec(
            name=name,
            builder=fn,
            domain=domain,
            task=task,
            source=source,
            train_batch_size=int(train_bs),
            eval_batch_size=int(eval_bs),
            cpu_batch_size=None if cpu_bs is None else (int(cpu_bs[0]), int(cpu_bs[1])),
            modes=modes,
            devices=tuple(devices),
            tags=frozenset(tags),
            param_count=param_count,
            unsupported_precisions=tuple(unsupported_precisions),
            notes=notes,
            module=fn.__module__,
            preload=tuple(preload),
            extra=dict(extra),
        )
        add_spec(spec)
        mod = sys.modules.get(fn.__module__)
        if mod is not None and hasattr(mod, "__all__") and name not in mod.__all__:
            mod.__all__.append(name)
        return fn

    return decorator


def add_spec(spec: ModelSpec) -> ModelSpec:
    """Register a ready :class:`ModelSpec` (``register_model`` and the zoo adapters); duplicates raise."""
    indexed = _specs.get(spec.name)  # an entry of the generated index is replaced by its real spec
    if indexed is not None and not (indexed.builder is None and indexed.module == spec.module):
        raise ValueError(f"model {spec.name!r} is already registered by {indexed.module}; names must be unique")
    _specs[spec.name] = spec
    _module_to_names.setdefault(spec.module, set()).add(spec.name)
    return spec


def _natural_key(name: str) -> list[Any]:
    # resnet18 < resnet50 < resnet101
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


def _ensure_builtins() -> None:
    """List the built-in models from the generated index (no model import) and load plugins."""
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        from .model_index import read_index

        for entry in read_index():
            if entry["name"] in _specs:  # its module was imported first: the real spec stands
                continue
            _specs[entry["name"]] = ModelSpec(
                builder=None,
                **{k: v for k, v in entry.items()
                   if k not in ("cpu_batch_size", "modes", "devices", "tags", "unsupported_precisions", "preload")},
                cpu_batch_size=tuple(entry["cpu_batch_size"]) if entry.get("cpu_batch_size") else None,
                modes=tuple(entry["modes"]),
                devices=tuple(entry["devices"]),
                tags=frozenset(entry["tags"]),
                unsupported_precisions=tuple(entry["unsupported_precisions"]),
                preload=tuple(entry["preload"]),
            )
            _module_to_names.setdefault(entry["module"], set()).add(entry["name"])
        load_plugins()


def list_models(
    include: str | Iterable[str] | None = None,
    exclude: str | Iterable[str] | None = None,
    *,
    domain: str | Iterable[str] | None = None,
    tags: str | Iterable[str] | None = None,
    module: str | None = None,
) -> list[str]:
    """Names of registered models, naturally sorted.

    Args:
        include: fnmatch pattern(s); a name matching any is kept (default: all).
        exclude: fnmatch pattern(s) removed after ``include``.
        domain: keep models of these domains.
        tags: keep models carrying *all* of these tags.
        module: keep models registered by this module: its last component (``"resnet"``) or
            an fnmatch pattern of the full module path.

    Example:
        >>> list_models("resnet*", domain="vision")  # doctest: +SKIP
        ['resnet18', 'resnet50', 'resnet152']
    """
    _ensure_builtins()
    names = list(_specs)
    if include:
        pats = [include] if isinstance(include, str) else list(include)
        names = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in pats)]
    if exclude:
        pats = [exclude] if isinstance(exclude, str) else list(exclude)
        names = [n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in pats)]
    if domain:
        doms = {domain} if isinstance(domain, str) else set(domain)
        unknown = doms - set(DOMAINS)
        if unknown:
            raise ValueError(f"unknown domain {sorted(unknown)[0]!r}; accepted: {', '.join(DOMAINS)}")
        names = [n for n in names if _specs[n].domain in doms]
    if tags:
        want = {tags} if isinstance(tags, str) else set(tags)
        names = [n for n in names if want <= _specs[n].tags]
    if module:
        names = [
            n for n in names
            if _specs[n].module.rsplit(".", 1)[-1] == module or fnmatch.fnmatchcase(_specs[n].module, module)
        ]
    return sorted(names, key=_natural_key)


def resolve_name(name: str) -> str:
    """The registered name that ``name`` means.

    An exact match wins; otherwise a case-insensitive match is taken when it is the only one
    (``hf_bert`` -> ``hf_Bert``). A zoo name (``timm:NAME``, ``torchvision:NAME``,
    ``hf:MODEL_TYPE``) is registered on first use by :mod:`torchgauge.zoo`.

    Raises:
        UnknownModelError: no model of that name (close matches listed), several models
            differing only in case (all listed), or a zoo whose package is missing.
    """
    _ensure_builtins()
    if name in _specs:
        return name
    if ":" in name:
        from .zoo import register_zoo_model

        return register_zoo_model(name).name
    folded = [n for n in _specs if n.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    if folded:
        raise AmbiguousModelError(
            f"model name {name!r} is ambiguous: it matches {', '.join(sorted(folded, key=_natural_key))} "
            "case-insensitively; give the exact name"
        )
    by_lower = {n.lower(): n for n in _specs}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=5, cutoff=0.5)
    hint = f"; did you mean: {', '.join(by_lower[c] for c in close)}?" if close else "; see `torchgauge list`"
    raise UnknownModelError(f"unknown model {name!r}{hint}")


def get_spec(name: str) -> ModelSpec:
    """The :class:`ModelSpec` of ``name`` (resolved by :func:`resolve_name`); unknown names raise."""
    return _specs[resolve_name(name)]


def get_builder(name: str) -> Callable[..., "Workload"]:
    """The builder of ``name``, importing its module if the model was listed from the index.

    Raises:
        UnknownModelError: ``name`` is not registered.
        RuntimeError: the index names a module that no longer registers ``name``.
    """
    spec = get_spec(name)
    if spec.builder is None:
        importlib.import_module(spec.module)
        spec = _specs[name]
        if spec.builder is None:
            raise RuntimeError(f"the model index says {spec.module} registers {name!r} but it does not; "
                               "regenerate it with `python -m torchgauge.model_index`")
    return spec.builder


def create(
    name: str,
    mode: str = "train",
    device: str = "cpu",
    batch_size: int | None = None,
    size: str = "full",
    *,
    seed: int = 0,
    **model_kwargs: Any,
) -> "Workload":
    """Build a workload: module, optimizer (train), inputs already on ``device``.

    Args:
        name: a registered model name.
        mode: ``"train"`` or ``"eval"``.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...
        batch_size: overrides the model's default for ``mode`` on ``device``'s type.
        size: ``"full"`` (the real benchmark) or ``"smoke"`` (tiny, same code path).
        seed: seeds weights and synthetic inputs.
        model_kwargs: architecture overrides passed to the builder (e.g. ``embedding_dim=64``).

    Returns:
        A :class:`~torchgauge.workload.Workload` whose ``step()`` runs one iteration.

    Raises:
        UnsupportedError: the model does not support ``mode`` or ``device``.

    Example:
        >>> w = create("resnet18", mode="eval", size="smoke")  # doctest: +SKIP
        >>> out = w.step()  # doctest: +SKIP
    """
    from .workload import BuildContext, UnsupportedError, seed_everything

    spec = get_spec(name)
    name = spec.name
    if mode not in MODES:
        raise ValueError(f"invalid mode {mode!r}; accepted: {', '.join(MODES)}")
    if size not in SIZES:
        raise ValueError(f"invalid size {size!r}; accepted: {', '.join(SIZES)}")
    if mode not in spec.modes:
        raise UnsupportedError(f"{name} does not support mode {mode!r} (supports {', '.join(spec.modes)})")
    import torch

    dev = torch.device(device)
    if dev.type not in spec.devices:
        raise UnsupportedError(f"{name} does not support device {dev.type!r} (supports {', '.join(spec.devices)})")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"invalid batch size {batch_size}; accepted: a positive integer")
    if size == "full":
        from .capacity import check_memory_need, device_memory_gib, memory_need_gib

        need = memory_need_gib(spec.extra, mode)
        reason = need and check_memory_need(name, mode, need, device_memory_gib(dev))
        if reason:
            raise UnsupportedError(reason)
    ctx = BuildContext(
        name=name,
        mode=mode,
        device=dev,
        batch_size=batch_size or spec.batch_size(mode, dev.type),
        size=size,
        seed=seed,
        batch_size_given=batch_size is not None,
    )
    seed_everything(seed)
    workload = ctx.finish(get_builder(name)(ctx, **model_kwargs))
    return workload


def load_model_file(path: str | Path) -> list[str]:
    """Import a user's Python file that registers models; returns the names it added."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    _ensure_builtins()
    before = set(_specs)
    mod_name = "torchgauge_user_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    if mod_name in sys.modules:  # already loaded in this process
        return sorted(_module_to_names.get(mod_name, ()), key=_natural_key)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import model file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a syntax error, an exception at import, a duplicate name
        del sys.modules[mod_name]
        for name in set(_specs) - before:  # half-loaded: forget what it registered
            _module_to_names.get(_specs.pop(name).module, set()).discard(name)
        raise ModelFileError(_model_file_problem(path, exc)) from exc
    except BaseException:
        del sys.modules[mod_name]
        raise
    return sorted(set(_specs) - before, key=_natural_key)


def _model_file_problem(path: Path, exc: Exception) -> str:
    """``path:line: Type: message`` for an exception raised while importing ``path``."""
    line = exc.lineno if isinstance(exc, SyntaxError) else None
    if line is None:  # the innermost frame of the traceback that lies in the file itself
        import traceback

        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path]
        line = frames[-1].lineno if frames else None
    message = (exc.msg if isinstance(exc, SyntaxError) else str(exc)).strip().splitlines()
    where = f"{path}:{line}" if line else str(path)
    return f"{where}: {type(exc).__name__}: {message[0] if message else ''}"[:1000]


def validate_model_names(names: Iterable[str]) -> list[str]:
    """``names`` read from a file or a database, checked to be registered models.

    Such names are data: one that is not registered (say ``--model-file=/tmp/x.py`` in a
    crafted results file) must never reach a command line, where it would be parsed as
    an option or a wildcard pattern. Load the user's own ``--model-file`` files first.

    Raises:
        UnknownModelError: a name is not registered.
    """
    _ensure_builtins()
    out = []
    for name in names:
        if not isinstance(name, str) or name not in _specs or name.startswith("-") or any(ch in name for ch in "*?[]"):
            raise UnknownModelError(f"{name!r} is not a registered model name; refusing to pass it to a command")
        out.append(name)
    return out


def load_plugins() -> list[str]:
    """Import every package registered under the ``torchgauge.models`` entry-point group."""
    loaded = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        ep.load()
        loaded.append(ep.name)
    return loaded
