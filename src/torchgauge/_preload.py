"""Imported once by the runner's forkserver so that every forked worker starts warm."""

import importlib
import os

from . import configure, measurement, registry  # noqa: F401  (imported to warm the forkserver for its workers)
from .registry import list_models
from .runner import forkserver_dies_with_parent

forkserver_dies_with_parent()

list_models()  # the index and the entry-point plugins; model modules: see below

# The selected models' own modules and heavy lazy imports (runner.PRELOAD_ENV; torch._dynamo when
# a run trains or compiles). Any failure is left for the model's own worker to report: the
# forkserver must survive a broken optional package.
for _name in filter(None, os.environ.get("TORCHGAUGE_PRELOAD", "").split(",")):
    try:
        importlib.import_module(_name)
    except Exception:
        pass
