"""All CLI output goes through :class:`Terminal` (hatch's pattern): tables, messages, progress.

Data (tables, JSON) goes to stdout; messages and progress go to stderr, so
``torchgauge run ... --json > out.json`` stays clean. Messages are never hard-wrapped:
one message is one line in a CI log, whatever the width.

No text is ever parsed as rich markup: model names, errors, paths and hostnames come from
model files and results files, and ``[/data/shard-0]`` in an error must print as itself
(parsed, it raised a MarkupError that stopped the suite). Styles are applied as
:class:`rich.text.Text` spans, never by embedding ``[tags]`` in strings, and control
characters (ANSI escape sequences) are shown, not sent (``report.escape.terminal_text``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ..report.escape import terminal_text

__all__ = ["Terminal"]

PIPE_WIDTH = 160
STATUS_STYLES = {
    "ok": "green",
    "error": "red",
    "oom": "magenta",
    "timeout": "yellow",
    "unsupported": "dim",
    "skipped": "dim",
}


class Terminal:
    """Rich output with CI-aware colour (``NO_COLOR``, ``CI`` or a non-tty disable it)."""

    def __init__(self, *, quiet: bool = False) -> None:
        no_color = bool(os.environ.get("NO_COLOR"))
        # Piped output (CI logs, files) gets a wide fixed width instead of rich's 80 columns.
        self.out = Console(no_color=no_color, soft_wrap=False)
        if not self.out.is_terminal:
            self.out = Console(no_color=no_color, soft_wrap=False, width=PIPE_WIDTH)
        self.err = Console(stderr=True, no_color=no_color)
        self.quiet = quiet

    def info(self, message: str) -> None:
        if not self.quiet:
            self.err.print(Text(terminal_text(message)), highlight=False, soft_wrap=True)

    def success(self, message: str) -> None:
        self.err.print(Text(terminal_text(message), style="green"), highlight=False, soft_wrap=True)

    def warning(self, message: str) -> None:
        self.err.print(
            Text.assemble(("warning:", "yellow"), " ", terminal_text(message)), highlight=False, soft_wrap=True
        )

    def failure(self, message: str) -> None:
        """A verdict that fails (a regression, an undecidable change): red, and no ``error:`` prefix,
        which is kept for a command that could not finish."""
        self.err.print(Text(terminal_text(message), style="bold red"), highlight=False, soft_wrap=True)

    def error(self, message: str) -> None:
        self.err.print(Text.assemble(("error:", "red"), " ", terminal_text(message)), highlight=False, soft_wrap=True)

    def json(self, obj: Any) -> None:
        self.out.file.write(json.dumps(obj, indent=1, default=str) + "\n")

    def markdown(self, text: str) -> None:
        self.out.file.write(text if text.endswith("\n") else text + "\n")

    def table(
        self,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]],
        *,
        title: str | None = None,
        justify: Sequence[str] | None = None,
    ) -> None:
        tbl = Table(title=None if title is None else Text(terminal_text(title)), header_style="bold", show_lines=False)
        for i, col in enumerate(columns):
            tbl.add_column(Text(terminal_text(col)), justify=(justify[i] if justify else "left"), overflow="fold")
        for row in rows:
            tbl.add_row(*[self._cell(v) for v in row])
        self.out.print(tbl)

    @staticmethod
    def _cell(value: Any) -> Text:
        if value is None:
            return Text("-")
        if isinstance(value, float):
            return Text(f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}")
        text = terminal_text(value)
        status = text.split(":", 1)[0]  # "error: <the error line>" is styled by its status
        return Text(text, style=STATUS_STYLES.get(status, ""))

    def progress(self) -> Progress:
        """A progress bar on stderr (disabled when quiet)."""
        return Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),  # from the finished steps' rate
            TextColumn("{task.fields[current]}", markup=False),  # model names are not markup
            console=self.err,
            disable=self.quiet,
            transient=False,
        )
