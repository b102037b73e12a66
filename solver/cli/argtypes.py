"""Command-line input checks shared by the subcommands and the benchmark scripts: argparse type
functions (a bad value is argparse's one line `argument --X: expected ..., got '...'`, exit
status 2, before anything runs) and `guarded`, a script's main with the package's input errors
as one line."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Callable

from ..solve.inputs import V_MAX


class DocHelp(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help of a script whose description is its module docstring as written (what it runs,
    what it writes, where) and whose options show their defaults."""


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
    """--V: a finite number >= 0 and <= V_MAX (solve.inputs: larger weights overflow the objective)."""
    return parsed(text, float, lambda v: 0 <= v <= V_MAX, f"a finite number >= 0 and <= {V_MAX:g}")


def out_path(text: str) -> str:
    """--out: a non-empty path (an empty one would silently mean the current folder)."""
    return parsed(text, str, bool, "a file or folder path")


def time_factor(text: str) -> float:
    """--time-limit-factor: a finite number > 0, or 0 for no limit."""
    return parsed(text, float, lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0 (0: no limit)")


def positive_int(text: str) -> int:
    """An integer >= 1."""
    return parsed(text, int, lambda v: v >= 1, "an integer >= 1")


def nonneg_int(text: str) -> int:
    """An integer >= 0."""
    return parsed(text, int, lambda v: v >= 0, "an integer >= 0")


def tolerance(text: str) -> float | None:
    """--budget-tolerance: a fraction in [0, 1), or 'off' / 'none' (None: no budget tracker)."""
    if text.strip().lower() in ("off", "none"):
        return None
    return parsed(text, float, lambda v: 0 <= v < 1, "a fraction in [0, 1) or 'off'")


def guarded(main: Callable[[], int | None]) -> int:
    """main()'s exit status, or 2 after one line `<script>: error: <message>` on stderr when it
    raises the package's input error (solver.errors.DynparError: a missing or bad instance,
    layer table or profile), instead of a traceback."""
    from ..errors import DynparError
    try:
        return int(main() or 0)
    except DynparError as e:
        print(f"{Path(sys.argv[0]).name}: error: {e}", file=sys.stderr)
        return 2
