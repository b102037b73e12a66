"""Fingerprint of the per-slot solver's answers, to show that a refactor changes nothing.

    python benchmarks/fingerprint.py [--out FILE] [--against FILE] [--search-only]

Solves a fixed set of seeded slots (random states of several sizes, memory levels and queues,
and the first slots of a few shipped instances, each re-planned from the previous slot's plan)
with solve_slot, and with solve_exact where n <= 5, and prints one SHA-256 over every
(plan, objective to 12 significant digits). --out writes the per-slot lines (JSON) so that
--against can name the slots whose answer changed. --search-only leaves out the oracle's
answers (its own hash; --against then compares the search lines of FILE alone).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solver.cli.argtypes import DocHelp, guarded  # noqa: E402
from solver import load_instance  # noqa: E402
from solver.io.synthetic import random_state  # noqa: E402
from solver.solve import solve_exact, solve_slot  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
INSTANCES = ("default", "edge", "geo", "mixed_gpus", "hetero_strong")
SLOTS_PER_INSTANCE = 6


def _line(tag: str, res) -> str:
    plan = None if res.plan is None else [[list(g.devices), list(g.cuts), g.share] for g in res.plan.groups]
    return json.dumps([tag, plan, f"{res.objective:.12g}"])


def cases():
    """(tag, state, queues, previous plan or None), deterministic."""
    i = 0
    for n in (2, 3, 4, 5, 8, 12):
        for L in (4, 8, 16):
            for scale, rep in ((s, r) for s in (1.0, 10.0, 30.0) for r in range(2 if n <= 5 else 1)):
                rng = np.random.default_rng(20_000 + i)
                p_av = float(rng.choice([0.7, 1.0]))
                Q = (0.0, 0.0) if i % 2 == 0 else (float(rng.uniform(0, 3)), float(rng.uniform(0, 3)))
                # L = 16 at n = 12 keeps the run short; at most two memory levels there
                if not (n >= 8 and L == 16 and scale == 30.0):
                    yield f"rand-n{n}-L{L}-s{scale:g}", random_state(20_000 + i, n=n, L=L, p_available=p_av,
                                                                    scale=scale), Q, None
                i += 1
    for name in INSTANCES:
        inst = load_instance(ROOT / "instances" / f"{name}.toml")
        prev = None
        for t in range(min(SLOTS_PER_INSTANCE, inst.num_slots)):
            state = inst.state(t)
            Q = tuple(0.5 * (k + 1) * t for k in range(len(state.budgets)))
            yield f"{name}-{t}", state, Q, prev
            prev = solve_slot(state, Q, 1.0, previous_plan=prev).plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--out", type=Path, help="write the per-slot lines here (JSON)")
    ap.add_argument("--against", type=Path, help="compare with lines written by --out")
    ap.add_argument("--search-only", action="store_true", help="leave out the oracle's answers")
    args = ap.parse_args(argv)
    lines = []
    for tag, state, Q, prev in cases():
        lines.append(_line(tag + "-search", solve_slot(state, Q, 1.0, previous_plan=prev)))
        if len(state.available_indices) <= 5 and not args.search_only:
            lines.append(_line(tag + "-exact", solve_exact(state, Q, 1.0, previous_plan=prev)))
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    print(f"{len(lines)} answers; fingerprint {digest}")
    if args.out:
        args.out.write_text(json.dumps(lines, indent=0))
    if args.against:
        old = json.loads(args.against.read_text())
        if args.search_only:
            old = [a for a in old if json.loads(a)[0].endswith("-search")]
        changed = [a for a, b in zip(old, lines) if a != b]
        print(f"{len(changed)} of {len(lines)} answers differ from {args.against}"
              + ("" if len(old) == len(lines) else f" (it holds {len(old)})"))
        for a in changed[:20]:
            print("  was", a)
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
