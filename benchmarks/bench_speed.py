"""Median solve_slot time on the issue-12 cases, side by side with an earlier solver.

    python benchmarks/bench_speed.py [--out OUTDIR] [--quick] [--against COMMIT] [--new COMMIT] [--no-1024] [--only CASES] [--rounds R]
                                     [--clock wall|cpu]

Cases: random slots n = 8, L = 50; n = 16, L = 50; n = 64, L = 200; n = 8 with a 354-layer
imported model (the PipeDream resnet50 profile of instances/pipedream_resnet50_layers.csv,
177 layers, stacked twice); n = 1024, L = 50 (one slot). Half the slots have zero queues,
half positive ones. Each case runs in two serving worker processes, one importing this tree's
solver (or --new COMMIT's) and one importing --against COMMIT's (a `git worktree` of it in a
temporary folder; default: the commit before the compiled cut DP), on the same seeded slots;
each slot is solved by one solver right after the other (which goes first alternates), each
time on a cold copy of the slot (nothing kept from an earlier solve), so the two runs of a pair
meet the same machine speed, which on this shared machine drifts by up to 1.4x over seconds.
Wall seconds per solve_slot call (after an untimed warm-up per worker: imports, HiGHS, numba's
compiled kernels; --clock cpu: CPU seconds of the worker process instead, which a shared
machine's other work inflates far less). --rounds R makes R such passes over the slots. Prints
per case the medians of each slot's least time, the speedup (the median over every pair of
old / new seconds, with its quartiles: the figure to read), how many answers (plan and
objective to 12 digits) are identical and the least and largest new / old objective ratio over
the slots (below 1: the new plan is better); writes OUTDIR/speed.csv (default
benchmarks/results/).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
OLD_COMMIT = "816dfdf"      # the solver before the compiled cut DP and the one-group shortcut
TARGET_MS = {"n8-L50": 20, "n16-L50": 50, "n64-L200": 300, "n8-resnet50x2-L354": 150, "n1024-L50": 5000}


def case_list(quick: bool, big: bool) -> list[tuple[str, int, int, int]]:
    """(name, n, L, slots): L = 0 marks the imported model."""
    r = 3 if quick else 8
    out = [("n8-L50", 8, 50, r), ("n16-L50", 16, 50, r), ("n64-L200", 64, 200, max(2, r // 2)),
           ("n8-resnet50x2-L354", 8, 0, max(2, r // 2))]
    if big:
        out.append(("n1024-L50", 1024, 50, 1))
    return out


def _states(name: str, n: int, L: int, slots: int):
    """The seeded slots of one case (worker side: imports whichever solver is on sys.path)."""
    from solver import load_instance
    from solver.io.synthetic import random_instance, random_state
    seed = sum(map(ord, name)) * 1000
    if L:
        return [random_state(seed + r, n=n, L=L) for r in range(slots)]
    wl = load_instance(ROOT / "instances" / "pipedream_resnet50.toml").workload
    twice = replace(wl, name=wl.name + "_x2", layers=wl.layers + wl.layers,
                    measured={k: (f + f, b + b) for k, (f, b) in wl.measured.items()})
    inst = replace(random_instance(seed, n=n, L=4, slots=slots), workload=twice)
    return [inst.state(t) for t in range(slots)]


def _fresh(state):
    """A copy of a state with nothing kept on it (its cached properties and memos are dropped, the
    arrays shared): each timed solve starts cold, as on a new slot."""
    return state.__class__(**{f: getattr(state, f) for f in state.__dataclass_fields__})


def serve(spec: dict) -> None:
    """Worker loop: build one case's slots, warm up (untimed: numba loads each kernel on its first
    call, rings of three or more groups included), print "ready", then for each slot index read
    on stdin solve a cold copy of that slot and print [seconds, answer line]."""
    from solver.io.synthetic import random_state
    from solver.solve import solve_slot
    for n in (4, 8):
        solve_slot(random_state(0, n=n, L=8), (1.0, 0.5), 1.0)
    clock = time.process_time if spec.get("clock") == "cpu" else time.perf_counter
    name, n, L, slots = spec["case"]
    states = _states(name, n, L, slots)
    print("ready", flush=True)
    for line in sys.stdin:
        r = int(line)
        state = _fresh(states[r])
        Q = (0.0,) * len(state.budgets) if r % 2 == 0 else tuple([2.0, 0.5, 1.0][:len(state.budgets)])
        t0 = clock()
        res = solve_slot(state, Q, 1.0)
        dt = clock() - t0
        plan = None if res.plan is None else [[list(g.devices), list(g.cuts), g.share] for g in res.plan.groups]
        print(json.dumps([dt, json.dumps([plan, f"{res.objective:.12g}"])]), flush=True)


class _Worker:
    """One serving worker process on a solver tree (module doc)."""

    def __init__(self, tree: Path, case: tuple, clock: str) -> None:
        env = dict(os.environ, BENCH_SPEED_TREE=str(tree))
        self.tree = tree
        self.p = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve",
                                   json.dumps({"case": case, "clock": clock})],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env, cwd=tree)
        self._read("ready")

    def _read(self, what: str) -> str:
        line = self.p.stdout.readline()
        if not line:
            self.p.kill()
            raise SystemExit(f"bench_speed worker in {self.tree} failed ({what}):\n{self.p.stderr.read()[-3000:]}")
        return line.strip()

    def solve(self, r: int) -> tuple[float, str]:
        self.p.stdin.write(f"{r}\n")
        self.p.stdin.flush()
        sec, answer = json.loads(self._read(f"slot {r}"))
        return float(sec), answer

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=60)


def paired(old_tree: Path, new_tree: Path, case: tuple, rounds: int, clock: str
           ) -> tuple[list[tuple[float, str]], list[tuple[float, str]], list[float]]:
    """Both solvers in their own serving process, each slot solved by one right after the other
    (which goes first alternates), `rounds` passes over the slots: per slot the least seconds of
    each with its answer, and every pair's old / new seconds (the two runs of a pair meet the
    same machine speed, which drifts over seconds on a shared machine)."""
    old_w, new_w = _Worker(old_tree, case, clock), _Worker(new_tree, case, clock)
    slots = case[3]
    least: dict[str, list] = {"old": [None] * slots, "new": [None] * slots}
    ratios = []
    try:
        for k in range(max(1, rounds)):
            for r in range(slots):
                got = {}
                for who, w in ((("old", old_w), ("new", new_w)) if (k + r) % 2 == 0 else
                               (("new", new_w), ("old", old_w))):
                    got[who] = w.solve(r)
                    if least[who][r] is None or got[who][0] < least[who][r][0]:
                        least[who][r] = got[who]
                ratios.append(got["old"][0] / max(got["new"][0], 1e-12))
    finally:
        for w in (old_w, new_w):
            w.close()
    return least["old"], least["new"], ratios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", nargs="?", default=None, help="output folder (same as --out)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="output folder")
    ap.add_argument("--quick", action="store_true", help="3 slots per case instead of 8, no n = 1024")
    ap.add_argument("--against", default=OLD_COMMIT, help=f"commit of the earlier solver (default {OLD_COMMIT})")
    ap.add_argument("--new", default=None, help="commit of the new solver (default: this working tree)")
    ap.add_argument("--no-1024", action="store_true", help="leave out the n = 1024 case")
    ap.add_argument("--only", default=None, help="comma-separated case names to run (default: all)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="passes over the slots, each slot solved by both solvers one right after the other; "
                         "each slot's least time is kept, and every pair's ratio")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall seconds (default) or CPU seconds of the worker process (the solver is "
                         "single-threaded; on a loaded machine CPU time is the steadier figure)")
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve(json.loads(args.serve))
        return 0
    cases = case_list(args.quick, not (args.quick or args.no_1024))
    if args.only:
        want = set(args.only.split(","))
        cases = [c for c in case_list(False, True) if c[0] in want]
        if len(cases) != len(want):
            raise SystemExit(f"--only: expected names from {[c[0] for c in case_list(False, True)]}, got {args.only!r}")
    rows, table = [], []
    with tempfile.TemporaryDirectory(prefix="bench_speed_") as tmp:
        old_tree = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old_tree), args.against],
                       check=True, capture_output=True)
        new_tree = ROOT
        if args.new:
            new_tree = Path(tmp) / "new"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(new_tree), args.new],
                           check=True, capture_output=True)
        try:
            for case in cases:
                old, new, pairs = paired(old_tree, new_tree, case, args.rounds, args.clock)
                same = sum(a[1] == b[1] for a, b in zip(old, new))
                for who, res in (("old", old), ("new", new)):
                    for r, (sec, answer) in enumerate(res):
                        rows.append(dict(case=case[0], n=case[1], L=case[2] or 354, rep=r, solver=who, seconds=sec,
                                         objective=float(json.loads(answer)[1])))
                mo, mn = float(np.median([x[0] for x in old])), float(np.median([x[0] for x in new]))
                ratio = [float(json.loads(b[1])[1]) / float(json.loads(a[1])[1]) for a, b in zip(old, new)]
                table.append(dict(case=case[0], slots=len(new), old_ms=1e3 * mo, new_ms=1e3 * mn,
                                  speedup=float(np.median(pairs)), speedup_q1=float(np.percentile(pairs, 25)),
                                  speedup_q3=float(np.percentile(pairs, 75)),
                                  target_ms=TARGET_MS[case[0]], same_answers=f"{same}/{len(new)}",
                                  objective_new_old_min=min(ratio), objective_new_old_max=max(ratio)))
                print(f"{case[0]}: old {1e3 * mo:.1f} ms, new {1e3 * mn:.1f} ms", flush=True)
        finally:
            for tree in {old_tree, new_tree} - {ROOT}:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                               capture_output=True)
    print(f"median {args.clock} ms per solve_slot (least of {max(1, args.rounds)} rounds per slot); old = {args.against}, "
          f"new = {args.new or 'this working tree'}; speedup: the median over every pair of runs (one slot, old right "
          f"after new or new right after old) of old / new seconds, with its quartiles")
    print(pd.DataFrame(table).round(2).to_string(index=False))
    out = Path(args.outdir or args.out)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out / "speed.csv", index=False)
    print(f"wrote {out / 'speed.csv'}")
    return 0


if __name__ == "__main__":
    if os.environ.get("BENCH_SPEED_TREE"):
        sys.path.insert(0, os.environ["BENCH_SPEED_TREE"])
    sys.exit(main())
