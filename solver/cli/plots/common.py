"""What every plot shares: the matplotlib import, policy labels, the straggler threshold."""
from __future__ import annotations

import math
import re
from pathlib import Path

from ...baselines import LABELS

STRAGGLER_FACTOR = 0.8
"""A device straggles in a slot when its speed factor is below this (a fifth slower than its
own sustained speed: the kind of slowdown the Alibaba straggler trace shows)."""

DPI = 110

_LABELS = {
    **LABELS,
    "frozen": "ours, slot-0 plan kept",
    "shares-only": "DAPPLE plan, our shares",
    "cuts-only": "our plan, even shares",
    "v-inf": "ours, budgets ignored",
    "v-zero": "ours, cheapest (V=0)",
}


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend (ImportError when the extra is missing)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def policy_label(policy: str, V: float | None = None) -> str:
    """What a policy is, in words: "even DP", "ours (V=1)", "ours (V=0.1)" for "ours@V=0.1"."""
    if policy.startswith("ours@V="):
        return f"ours (V={policy[len('ours@V='):]})"
    if policy == "ours":
        return "ours" if V is None or not math.isfinite(V) else f"ours (V={V:.3g})"
    return _LABELS.get(policy, policy)


def integer_ticks(ax, axis: str = "x") -> None:
    """Ticks at whole numbers only (slots, stages)."""
    from matplotlib.ticker import MaxNLocator
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def save(fig, path: Path) -> Path:
    """Write `fig` as a PNG at `path` (folders made), close it, return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    pyplot().close(fig)
    return path


def budget_unit(kind: str) -> str:
    """Unit of a budget's cost per iteration: "USD" for money, "J" for (device) energy."""
    return "USD" if kind == "money" else "J"


def instance_label(name: str) -> str:
    """What a synthetic instance is: "random-7" -> "synthetic, seed 7", "hetero-7" ->
    "K80/T4/V100/A100, seed 7" (the benchmarks' heterogeneous mix); other names unchanged."""
    m = re.fullmatch(r"(random|hetero)-(\d+)", str(name))
    if not m:
        return str(name)
    return f"{'synthetic' if m.group(1) == 'random' else 'K80/T4/V100/A100'}, seed {m.group(2)}"
