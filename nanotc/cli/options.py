"""Value types of the subcommands' options: argparse reports a bad value with the option's
name (`argument --threads: expected at least 1, got 0`) before any work starts."""

from __future__ import annotations

import argparse
import math


def positive(text: str) -> int:
    """An integer of at least 1."""
    return _at_least(text, 1)


def kernel_name(text: str) -> str:
    """A function's name, with or without the `@` it is written with in programs."""
    return text.removeprefix("@")


def non_negative(text: str) -> int:
    """An integer of at least 0."""
    return _at_least(text, 0)


def seconds(text: str) -> float:
    """A number of seconds of at least 0 (`inf`: no limit; not NaN, which no clock passes)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if math.isnan(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text}")
    return value


def _at_least(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected at least {low}, got {value}")
    return value
