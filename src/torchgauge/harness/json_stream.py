"""Incremental reader of Chrome trace JSON: the ``traceEvents`` array one event at a time.

A profiler trace is one JSON object whose ``traceEvents`` array holds nearly all of its
bytes. Loading it with :func:`json.load` holds the whole text and every event dict at once
(several times the file size); this reader keeps a bounded window of text instead and
decodes one array element at a time with the standard decoder (its C scanner), so memory
grows with the events the caller keeps, not with the file.

Accepted shapes (both from the Chrome trace-event format): an object with a ``traceEvents``
array and other top-level keys in any order, or a bare array of events. Gzipped files are
recognised by their magic bytes, not their name.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
from collections.abc import Callable, Iterator
from typing import IO, Any

__all__ = ["CHUNK_CHARS", "TraceFormatError", "iter_trace_json", "open_trace_text"]

# Characters read per refill: large enough that the decoder rarely retries a split event,
# small enough that the window stays a few MB whatever the file size.
CHUNK_CHARS = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_NON_BLANK = re.compile(r"[^ \t\n\r]")


class TraceFormatError(ValueError):
    """The file is not Chrome trace JSON (or is cut short)."""


def open_trace_text(path: str | os.PathLike) -> IO[str]:
    """Open a trace as UTF-8 text, gunzipping when the file starts with the gzip magic."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == _GZIP_MAGIC:
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


class _Window:
    """A sliding window of text over a stream, with JSON values decoded at its cursor."""

    def __init__(self, fh: IO[str], where: str) -> None:
        self.fh = fh
        self.where = where
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.decoder = json.JSONDecoder()

    def _fill(self) -> bool:
        if self.eof:
            return False
        chunk = self.fh.read(CHUNK_CHARS)
        if not chunk:
            self.eof = True
            return False
        if self.pos > len(self.buf) // 2:  # drop what was consumed before growing
            self.buf, self.pos = self.buf[self.pos :], 0
        self.buf += chunk
        return True

    def peek(self) -> str:
        """The next non-blank character ('' at the end of the stream), not consumed."""
        while True:
            m = _NON_BLANK.search(self.buf, self.pos)
            if m is not None:
                self.pos = m.start()
                return self.buf[self.pos]
            self.pos = len(self.buf)
            if not self._fill():
                return ""

    def expect(self, chars: str) -> str:
        c = self.peek()
        if c == "" or c not in chars:
            found = "the end of the file" if c == "" else repr(c)
            raise TraceFormatError(
                f"{self.where}: expected one of {' '.join(repr(x) for x in chars)} "
                f"but found {found}; accepted: Chrome trace JSON (an object with a "
                "traceEvents array, or an array of events), optionally gzipped"
            )
        self.pos += 1
        return c

    def value(self) -> Any:
        """Decode the JSON value at the cursor, reading more text until it is complete."""
        self.peek()
        while True:
            try:
                obj, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self._fill():
                    continue  # the value runs past the window
                raise TraceFormatError(
                    f"{self.where}: invalid JSON ({exc.msg} at character {exc.pos}); the file may be cut short"
                ) from None
            if end == len(self.buf) and self._fill():
                continue  # a number may go on past the window's end: decode it again
            self.pos = end
            return obj


def iter_trace_json(
    fh: IO[str], on_metadata: Callable[[str, Any], None] | None = None, where: str = "trace"
) -> Iterator[dict]:
    """Yield the trace's events (dicts) in file order.

    Args:
        fh: text stream (see :func:`open_trace_text`).
        on_metadata: called with ``(key, value)`` for every top-level key other than
            ``traceEvents`` (``deviceProperties``, ``distributedInfo``, ...), when it is read.
        where: how error messages name the stream (the file's path).

    Raises:
        TraceFormatError: not Chrome trace JSON, or cut short (events before the damage have
            already been yielded).

    Example:
        >>> import io
        >>> [e["name"] for e in iter_trace_json(io.StringIO('{"traceEvents": [{"name": "a"}]}'))]
        ['a']
    """
    win = _Window(fh, where)
    opening = win.expect("{[")
    if opening == "[":
        yield from _array_items(win)
        return
    if win.peek() == "}":
        win.pos += 1
        return
    while True:
        key = win.value()
        if not isinstance(key, str):
            raise TraceFormatError(f"{where}: a top-level key is not a string ({key!r})")
        win.expect(":")
        if key == "traceEvents" and win.peek() == "[":
            win.pos += 1
            yield from _array_items(win)
        else:
            value = win.value()
            if on_metadata is not None:
                on_metadata(key, value)
        if win.expect(",}") == "}":
            return


def _array_items(win: _Window) -> Iterator[Any]:
    # Called after '['; consumes up to and including the closing ']'. Kineto has written a
    # trailing comma before ']' in some versions: accepted.
    while True:
        if win.peek() == "]":
            win.pos += 1
            return
        yield win.value()
        if win.expect(",]") == "]":
            return
