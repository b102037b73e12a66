"""The price target's margin replayed on recorded frontiers (docs/BUDGETS.md, "The margin").

    python -m benchmarks.bench_margin [--instances a,b] [--random 8] [--orders 8]
                                      [--frontiers DIR] [--out benchmarks/results]

A tracked run's price history holds, per slot, the frontier its searches found (batch time,
cost in budgets' worth; online.pricing.History). This bench records it once per trace
(`run_online(..., replan=False)`, the run the offline comparison uses; kept in --frontiers as
<name>.json and reused when there) and then replays the price-from-history rule on those
points alone, with no search: per slot the target (1 - E_k / R less the margin, at most half
the way down to the history's cheapest use, as online.controller._target), the price LP, the
least objective at the price (ties by the LP's weight), and the budget tracker's rule (the
least objective among the points that keep E_k <= eps H; none: among the points within the
allowance of the budgets the least-total-use point keeps, the least excess over the others,
then the least objective; none either: the priced point is kept, as the tracker keeps the
drift-plus-penalty plan; its investment test is left out). So each
margin rule costs a few LPs per slot, and many traces can be compared: every shipped instance
given and --random fresh i.i.d. random traces (seeds RANDOM_SEED0 + i, 5 devices, 8 layers,
30 slots, budgets calibrated at 0.3 or 0.5), each in its own order, reversed and in --orders
seeded random orders. Per replay: the average batch time, the use of each budget, the LP
relaxation of the offline problem over the same points at the replay's own use (ratio) and at
the limits + eps (ratio_lim). A replay follows the recorded run exactly when the rule is the
one the run used (the recorded plans are the points the rule picks); other rules see only the
points that run's searches found, so the figures compare rules, not the full controller.

Rules: "in force" (pricing.margin: MARGIN / sqrt(n), cost-capped at MARGIN_COST fastest batch
times at the price, fading with (R - 1) / (H - 1)); "sqrt" (MARGIN / sqrt(n) alone, cd76b50's);
"none"; "no fade" (the cost cap alone); "no cost cap" (the fade alone). Writes
budgets_margin.csv (one row per trace, order and rule) and prints the means.

--constant G,...: per use level g also the replay with the price held, in every slot, at the
duals of the LP over the whole trace at use g (whole_trace_price; not an online rule). Such a
choice minimises T + lambda . y in every slot where the tracker does not bind, so by
Lagrangian sufficiency it is the offline optimum at its own use: its ratio measures only the
tracker's binding, and its ratio_lim what the price level costs (docs/BUDGETS.md, "What the
metric at equal use measures").
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from solver.cli.argtypes import DocHelp, guarded, nonneg_int, positive_int  # noqa: E402
from solver import load_instance
from solver.io.synthetic import random_instance
from solver.online import run_online
from solver.online.offline import calibrate_budgets, online_lower_bound
from solver.online.pricing import MARGIN, TIE, History, margin
from solver.subproblems.highs import quiet_highs

TOL = 0.01
RANDOM_SEED0 = 101
RANDOM_SLOTS = 30
ORDER_SEED = 7

Rule = Callable[[int, float, float, float], float]
"""(n slots in the history, the budget's last price s per budget's worth, this slot's fastest
batch time s, the share of the run left to insure (R - 1) / (H - 1)) -> margin, budgets' worth."""

RULES: dict[str, Rule] = {
    "in force": margin,
    "sqrt": lambda n, lam, t, share: MARGIN / np.sqrt(n) if n >= 2 else 0.0,
    "none": lambda n, lam, t, share: 0.0,
    "no fade": lambda n, lam, t, share: margin(n, lam, t, 1.0),
    "no cost cap": lambda n, lam, t, share: MARGIN / np.sqrt(n) * share if n >= 2 else 0.0,
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def record(name: str, frontiers: Path) -> dict:
    """The trace's recorded frontiers: {"name", "H", "K", "slots": [[[T, y_1..y_K], ...], ...]};
    read from `frontiers`/<name>.json when there, else recorded by a tracked run and saved."""
    path = frontiers / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    if name.startswith("random-"):
        seed = int(name.split("-")[1])
        inst = calibrate_budgets(random_instance(seed, n=5, L=8, slots=RANDOM_SLOTS), 0.3 if seed % 2 else 0.5)
    else:
        inst = load_instance(ROOT / "instances" / f"{name}.toml")
    state = frontiers / f"{name}.state.json"
    state.unlink(missing_ok=True)
    t0 = time.perf_counter()
    run_online(inst, replan=False, state_path=state)
    hist = json.loads(state.read_text())["extra"]["history"]
    state.unlink()
    if len(hist["slots"]) != inst.num_slots:
        raise ValueError(f"{name}: the history holds {len(hist['slots'])} slots, the trace {inst.num_slots} "
                         f"(a skipped slot or a run longer than pricing.WINDOW)")
    rec = {"name": name, "H": inst.num_slots, "K": len(inst.budgets), "slots": hist["slots"]}
    path.write_text(json.dumps(rec))
    log(f"  recorded {name}: {inst.num_slots} slots [{time.perf_counter() - t0:.0f} s]")
    return rec


def offline_lp(F: Sequence[np.ndarray], g: Sequence[float]) -> float:
    """The least mean batch time (s) of the LP over the slots' points at mean use <= g per budget."""
    import highspy

    H, K = len(F), F[0].shape[1] - 1
    allp = np.vstack(F)
    N = len(allp)
    slot_of = np.repeat(np.arange(H), [len(f) for f in F])
    h = quiet_highs()
    inf = highspy.kHighsInf
    h.addVars(N, np.zeros(N), np.full(N, inf))
    h.changeColsCost(N, np.arange(N, dtype=np.int32), allp[:, 0] / H)
    for t in range(H):
        idx = np.flatnonzero(slot_of == t).astype(np.int32)
        h.addRow(1.0, 1.0, len(idx), idx, np.ones(len(idx)))
    for k in range(K):
        h.addRow(-inf, float(g[k]), N, np.arange(N, dtype=np.int32), allp[:, 1 + k] / H)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"offline LP: HiGHS model status {h.modelStatusToString(h.getModelStatus())!r}")
    return float(h.getInfo().objective_function_value)


def replay(F: Sequence[np.ndarray], rule: Rule, eps: float = TOL, known: Sequence[np.ndarray] | None = None,
           fixed: Sequence[float] | None = None) -> dict:
    """The price-from-history rule with `rule`'s margin on the points F (module docstring).

    known: given, the price LP of every slot is over these frontiers (the whole trace, in any
    order) with the current slot's points last, instead of over the slots seen so far: a rule
    that knows which slots the trace holds but not in which order (the target and its margin
    still come from the slots seen so far). fixed: given, the price is held at these values
    (seconds per budget's worth) in every slot instead (ties go to the fastest point); the
    tracker's rule is the same."""
    H, K = len(F), F[0].shape[1] - 1
    hist, E = History(), np.zeros(K)
    T, Y, binding = [], [], 0
    for t in range(H):
        hist.add(F[t])
        slots = [np.asarray(s, dtype=float).reshape(-1, K + 1) for s in hist.slots]
        n, R = len(slots), H - t
        low = np.mean([s[:, 1:].min(axis=0) for s in slots], axis=0)
        t_fast = float(slots[-1][:, 0].min())
        lam = list(hist.lam) if len(hist.lam) == K else [0.0] * K
        share = (R - 1) / (H - 1) if H > 1 else 0.0
        g = [1.0 - E[k] / R - min(rule(n, lam[k], t_fast, share), max(0.5 * (1.0 - E[k] / R - low[k]), 0.0))
             for k in range(K)]
        P = np.asarray(hist.slots[-1], dtype=float).reshape(-1, K + 1)
        if fixed is not None:
            lam_t = np.asarray(fixed, dtype=float)
            weights = np.zeros(len(P))
        else:
            if known is not None:
                model = History([np.asarray(f, dtype=float).tolist() for f in known] + [hist.slots[-1]])
                pr = model.price(g)
            else:
                pr = hist.price(g)
            if not pr.ok:
                raise RuntimeError(f"slot {t}: price LP status {pr.status!r}")
            lam_t, weights = np.asarray(pr.lam), np.asarray(pr.last)
        hist.lam = list(lam_t)
        obj = P[:, 0] + P[:, 1:] @ lam_t
        tied = np.flatnonzero(obj <= obj.min() + TIE * abs(obj.min()))
        i = tied[np.argmax(weights[tied])]   # fixed: all weights 0, the first (fastest) of the tied
        if np.any(P[i, 1:] - 1.0 > eps * H - E + 1e-12):
            binding += 1
            within = P[:, 1:] - 1.0 <= eps * H - E + 1e-12
            ok = np.flatnonzero(np.all(within, axis=1))
            if not len(ok):   # none: the budgets the slack point (least total use) keeps are kept, as the tracker does,
                keep = within[np.argmin(P[:, 1:].sum(axis=1))]   # and of those points the least excess over the others
                ok = np.flatnonzero(np.all(within[:, keep], axis=1)) if keep.any() else ok
                if keep.any() and len(ok):
                    over = np.maximum(P[ok, 1:] - 1.0 - (eps * H - E), 0.0).sum(axis=1)
                    ok = ok[over <= over.min() + 1e-12]
            if len(ok):   # still none: the priced point is kept, as the tracker keeps the drift-plus-penalty plan
                i = ok[np.argmin(obj[ok])]
        T.append(P[i, 0])
        Y.append(P[i, 1:])
        E += P[i, 1:] - 1.0
    T, Y = np.asarray(T), np.asarray(Y)
    use = Y.mean(axis=0)
    return {"avg_batch_time_s": float(T.mean()), "worst_use_pct": float(100 * use.max()),
            "ratio": float(T.mean() / offline_lp(F, use)),
            "ratio_lim": float(T.mean() / offline_lp(F, np.full(K, 1.0 + eps))),
            "max_excess_over_H": float((np.cumsum(Y - 1.0, axis=0) / H).max()), "binding_slots": binding}


def whole_trace_price(F: Sequence[np.ndarray], g: float) -> tuple[float, ...]:
    """The duals of the budget rows of the LP over all of F's slots at mean use g per budget
    (seconds per budget's worth): the one price at which each slot's least objective is the
    offline LP's choice at that use (not an online price: it reads the whole trace)."""
    K = F[0].shape[1] - 1
    pr = History([np.asarray(f, dtype=float).tolist() for f in F]).price([g] * K)
    if not pr.ok:
        raise RuntimeError(f"whole-trace price LP status {pr.status!r}")
    return pr.lam


def family_bound(F: Sequence[np.ndarray], t0: int, eps: float = TOL) -> list[dict]:
    """offline.online_lower_bound on the recorded points (budgets' worth, limits 1): the trace
    and the H traces that agree with it up to slot t0 - 1 and then repeat one of its own slots
    s in every later slot (s = 0 .. H - 1), with the tracker's rule after every slot and with
    the tolerance only at the end; beside it, the trace alone under the rule (what the rule
    costs with the whole trace known) and the offline MILP at the limits + eps."""
    H, K = len(F), F[0].shape[1] - 1
    if not (1 <= t0 < H):
        raise ValueError(f"--bound: T0 must be in 1..{H - 1}, got {t0}")
    cands = [[(None, float(p[0]), tuple(float(x) for x in p[1:])) for p in f] for f in F]
    family = [cands] + [cands[:t0] + [cands[s]] * (H - t0) for s in range(H)]
    alone = online_lower_bound([cands], H, [1.0] * K, eps, prefix=True)
    rows = []
    for prefix in (True, False):
        b = online_lower_bound(family, t0, [1.0] * K, eps, prefix=prefix)
        worst = int(np.argmax(np.asarray(b.bound_s) / np.asarray(b.offline))) if b.ok else -1
        rows.append({"shared_slots": t0, "traces": len(family), "rule": "after every slot" if prefix else "at the end",
                     "status": str(b.status), "bound_ratio": b.ratio,
                     "worst_trace": ("the trace" if worst == 0 else f"slots {t0}-{H - 1} repeat slot {worst - 1}")
                     if b.ok else "", "alone_under_rule_ratio": alone.ratio,
                     "offline_milp_at_limits_s": alone.offline[0] if alone.offline else float("nan")})
    return rows


def orders(H: int, count: int, seed: int):
    """(label, slot order): the trace's own, reversed, and `count` seeded random orders."""
    rng = np.random.default_rng(seed)
    yield "own", np.arange(H)
    yield "reversed", np.arange(H)[::-1]
    for j in range(count):
        yield f"random {j}", rng.permutation(H)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--instances", default="default,mixed_gpus,pipedream_resnet50,pipedream_vgg16,geo,"
                    "hetero_strong_bert,hetero_strong,synthetic_64,alibaba_speed")
    ap.add_argument("--random", type=nonneg_int, default=8, help="fresh random traces (seeds RANDOM_SEED0 + i)")
    ap.add_argument("--orders", type=nonneg_int, default=8, help="random slot orders per trace")
    ap.add_argument("--frontiers", default=str(ROOT / "benchmarks" / "results" / "frontiers"))
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--known", action="store_true",
                    help="also replay the first rule with the price LP over the whole trace's frontiers "
                         "(the slots known, their order not): rule '<rule>, distribution known'")
    ap.add_argument("--constant", default="", help="comma-separated use levels g: also replay the price held "
                    "constant at the whole trace's LP price at use g (rule 'constant price at g'; not online)")
    ap.add_argument("--bound", default="", help="comma-separated NAME:T0 pairs: offline.online_lower_bound on the "
                    "recorded points (writes budgets_margin_bound.csv)")
    args = ap.parse_args(argv)
    rules = [r for r in args.rules.split(",") if r]
    bad = [r for r in rules if r not in RULES]
    if bad:
        raise SystemExit(f"--rules: unknown {bad}; known {list(RULES)}")
    if args.random < 0 or args.orders < 0:
        raise SystemExit(f"--random and --orders must be >= 0, got {args.random}, {args.orders}")
    fr = Path(args.frontiers)
    fr.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.instances.split(",") if n and n != "-"] + [f"random-{RANDOM_SEED0 + i}"
                                                                     for i in range(args.random)]
    try:
        levels = [float(x) for x in args.constant.split(",") if x]
    except ValueError:
        raise SystemExit(f"--constant: expected comma-separated use levels, got {args.constant!r}") from None
    if any(not (0 < g) for g in levels):
        raise SystemExit(f"--constant: every use level must be > 0, got {levels}")
    rows = []
    for name in names:
        rec = record(name, fr)
        K = rec["K"]
        F = [np.asarray(s, dtype=float).reshape(-1, K + 1) for s in rec["slots"]]
        prices = {g: whole_trace_price(F, g) for g in levels}
        for label, order in orders(rec["H"], args.orders, ORDER_SEED + sum(map(ord, name))):
            Fo = [F[i] for i in order]
            for rule in rules:
                rows.append({"trace": name, "order": label, "rule": rule, **replay(Fo, RULES[rule])})
            if args.known:
                rows.append({"trace": name, "order": label, "rule": f"{rules[0]}, distribution known",
                             **replay(Fo, RULES[rules[0]], known=F)})
            for g in levels:
                rows.append({"trace": name, "order": label, "rule": f"constant price at {g:g}",
                             **replay(Fo, RULES[rules[0]], fixed=prices[g])})
        shown = (rules + ([f"{rules[0]}, distribution known"] if args.known else [])
                 + [f"constant price at {g:g}" for g in levels])
        log(f"  {name}: " + ", ".join(f"{r} {np.mean([x['ratio'] for x in rows if x['trace'] == name and x['rule'] == r]):.4f}"
                                      for r in shown))
    bounds = []
    for pair in filter(None, args.bound.split(",")):
        name, _, t0 = pair.partition(":")
        if not t0.isdigit():
            raise SystemExit(f"--bound: expected NAME:T0 with T0 a slot number, got {pair!r}")
        rec = record(name, fr)
        F = [np.asarray(sl, dtype=float).reshape(-1, rec["K"] + 1) for sl in rec["slots"]]
        t1 = time.perf_counter()
        for r in family_bound(F, int(t0)):
            bounds.append({"trace": name, "slots": rec["H"], **r})
            log(f"  bound {name} shared 0..{int(t0) - 1}, rule {r['rule']}: {r['bound_ratio']:.4f} ({r['status']}, "
                f"{r['worst_trace']}); alone under the rule {r['alone_under_rule_ratio']:.4f} "
                f"[{time.perf_counter() - t1:.0f} s]")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if bounds:
        pd.DataFrame(bounds).to_csv(out / "budgets_margin_bound.csv", index=False)
    if not rows:
        return 0
    df = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "budgets_margin.csv", index=False)
    base = df[df.rule == rules[0]].set_index(["trace", "order"]).avg_batch_time_s
    summary = df.groupby("rule", sort=False).agg(
        replays=("ratio", "size"), ratio_mean=("ratio", "mean"), ratio_p90=("ratio", lambda x: x.quantile(0.9)),
        ratio_max=("ratio", "max"), ratio_lim_mean=("ratio_lim", "mean"), worst_use_pct=("worst_use_pct", "mean"))
    summary[f"batch_time_vs_{rules[0]}"] = [
        float(np.mean(df[df.rule == r].set_index(["trace", "order"]).avg_batch_time_s / base)) for r in summary.index]
    own = df[df.order == "own"].pivot(index="trace", columns="rule", values="ratio")[list(dict.fromkeys(df.rule))]
    with pd.option_context("display.width", 200, "display.float_format", "{:.4f}".format):
        print(summary.to_string())
        print()
        print("own order, ratio to the offline LP at equal use:")
        print(own.to_string())
        if bounds:
            print()
            print(pd.DataFrame(bounds).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
