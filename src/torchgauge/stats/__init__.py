"""Pure statistics over numbers: summaries, change tests, step detection.

Nothing here imports torch, the harness or the store; every function takes and returns
plain Python values so it can be tested on synthetic series with known answers.
"""

from .summary import Summary, median_ci, summarize

__all__ = ["Summary", "median_ci", "summarize"]
