"""Comparisons of results: compiler backends, devices and builds (judging, no measuring).

``torchgauge.compare`` is this package *and* the notebook call ``torchgauge.compare(a, b)``
(:func:`torchgauge.api.compare`): once any ``torchgauge.compare.*`` module is imported, the
import system binds the name ``compare`` on ``torchgauge`` to this package, so a plain
function of that name could not stay reachable. The package's module class gets a
``__call__`` that forwards to the function instead.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self, a: Any, b: Any, **judge: Any) -> Any:
        from ..api import compare

        return compare(a, b, **judge)


sys.modules[__name__].__class__ = _CallablePackage
