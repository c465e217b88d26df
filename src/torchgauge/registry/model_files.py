"""``--model-file``: a user's Python file that registers models, imported under a stable private name."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from .entries import load_builtin_index, names_by_module, specs
from .lookup import natural_key
from .model_spec import ModelFileError

__all__ = ["load_model_file"]


def load_model_file(path: str | Path) -> list[str]:
    """Import a user's Python file that registers models; returns the names it added."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path}")
    load_builtin_index()
    before = set(specs)
    mod_name = "torchgauge_user_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    if mod_name in sys.modules:  # already loaded in this process
        return sorted(names_by_module.get(mod_name, ()), key=natural_key)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import model file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a syntax error, an exception at import, a duplicate name
        del sys.modules[mod_name]
        for name in set(specs) - before:  # half-loaded: forget what it registered
            names_by_module.get(specs.pop(name).module, set()).discard(name)
        raise ModelFileError(_model_file_problem(path, exc)) from exc
    except BaseException:
        del sys.modules[mod_name]
        raise
    return sorted(set(specs) - before, key=natural_key)


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
