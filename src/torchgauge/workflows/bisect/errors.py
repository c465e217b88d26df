"""What stops a bisection (:class:`BisectSetupError`) or one of its points (:class:`BuildFailed`)."""

from __future__ import annotations

__all__ = ["LOG_TAIL_LINES", "BisectSetupError", "BuildFailed", "output_tail"]

# Lines of a failed build's or measurement's output kept in the report.
LOG_TAIL_LINES = 15


class BisectSetupError(ValueError):
    """The range or the request is unusable (unknown SHA, not an ancestor, no such file)."""


class BuildFailed(RuntimeError):
    """A point could not be built, installed or measured; the bisection skips it."""


def output_tail(text: str, n: int = LOG_TAIL_LINES) -> str:
    """The last ``n`` non-blank lines of a process's output, for an error message."""
    return "\n".join([ln for ln in text.rstrip().splitlines() if ln.strip()][-n:])
