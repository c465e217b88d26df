"""Option validators shared by the commands: each turns bad input into a one-line error."""

from __future__ import annotations

import re

import click

__all__ = ["check_device", "positive", "non_negative", "split_csv"]

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
