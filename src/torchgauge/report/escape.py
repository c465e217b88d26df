"""Escaping of untrusted text for what torchgauge writes: Markdown, HTML and the terminal.

Model names, error text, hostnames and environment values come from model files and from
results files made on other machines. The nightly posts the Markdown report as a GitHub
issue body, so such a value must never turn into markup there: no raw HTML (a
``</details>`` break-out), no links or images, no @-mentions that notify people, no
heading or table row injected through a newline or a pipe. Every renderer passes each
untrusted value through one of these functions for the context it lands in; a later HTML
output uses :func:`html_text`. On a terminal, escape sequences in such a value could
retitle the window or rewrite what was printed: :func:`terminal_text` shows them instead.

Example:
    >>> markdown_text("</details>\\n# pwned @team [x](http://e.com)")
    '&lt;/details&gt; \\\\# pwned @\\u200bteam \\\\[x\\\\]\\\\(http:\\u200b//e.com\\\\)'
"""

from __future__ import annotations

import html
import re

__all__ = ["html_text", "markdown_code", "markdown_text", "terminal_text"]

# Backslash-escaped everywhere: emphasis, code, links and images, headings, tables,
# strikethrough, and the backslash itself (& < > become HTML entities first). An
# underscore inside a word (torch_version) is never emphasis in GitHub Markdown.
_MARKDOWN_SPECIALS = re.compile(r"([\\`*\[\]()#|~!]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
# Only at the start of a value, where it may start a line: a bullet or an ordered list.
_LEADING_BLOCK = re.compile(r"^(\s*)([-+])|^(\s*\d+)([.)])(?=\s|$)")
# GitHub turns @name into a mention, #123 into an issue reference and bare URLs into links
# on the rendered text, so backslash escapes do not stop them; a zero-width space does.
_ZWSP = "\u200b"
_LINKIFIED = re.compile(r"(?i)(@(?=[a-z0-9_-])|#(?=\d)|:(?=//)|www(?=\.))")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c]+")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
# C0 controls but newline and tab, DEL and the C1 controls (ESC starts ANSI sequences, and
# \x9b is a one-byte CSI on some terminals).
_TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _one_line(value: object) -> str:
    return _CONTROL.sub("", _LINE_BREAKS.sub(" ", str(value)))


def markdown_text(value: object, *, line_start: bool = False) -> str:
    """``value`` as literal text in a Markdown table cell, heading or sentence.

    Newlines become spaces (no injected heading, list or table row), HTML special
    characters become entities, Markdown punctuation is backslash-escaped (pipes included,
    so the value stays in its table cell), and mentions, issue references and bare URLs
    are defused. ``line_start``: the value begins a line of the document, so a leading
    ``-``, ``+`` or ``1.`` is escaped too (inside a table cell or a sentence it is text).
    """
    text = _LINKIFIED.sub(lambda m: m.group(1) + _ZWSP, _one_line(value))
    text = html.escape(text, quote=False)  # before the backslashes: entities add no specials
    text = _MARKDOWN_SPECIALS.sub(r"\\\1", text)
    if not line_start:
        return text
    return _LEADING_BLOCK.sub(lambda m: f"{m.group(1) or m.group(3) or ''}\\{m.group(2) or m.group(4)}", text)


def markdown_code(value: object) -> str:
    """``value`` as an inline code span (shown verbatim), safe inside a table cell.

    The fence is one backtick longer than the longest run of backticks in the value, and
    pipes are escaped (GitHub splits table cells on ``|`` even inside code spans).
    """
    text = _one_line(value).replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def html_text(value: object) -> str:
    """``value`` as text content or a quoted attribute value in HTML."""
    return html.escape(str(value), quote=True)


def terminal_text(value: object) -> str:
    """``value`` safe to print on a terminal: control characters shown as ``\\xNN``."""
    return _TERMINAL_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))
