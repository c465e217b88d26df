"""Imported once by the runner's forkserver so that every forked worker starts warm."""

import importlib
import os

import torch

from . import configure, measurement, registry  # noqa: F401  (imported to warm the forkserver for its workers)
from .registry import list_models
from .runner import forkserver_dies_with_parent

forkserver_dies_with_parent()

list_models()  # the index and the entry-point plugins; model modules: see below
# The first optimizer a process builds imports torch._dynamo (about 4 s on a 2-core CPU);
# doing it here once keeps that cost out of every training worker's wall time.
torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

# The selected models' own modules and heavy lazy imports (runner.PRELOAD_ENV). Any failure is left for
# the model's own worker to report: the forkserver must survive a broken optional package.
for _name in filter(None, os.environ.get("TORCHGAUGE_PRELOAD", "").split(",")):
    try:
        importlib.import_module(_name)
    except Exception:
        pass
