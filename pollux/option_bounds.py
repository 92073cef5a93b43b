"""Ranges of the command line's numeric options, checked while the options are parsed, before a command starts
anything: `--interval 0` would spin a scheduler or a simulation for ever, `--max-attempts 0` fail jobs unlaunched.

Typer's own `min=`/`max=` answer with a boxed usage panel and cannot exclude an end (`> 0`); this keeps the project's
one-line `error: ...`, exit 2, and names the option and the accepted range."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import typer

from pollux.errors import PolluxError

Number = TypeVar("Number", int, float)


def _fmt(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def bounds(
    low: float | None = None, high: float | None = None, *, low_open: bool = False, high_open: bool = False
) -> Callable[[typer.CallbackParam, Number | None], Number | None]:
    """An option callback refusing a value outside [low, high] (an end excluded when `*_open`), NaN and infinity."""
    if low is not None and high is not None:
        accepted = f"in {'(' if low_open else '['}{_fmt(low)}, {_fmt(high)}{')' if high_open else ']'}"
    elif low is not None:
        accepted = f"{'>' if low_open else '>='} {_fmt(low)}"
    elif high is not None:
        accepted = f"{'<' if high_open else '<='} {_fmt(high)}"
    else:
        accepted = "finite"

    def check(param: typer.CallbackParam, value: Number | None) -> Number | None:
        if value is None:  # an optional option left out
            return value
        inside = math.isfinite(value)
        if inside and low is not None:
            inside = value > low if low_open else value >= low
        if inside and high is not None:
            inside = value < high if high_open else value <= high
        if not inside:
            option = max(param.opts, key=len)
            raise PolluxError(f"{option} must be {accepted}, got {_fmt(value)}")  # one line, exit 2: OneLineErrors
        return value

    return check
