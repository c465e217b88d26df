"""All CLI output goes through :class:`Terminal` (hatch's pattern): tables, messages, progress.

Data (tables, JSON) goes to stdout; messages and progress go to stderr, so
``torchgauge run ... --json > out.json`` stays clean.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

__all__ = ["Terminal"]

PIPE_WIDTH = 160
STATUS_STYLES = {"ok": "green", "error": "red", "oom": "magenta", "timeout": "yellow", "unsupported": "dim", "skipped": "dim"}


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
            self.err.print(message, highlight=False)

    def success(self, message: str) -> None:
        self.err.print(f"[green]{message}[/green]", highlight=False)

    def warning(self, message: str) -> None:
        self.err.print(f"[yellow]warning:[/yellow] {message}", highlight=False)

    def error(self, message: str) -> None:
        self.err.print(f"[red]error:[/red] {message}", highlight=False)

    def json(self, obj: Any) -> None:
        self.out.file.write(json.dumps(obj, indent=1, default=str) + "\n")

    def markdown(self, text: str) -> None:
        self.out.file.write(text if text.endswith("\n") else text + "\n")

    def table(self, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None,
              justify: Sequence[str] | None = None) -> None:
        tbl = Table(title=title, header_style="bold", show_lines=False)
        for i, col in enumerate(columns):
            tbl.add_column(col, justify=(justify[i] if justify else "left"), overflow="fold")
        for row in rows:
            tbl.add_row(*[self._cell(v) for v in row])
        self.out.print(tbl)

    @staticmethod
    def _cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
        if isinstance(value, str) and value in STATUS_STYLES:
            return f"[{STATUS_STYLES[value]}]{value}[/{STATUS_STYLES[value]}]"
        return str(value)

    def progress(self) -> Progress:
        """A progress bar on stderr (disabled when quiet)."""
        return Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),  # from the finished steps' rate
            TextColumn("{task.fields[current]}"),
            console=self.err,
            disable=self.quiet,
            transient=False,
        )
