"""What the command line shows and writes: progress lines, tables with units, files written
whole, and the note when plots are skipped."""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

import pandas as pd

from ..model import Budget

PLOT_EXTRA = "pip install 'dynpar[plot]'"
MAX_TABLE_ROWS = 40
"""Runs with more slots print a summary of the per-slot table instead, and point to the CSV."""
UNIT_SUFFIX = {"money": "usd", "energy": "j", "device_energy": "j"}
UNIT_WORDS = {"money": "USD per iteration", "energy": "J per iteration", "device_energy": "J per iteration"}


class UsageError(Exception):
    """A command-line argument is wrong (exit status 2); the message names the flag and value."""


# ---------------------------------------------------------------- progress

def progress(label: str, stream: TextIO | None = None, every_s: float = 10.0, every_fraction: float = 0.05,
             clock: Callable[[], float] = time.monotonic) -> Callable[[int, int], None]:
    """A progress(done, total) callback writing to stderr. On a terminal: a bar redrawn in
    place. Elsewhere (a pipe, nohup, CI): one line when `every_s` seconds have passed or
    `every_fraction` of the slots are done since the last line, and one at the end."""
    out = stream or sys.stderr
    tty = out.isatty()
    start = clock()
    last = {"time": start, "done": 0}

    def report(done: int, total: int) -> None:
        now = clock()
        rate = done / max(now - start, 1e-9)
        if tty:
            width = 30
            filled = int(width * done / max(total, 1))
            out.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} slots ({rate:.1f}/s)"
                      + ("\n" if done >= total else ""))
            out.flush()
            return
        step = max(1, math.ceil(every_fraction * total))
        if done >= total or done - last["done"] >= step or now - last["time"] >= every_s:
            pct = 100.0 * done / max(total, 1)
            out.write(f"{label}: {done}/{total} slots ({pct:.0f}%), {now - start:.0f} s, {rate:.2g} slots/s\n")
            out.flush()
            last["time"], last["done"] = now, done

    return report


# ---------------------------------------------------------------- units

def slot_columns(budgets: Sequence[Budget]) -> dict[str, str]:
    """Names of a run's per-slot columns (run_online) -> the same with units, as written to
    slots.csv and printed: seconds `_s`, money `_usd`, energy `_j` (per iteration)."""
    cols = {c: f"{c}_s" for c in ("batch_time", "migration_time", "charged_time", "solve_time", "preemption_time",
                                  "risk_time")}
    cols.update({f"cost_{b.name}": f"cost_{b.name}_{UNIT_SUFFIX[b.kind]}" for b in budgets})
    cols.update({f"{p}_{b.name}": f"{p}_{b.name}_{UNIT_SUFFIX[b.kind]}" for b in budgets for p in ("avg", "cheapest")})
    return cols


def summary_keys(budgets: Sequence[Budget]) -> dict[str, str]:
    """Keys of summarise()'s dict -> the same with units (summary.json and the printed summary)."""
    keys = {k: f"{k}_s" for k in ("avg_batch_time", "avg_plan_time", "avg_migration_time", "avg_solve_time",
                                  "avg_preemption_time")}
    for b in budgets:
        u = UNIT_SUFFIX[b.kind]
        keys[f"avg_cost_{b.name}"] = f"avg_cost_{b.name}_{u}"
        keys[f"limit_{b.name}"] = f"limit_{b.name}_{u}"
        keys[f"avg_cheapest_{b.name}"] = f"avg_cheapest_{b.name}_{u}"
        keys[f"preflight_cheapest_{b.name}"] = f"preflight_cheapest_{b.name}_{u}"
        keys[f"tracked_limit_{b.name}"] = f"tracked_limit_{b.name}_{u}"
        keys[f"overshoot_{b.name}"] = f"overshoot_{b.name}_frac"
        keys[f"bound_{b.name}"] = f"bound_{b.name}_frac"
    return keys


def compare_columns(budgets: Sequence[Budget]) -> dict[str, str]:
    """Columns of compare_policies()'s table -> the same with units (compare.csv and printed)."""
    cols = {}
    for b in budgets:
        u = UNIT_SUFFIX[b.kind]
        cols[f"avg_{b.name}"] = f"avg_{b.name}_{u}"
        cols[f"{b.name}_limit"] = f"{b.name}_limit_{u}"
    return cols


def with_units(df: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    return df.rename(columns={k: v for k, v in names.items() if k in df.columns})


# ---------------------------------------------------------------- printing

def table_text(df: pd.DataFrame) -> str:
    """Every row and column of `df`, floats to 4 significant digits (never cut with `...`)."""
    with pd.option_context("display.width", 250, "display.max_colwidth", None):
        return df.to_string(index=False, float_format="{:.4g}".format)


def print_slots(df: pd.DataFrame, columns: Sequence[str], csv_path: Path, max_rows: int = MAX_TABLE_ROWS) -> None:
    """The per-slot table when it has at most `max_rows` rows; otherwise the range of each
    numeric column and the count of each status, with the path of the full table."""
    view = df[[c for c in columns if c in df.columns]]
    if len(view) <= max_rows:
        print(table_text(view))
        return
    numeric = view.drop(columns=["slot"], errors="ignore").select_dtypes("number")
    stats = pd.DataFrame({"column": numeric.columns,
                          "min": numeric.min().values, "median": numeric.median().values,
                          "mean": numeric.mean().values, "max": numeric.max().values})
    print(f"{len(view)} slots; per-slot table in {csv_path}. Range of each column over the slots:")
    print(table_text(stats))
    if "status" in view.columns:
        counts = view["status"].astype(str).value_counts()
        print("status: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


def clean_json(value: Any) -> Any:
    """`value` with NaN and infinities as None, numpy scalars as Python numbers (valid JSON)."""
    if isinstance(value, dict):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(value: Any) -> str:
    return json.dumps(clean_json(value), indent=2, allow_nan=False)


# ---------------------------------------------------------------- files

def _umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> Path:
    """Write `text` to `path` whole: a temporary file in the same folder, then renamed. The
    file gets the permissions a plain open() would give it (0666 less the umask; mkstemp's
    own are 0600, which left results unreadable to the rest of a team)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


# ---------------------------------------------------------------- output paths

def blocking_file(path: Path) -> Path | None:
    """The first of `path` and its parents that exists but is not a folder, else None."""
    return next((a for a in (path, *path.parents) if a.exists() and not a.is_dir()), None)


def refused(path: Path) -> str | None:
    """Why this process cannot create `path` or write in it, or None: a probe folder is made in
    the nearest of `path` and its parents that exists and removed at once (os.access alone passes
    /proc and read-only mounts for root)."""
    base = next(a for a in (path, *path.parents) if a.exists())
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dynpar-probe-", dir=base))
    except OSError as e:
        return f"{base} refuses new entries ({e.strerror or type(e).__name__})"
    return None


def out_dir(folder: Path, flag: str = "--out") -> Path:
    """`folder`, checked to be a folder this command can create or write in (UsageError naming
    `flag` otherwise); not created here: the first file written makes it, so that a command that
    fails before writing leaves no empty folder behind."""
    blocking = blocking_file(folder)
    if blocking is not None:
        raise UsageError(f"{flag}: cannot create folder {folder}: {blocking} is a file, not a folder")
    why = refused(folder)
    if why is not None:
        raise UsageError(f"{flag}: cannot create or write folder {folder}: {why}")
    return folder


def writable(folder: Path, names: tuple[str, ...]) -> None:
    """UsageError naming --out when one of the files `names` this command writes in `folder` is
    a folder there (checked before any work, so that nothing is half-written)."""
    taken = [n for n in names if (folder / n).is_dir()]
    if taken:
        raise UsageError(f"--out: cannot write {', '.join(str(folder / n) for n in taken)}: a folder of that name "
                         "is in the way")


def out_file(flag: str, path: Path, what: str) -> Path:
    """`path`, a file to write, checked: not a folder, and its folder one this command can create
    or write in (UsageError naming `flag` otherwise; `what`: the kind of file, for the message).
    The folder is not created here: the write makes it."""
    if path.is_dir():
        raise UsageError(f"{flag}: {path} is a folder; give the path of the {what} file to write")
    blocking = blocking_file(path.parent)
    if blocking is not None:
        raise UsageError(f"{flag}: cannot write {path}: {blocking} is a file, not a folder")
    why = refused(path.parent)
    if why is not None:
        raise UsageError(f"{flag}: cannot write {path}: {why}")
    return path


# ---------------------------------------------------------------- plots

def plotting_available() -> bool:
    """True when matplotlib imports (the `plot` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plots_skipped() -> str:
    return f"plots skipped: matplotlib is not installed (install it with {PLOT_EXTRA})"
