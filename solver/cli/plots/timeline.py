"""One slot's pipeline timeline: the event simulator's operations of every group (stages and
links x time: forward, backward, activation and gradient transfers), then the gradient
all-reduce. Bubbles are the gaps, the slow link is the busy link lane, the straggler the
busy stage lane."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


from ...cost.evaluate import evaluate
from ...cost.optimizer import stage_optimizer_seconds
from ...cost.pipeline import stage_times
from ...cost.simulator import simulate
from ...cost.sync import sync_time
from ...model import Plan, SlotState
from ...model.plan import to_units
from .common import STRAGGLER_FACTOR, pyplot, save

COLOURS = {"F": "C0", "B": "C1", "sendF": "#9ecae1", "sendB": "#fdd0a2", "sync": "C4", "optim": "C2"}
NAMES = {"F": "forward", "B": "backward", "sendF": "activations sent", "sendB": "gradients sent",
         "sync": "gradient all-reduce", "optim": "optimizer step"}


@dataclass(frozen=True)
class Bar:
    """One bar: group gi; lane "stage" (index = stage, 0-based) or "link" (index = link from
    stage index to index + 1); kind F | B | sendF | sendB (from the simulator), sync or optim
    (the stage's optimizer step, cost.optimizer); micro_batch (-1 for sync and optim); start and
    end in seconds from the start of the iteration."""

    group: int
    lane: str
    index: int
    kind: str
    micro_batch: int
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """bars: every bar; makespans: simulated seconds per group; sync: all-reduce seconds
    (cost.sync.sync_time, after the slowest group); optimizer: seconds of the optimizer step
    (the slowest stage's, after the sync); batch_time: max makespan + sync + optimizer;
    model_batch_time: the cost model's batch time (cost.evaluate) of the same plan;
    lam: per group, per link, transfer seconds per sample (one way)."""

    bars: tuple[Bar, ...]
    makespans: tuple[float, ...]
    sync: float
    optimizer: float
    batch_time: float
    model_batch_time: float
    lam: tuple[tuple[float, ...], ...]
    schedule: str


def timeline(plan: Plan, state: SlotState, schedule: str = "gpipe") -> Timeline:
    """Simulate every group of `plan` in `state` (per-stage times from cost.pipeline.stage_times)
    and place the all-reduce after the slowest one, then each stage's optimizer step (a plan
    with TP stages on its units, model.units: one bar per stage)."""
    if plan.uses_tp:
        state, plan = to_units(plan, state)
    u = state.workload.micro_batch
    bars: list[Bar] = []
    spans, lams = [], []
    for gi, g in enumerate(plan.groups):
        F, G, lam = stage_times(state, g.devices, g.cuts)
        sim = simulate(F, G, lam, u, g.share, schedule)
        bars += [Bar(gi, "stage" if op.kind in ("F", "B") else "link", op.where, op.kind, op.micro_batch,
                     op.start, op.end) for op in sim.ops]
        spans.append(sim.makespan)
        lams.append(tuple(float(x) for x in lam))
    ts = sync_time(state, [(g.devices, g.cuts) for g in plan.groups])
    top = max(spans)
    if ts > 0:
        bars += [Bar(gi, "stage", j, "sync", -1, top, top + ts)
                 for gi, g in enumerate(plan.groups) for j in range(g.num_stages)]
    opt = 0.0
    for gi, g in enumerate(plan.groups):
        for j, x in enumerate(stage_optimizer_seconds(state, g.devices, g.cuts)):
            if x > 0:
                bars.append(Bar(gi, "stage", j, "optim", -1, top + ts, top + ts + float(x)))
                opt = max(opt, float(x))
    return Timeline(tuple(bars), tuple(spans), ts, opt, top + ts + opt, evaluate(plan, state).batch_time,
                    tuple(lams), schedule)


def _lane_labels(plan: Plan, state: SlotState, tl: Timeline, gi: int, slowest: tuple[int, int] | None):
    """(y, text, is_marked) of each lane of group gi: stages at even y, links at odd y."""
    g = plan.groups[gi]
    out = []
    for j, (d, a, b) in enumerate(g.stages()):
        dev = state.devices[d]
        f = float(state.speed_factor[d])
        slow = f < STRAGGLER_FACTOR
        out.append((2 * j, f"stage {j}: {dev.name} ({dev.kind}), layers {a}-{b - 1}"
                    + (f"\nstraggler, speed x{f:.2g}" if slow else ""), slow))
        if j < g.num_stages - 1:
            bw = float(state.bandwidth[d, g.devices[j + 1]])
            out.append((2 * j + 1, f"link {j}>{j + 1}: {bw / 1e9:.3g} GB/s"
                        + ("\nslowest link" if slowest == (gi, j) else ""), slowest == (gi, j)))
    return out


def plot_timeline(plan: Plan, state: SlotState, path: Path, title: str = "", schedule: str = "gpipe") -> Path:
    """Write the slot's timeline PNG at `path`: one panel per group, a lane per stage and per
    link, x = seconds within one iteration."""
    from matplotlib.patches import Patch
    plt = pyplot()
    tl = timeline(plan, state, schedule)
    u = state.workload.micro_batch
    links = [(gi, j, x) for gi, lam in enumerate(tl.lam) for j, x in enumerate(lam)]
    slowest = max(links, key=lambda r: r[2])[:2] if links else None
    heights = [2 * g.num_stages - 1 for g in plan.groups]
    fig, axes = plt.subplots(len(plan.groups), 1, sharex=True, squeeze=False,
                             figsize=(11, 0.9 + 0.42 * sum(heights) + 0.5 * len(heights)),
                             gridspec_kw={"height_ratios": heights})
    write_min = 0.02 * tl.batch_time
    for gi, ax in enumerate(axes[:, 0]):
        g = plan.groups[gi]
        for bar in (b for b in tl.bars if b.group == gi):
            y = 2 * bar.index + (1 if bar.lane == "link" else 0)
            h = 0.8 if bar.lane == "stage" else 0.5
            ax.barh(y, bar.end - bar.start, left=bar.start, height=h, color=COLOURS[bar.kind],
                    edgecolor="white" if bar.kind != "sync" else COLOURS["sync"], linewidth=0.4,
                    hatch="//" if bar.kind == "sync" else None, alpha=0.6 if bar.kind == "sync" else 1.0)
            if bar.micro_batch >= 0 and bar.end - bar.start >= write_min and bar.lane == "stage":
                ax.text((bar.start + bar.end) / 2, y, str(bar.micro_batch), ha="center", va="center",
                        fontsize=6, color="white")
        ax.axvline(tl.makespans[gi], color="0.3", ls=":", lw=1)
        labels = _lane_labels(plan, state, tl, gi, slowest)
        ax.set_yticks([y for y, _, _ in labels], [t for _, t, _ in labels], fontsize=7)
        for tick, (_, _, marked) in zip(ax.get_yticklabels(), labels):
            if marked:
                tick.set_color("red")
        busy = {j: sum(b.end - b.start for b in tl.bars if b.group == gi and b.lane == "stage"
                       and b.index == j and b.kind in ("F", "B", "optim")) for j in range(g.num_stages)}
        for j, s in busy.items():
            ax.text(1.005, 1 - (2 * j + 0.5) / heights[gi], f"busy {100 * s / tl.batch_time:.0f}%",
                    transform=ax.transAxes, fontsize=7, va="center")
        ax.set_ylim(heights[gi] - 0.4, -0.6)
        n_mb = -(-g.share // u)
        ax.set_title(f"group {gi}: {g.share} samples = {n_mb} micro-batch{'es' if n_mb > 1 else ''} of "
                     f"<= {u} (numbered); group time {tl.makespans[gi]:.4g} s", fontsize=8, loc="left")
    last = axes[-1, 0]
    last.set_xlim(0, tl.batch_time * 1.01)
    last.set_xlabel("time within one iteration (s)")
    for ax in axes[:, 0]:
        ax.axvline(tl.batch_time, color="k", lw=1)
    kinds = [k for k in COLOURS if any(b.kind == k for b in tl.bars)]
    handles = [Patch(facecolor=COLOURS[k], hatch="//" if k == "sync" else None, label=NAMES[k]) for k in kinds]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=7, bbox_to_anchor=(0.5, 0.0),
               frameon=False)
    sched = {"gpipe": "GPipe", "1f1b": "1F1B"}.get(schedule, schedule)
    head = (f"simulated iteration {tl.batch_time:.4g} s = slowest group {max(tl.makespans):.4g} s + all-reduce "
            f"{tl.sync:.4g} s" + (f" + optimizer step {tl.optimizer:.4g} s" if tl.optimizer > 0 else "")
            + f" ({sched}; cost model {tl.model_batch_time:.4g} s); busy = a stage's compute "
            "share of the iteration, gaps = bubbles")
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.4 if title else 0.25) / height))
    fig.suptitle(f"{title}\n{head}" if title else head, fontsize=9, x=0.01, ha="left", va="bottom",
                 y=1 - (0.38 if title else 0.23) / height)
    return save(fig, path)
