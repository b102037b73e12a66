"""SolveOptions.pause_gc on and off, side by side in one process (solve.gc_pause).

    python benchmarks/bench_gc.py [--rounds R] [--cases n8-L50 n16-L50 sailor32]

Each slot is solved with the collector paused and not, one right after the other (which goes
first alternates), each time on a fresh copy of the slot; CPU seconds (time.process_time).
Prints per case the median and mean milliseconds of each and the median of the pairs' ratios
(off / on). The collector's passes are rare but long (a full pass walks every object of the
process), so the mean shows them better than the median. Cases: the seeded random slots of
bench_speed (n = 8 and 16, L = 50) and Sailor's 32-GPU GPT-Neo-2.7 cluster with the
class-level search (`sailor32`, needs ../shared/data; skipped with a message without it).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.bench_sailor_cluster as sailor  # noqa: E402
from solver.cli.argtypes import DocHelp, guarded, positive_int  # noqa: E402
from solver import SolveOptions, load_instance, solve_slot  # noqa: E402
from solver.io.synthetic import random_state  # noqa: E402


def slots(case: str):
    """(fresh-state makers, SolveOptions fields) of a case, or None when its data is absent."""
    if case == "sailor32":
        if not sailor.DATA.is_dir():
            return None

        def make():
            with tempfile.TemporaryDirectory() as tmp:
                return load_instance(sailor.toml(Path(tmp), 2048, 1, "GPT-Neo-2.7", kinds=("A100-40", "V100-16"),
                                                 nodes=4)).state(0)
        return [make] * 4, {"classes": "auto"}
    n, L = (int(x[1:]) for x in case.split("-"))
    seed = sum(map(ord, case)) * 1000
    return [lambda r=r: random_state(seed + r, n=n, L=L) for r in range(8)], {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=DocHelp)
    ap.add_argument("--rounds", type=positive_int, default=3)
    ap.add_argument("--cases", nargs="+", default=["n8-L50", "n16-L50", "sailor32"])
    args = ap.parse_args()
    for case in args.cases:
        got = slots(case)
        if got is None:
            print(f"{case}: skipped, needs Sailor's data at {sailor.DATA}")
            continue
        makers, fields = got
        solve_slot(makers[0](), V=1.0, options=SolveOptions(**fields))      # compiled kernels loaded
        ms: dict[bool, list[float]] = {True: [], False: []}
        for rnd in range(args.rounds):
            for i, make in enumerate(makers):
                for on in ((True, False) if (rnd + i) % 2 == 0 else (False, True)):
                    st = make()
                    t0 = time.process_time()
                    solve_slot(st, V=1.0, options=SolveOptions(pause_gc=on, **fields))
                    ms[on].append(1e3 * (time.process_time() - t0))
        ratio = statistics.median(b / a for a, b in zip(ms[True], ms[False]))
        print(f"{case}: paused median {statistics.median(ms[True]):.1f} ms, mean {statistics.mean(ms[True]):.1f}; "
              f"not paused median {statistics.median(ms[False]):.1f} ms, mean {statistics.mean(ms[False]):.1f}; "
              f"median pair ratio (not paused / paused) {ratio:.3f} over {len(ms[True])} pairs", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(guarded(main))
