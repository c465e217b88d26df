"""Option validators shared by the commands: each turns bad input into a one-line error."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import click

__all__ = [
    "MEBIBYTES",
    "PROBABILITY",
    "SECONDS",
    "SEED",
    "Number",
    "bad_config",
    "check_device",
    "fraction",
    "non_negative",
    "positive",
    "selected_models",
    "split_csv",
    "threshold",
]


class Number(click.ParamType):
    """A finite number in a range; the usage error names the range.

    ``click.FloatRange`` lets ``nan`` through (every comparison with it is false), and
    ``--timeout nan`` silently switched the timeout off; ``inf`` is refused here too.

    Args:
        low, high: bounds (None: unbounded on that side).
        low_open, high_open: exclude the bound itself.
        unit: what the number is, in the accepted range's wording: "seconds", "MiB", "alpha".
    """

    name = "number"

    def __init__(
        self,
        low: float | None = None,
        high: float | None = None,
        *,
        low_open: bool = False,
        high_open: bool = False,
        unit: str = "x",
    ) -> None:
        self.low, self.high, self.low_open, self.high_open, self.unit = low, high, low_open, high_open, unit

    def accepted(self) -> str:
        """The range in words, e.g. ``seconds > 0 (finite)`` or ``0 < alpha < 1``."""
        lo = "<" if self.low_open else "<="
        hi = "<" if self.high_open else "<="
        if self.low is not None and self.high is not None:
            return f"{self.low:g} {lo} {self.unit} {hi} {self.high:g}"
        if self.low is not None:
            return f"{self.unit} {'>' if self.low_open else '>='} {self.low:g} (finite)"
        if self.high is not None:
            return f"{self.unit} {hi} {self.high:g} (finite)"
        return f"{self.unit}: a finite number"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number; accepted: {self.accepted()}", param, ctx)
        too_low = self.low is not None and (number <= self.low if self.low_open else number < self.low)
        too_high = self.high is not None and (number >= self.high if self.high_open else number > self.high)
        if not math.isfinite(number) or too_low or too_high:
            self.fail(f"{value!r} is out of range; accepted: {self.accepted()}", param, ctx)
        return number


SECONDS = Number(0, low_open=True, unit="seconds")  # --timeout, --budget-s, ...
MEBIBYTES = Number(0, low_open=True, unit="MiB")  # --memory-limit
PROBABILITY = Number(0, 1, low_open=True, high_open=True, unit="alpha")  # --alpha
SEED = click.IntRange(0, 2**63 - 1)  # torch.manual_seed's range (non-negative part)

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


def bad_config(exc) -> click.BadParameter:
    """A :class:`torchgauge.config.ConfigError` as a usage error naming its flag (flags are the
    options' names with dashes: ``compile_scope`` -> ``--compile-scope``)."""
    return click.BadParameter(str(exc), param_hint="--" + exc.option.replace("_", "-"))


def model_file_option(help_text: str = "Python file registering extra models (repeatable).") -> Callable:
    """``--model-file FILE`` (repeatable, into ``model_files``), as every command that names models takes it."""
    return click.option(
        "--model-file", "model_files", multiple=True, type=click.Path(exists=True, dir_okay=False), help=help_text
    )
