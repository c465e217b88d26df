"""Option validators shared by the commands: each turns bad input into a one-line error."""

from __future__ import annotations

import re

import click

__all__ = ["check_device", "fraction", "non_negative", "positive", "selected_models", "split_csv", "threshold"]

_DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?|mps|xpu(:\d+)?)$")


def check_device(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if not _DEVICE_RE.match(value):
        raise click.BadParameter(f"{value!r} is not a device; accepted: cpu, cuda, cuda:N, mps, xpu")
    return value


def positive(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise click.BadParameter(f"{value} is out of range; accepted: an integer >= 1")
    return value


def non_negative(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 0:
        raise click.BadParameter(f"{value} is out of range; accepted: an integer >= 0")
    return value


def split_csv(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def threshold(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A relative threshold: ``7%``, ``0.07`` or ``7`` (see compare.regression.parse_threshold)."""
    from ..compare.regression import parse_threshold

    if value is None:
        return None
    try:
        return parse_threshold(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def fraction(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """A fraction in (0, 1]: ``0.9`` or ``90%``."""
    text = value.strip()
    try:
        frac = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        frac = -1.0
    if not 0 < frac <= 1:
        raise click.BadParameter(f"{value!r}; accepted: a fraction in (0, 1] such as 0.9, or a percentage such as 90%")
    return frac


def selected_models(patterns, model_files=(), **filters) -> list[str]:
    """Load the user's model files, then the registered models matching ``patterns``.

    ``filters`` go to :func:`torchgauge.suite.select_models`; a selection error (nothing
    matches, an unknown name) becomes a one-line usage error.
    """
    from ..registry import load_model_file
    from ..suite import SelectionError, select_models

    for path in model_files:
        load_model_file(path)
    try:
        return select_models(patterns, **filters)
    except SelectionError as exc:
        raise click.UsageError(str(exc)) from None
