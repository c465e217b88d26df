"""matplotlib, imported lazily with the Agg backend: charts are files, never windows."""

from __future__ import annotations

from typing import Any

__all__ = ["pyplot"]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend; a one-line RuntimeError when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("charts need matplotlib: pip install matplotlib (or torchgauge[plot])") from None
    return plt
