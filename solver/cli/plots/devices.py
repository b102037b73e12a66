"""The device map of a run: devices x slots, which group and pipeline stage each device holds
in each slot, and where it was unavailable or straggling."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...model import Instance, plan_from_json
from .common import STRAGGLER_FACTOR, policy_label, pyplot, save

MIN_TEXT_CELL_IN = 0.2     # cells smaller than this (inches) get their stage shaded only, not written


@dataclass(frozen=True)
class DeviceMap:
    """Per device (rows, instance order) and slot (columns, the run's slots in order):
    group / stage: the plan's group index and stage index (0-based, as `dynpar solve` prints
    them) of the device, -1 where it holds nothing; stages: the number of stages of that group
    (0 where not held); unavailable / straggler: from the instance's traces (speed factor below
    STRAGGLER_FACTOR); no_plan: per slot, no plan was run (infeasible slot)."""

    slots: np.ndarray
    group: np.ndarray
    stage: np.ndarray
    stages: np.ndarray
    unavailable: np.ndarray
    straggler: np.ndarray
    no_plan: np.ndarray


def device_map(df: pd.DataFrame, instance: Instance) -> DeviceMap:
    """The DeviceMap of a run's rows (`slot` and `plan_json` columns)."""
    slots = df["slot"].to_numpy(int)
    n, S = instance.n, len(slots)
    group = np.full((n, S), -1)
    stage = np.full((n, S), -1)
    stages = np.zeros((n, S), dtype=int)
    no_plan = np.zeros(S, dtype=bool)
    texts = df["plan_json"] if "plan_json" in df else pd.Series([None] * S)
    for col, text in enumerate(texts):
        plan = plan_from_json(text) if isinstance(text, str) else None
        if plan is None:
            no_plan[col] = True
            continue
        for gi, g in enumerate(plan.groups):
            for j, d in enumerate(g.devices):
                group[d, col], stage[d, col], stages[d, col] = gi, j, g.num_stages
    unavailable = ~np.asarray(instance.available, dtype=bool)[slots].T
    straggler = (np.asarray(instance.speed_factor, dtype=float)[slots].T < STRAGGLER_FACTOR) & ~unavailable
    return DeviceMap(slots, group, stage, stages, unavailable, straggler, no_plan)


def draw_device_map(ax, dm: DeviceMap, names: list[str], write: bool = True) -> dict:
    """Draw `dm` on `ax`: one cell per device and slot, with the stage number written when
    `write`. Returns the artists by role ("held", "unavailable", "straggler") so that callers
    and tests can see what was marked."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle
    plt = pyplot()
    cmap = plt.get_cmap("tab10")
    n, S = dm.group.shape

    def cells(mask):
        return [(d, c) for d, c in zip(*np.nonzero(mask))]

    held = cells(dm.group >= 0)
    colours = []
    for d, c in held:
        rgb = np.array(cmap(dm.group[d, c] % 10)[:3])
        k = max(int(dm.stages[d, c]) - 1, 1)
        fade = 0.55 * dm.stage[d, c] / k          # later stages lighter: shading for the stage number
        colours.append((*(rgb + (1.0 - rgb) * fade), 1.0))
    art = {}
    art["held"] = PatchCollection([Rectangle((c - 0.5, d - 0.5), 1, 1) for d, c in held],
                                  facecolors=colours, edgecolors="white", linewidths=0.5)
    art["unavailable"] = PatchCollection([Rectangle((c - 0.5, d - 0.5), 1, 1) for d, c in cells(dm.unavailable)],
                                         facecolors="0.85", edgecolors="0.55", hatch="xxx", linewidths=0.0)
    art["straggler"] = PatchCollection([Rectangle((c - 0.42, d - 0.42), 0.84, 0.84) for d, c in cells(dm.straggler)],
                                       facecolors="none", edgecolors="red", linewidths=1.8)
    for a in art.values():
        ax.add_collection(a)
    if write:
        for d, c in held:
            ax.text(c, d, str(dm.stage[d, c]), ha="center", va="center", fontsize=7,
                    color="white" if dm.stage[d, c] * 2 < max(dm.stages[d, c] - 1, 1) else "black")
    for c in np.flatnonzero(dm.no_plan):
        ax.axvspan(c - 0.5, c + 0.5, color="red", alpha=0.12, lw=0)
        ax.text(c, -0.6, "no plan", ha="center", va="bottom", fontsize=6, color="red", rotation=90)
    ax.set_xlim(-0.5, S - 0.5)
    ax.set_ylim(n - 0.5, -0.5)
    step = max(1, int(np.ceil(S / 30)))
    ax.set_xticks(range(0, S, step), [str(s) for s in dm.slots[::step]], fontsize=7)
    ystep = max(1, int(np.ceil(n / 40)))
    ax.set_yticks(range(0, n, ystep), names[::ystep], fontsize=7)
    ax.set_xlabel("slot")
    ax.set_ylabel("device")
    return art


def plot_device_map(df: pd.DataFrame, instance: Instance, out: Path) -> list[Path]:
    """OUT/devices.png: the run's device map (colour = group; number and shade = pipeline
    stage, 0 = first; hatched grey = unavailable; red frame = straggling)."""
    from matplotlib.patches import Patch
    plt = pyplot()
    dm = device_map(df, instance)
    n, S = dm.group.shape
    width, height = min(max(6.0, 0.32 * S + 3.0), 22.0), min(max(2.5, 0.3 * n + 1.6), 28.0)
    write = min((width - 3.0) / S, (height - 1.6) / n) >= MIN_TEXT_CELL_IN
    fig, ax = plt.subplots(figsize=(width, height))
    draw_device_map(ax, dm, [f"{d.name} ({d.kind})" for d in instance.devices], write)
    cmap = plt.get_cmap("tab10")
    groups = int(dm.group.max()) + 1

    def same_colour(c: int) -> str:
        ids = list(range(c, groups, 10))
        return ", ".join(map(str, ids)) if len(ids) <= 4 else f"{ids[0]}, {ids[1]}, ... {ids[-1]} (every 10th)"

    handles = [Patch(color=cmap(c), label=f"group {same_colour(c)}") for c in range(min(groups, 10))]
    handles += [Patch(facecolor="0.85", edgecolor="0.55", hatch="xxx", label="unavailable"),
                Patch(facecolor="none", edgecolor="red", lw=1.8, label=f"straggler (speed x < {STRAGGLER_FACTOR:g})"),
                Patch(facecolor="white", edgecolor="0.7", label="available, not held")]
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    policy = str(df["policy"].iloc[0]) if "policy" in df and len(df) else ""
    V = float(df["V"].iloc[0]) if "V" in df and len(df) else None
    ax.set_title(f"{instance.name}, {policy_label(policy, V)}: group (colour) and pipeline stage "
                 f"({'number' if write else 'shade'}, 0 = first) of each device", fontsize=9)
    return [save(fig, Path(out) / "devices.png")]
