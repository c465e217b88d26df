"""Built-in models, one package per domain; each imports its architecture families explicitly.

Importing this package imports no model: the registry lists them from the generated index
(:mod:`torchgauge.model_index`) and imports a model's module when its builder is needed.
:func:`import_all` imports every domain (the runner's forkserver, the index generator).

A domain package that fails to import (a missing optional dependency handled badly, a bug)
must not take the other domains down: its traceback is kept in :data:`IMPORT_ERRORS`, and
the index generator and the test suite fail on it.
"""

import importlib
import traceback

__all__ = ["DOMAIN_PACKAGES", "IMPORT_ERRORS", "import_all"]

DOMAIN_PACKAGES = ("vision", "nlp", "speech", "recommendation", "rl", "other")
IMPORT_ERRORS: dict[str, str] = {}


def import_all() -> None:
    """Import every domain package (registering all built-in models); failures go to IMPORT_ERRORS."""
    for pkg in DOMAIN_PACKAGES:
        try:
            importlib.import_module(f"{__name__}.{pkg}")
        except Exception:  # recorded and reported, never swallowed silently
            IMPORT_ERRORS[pkg] = traceback.format_exc()
