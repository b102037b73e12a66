"""argparse type functions shared by the subcommands: a bad value is argparse's one line
`argument --X: expected ..., got '...'` (exit status 2) before anything runs."""
from __future__ import annotations

import argparse
import math
from typing import Any, Callable


def parsed(text: str, cast: Callable[[str], Any], ok: Callable[[Any], bool], expected: str) -> Any:
    """`cast(text)` when `ok` holds for it, else the one-line argparse error 'expected ..., got ...'."""
    try:
        v = cast(text)
    except ValueError:
        v = None
    if v is None or not ok(v):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return v


def v_weight(text: str) -> float:
    """--V: a finite number >= 0."""
    return parsed(text, float, lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0")


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return parsed(text, int, lambda v: v >= 1, "an integer >= 1")
