"""Built-in models, one package per domain; each imports its architecture families explicitly.

A domain package that fails to import (a missing optional dependency handled badly, a bug)
must not take the other domains down: its traceback is kept in :data:`IMPORT_ERRORS`,
``torchgauge list`` warns about it, and the test suite fails on it.
"""

import importlib
import traceback

DOMAIN_PACKAGES = ("vision", "nlp", "speech", "recommendation", "rl", "other")
IMPORT_ERRORS: dict[str, str] = {}

for _pkg in DOMAIN_PACKAGES:
    try:
        importlib.import_module(f"{__name__}.{_pkg}")
    except Exception:  # noqa: BLE001 - recorded and reported, never swallowed silently
        IMPORT_ERRORS[_pkg] = traceback.format_exc()
