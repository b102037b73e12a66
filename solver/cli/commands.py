"""The `dynpar` command line: a thin layer over the library (no logic of its own).

    dynpar run [INSTANCE] [--V 10] [--policy ours] [--out results]
    dynpar solve INSTANCE --slot T [--V 10] [--queues 0,0]
    dynpar compare [INSTANCE] [--V 10]
    dynpar bench [--quick]
    dynpar import-profile PATH [-o layers.csv]

Errors print one line on stderr and exit with status 2 (bad input) or 1 (no plan).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

from ..io.data import default_instance

DEFAULT_INSTANCE = default_instance()
"""The packaged default instance (solver/data/instances; the checkout's instances/ links to it)."""


def _progress(label: str):
    """A stderr progress bar callback: progress(done, total)."""
    start = time.perf_counter()
    tty = sys.stderr.isatty()

    def report(done: int, total: int) -> None:
        width = 30
        filled = int(width * done / max(total, 1))
        rate = done / max(time.perf_counter() - start, 1e-9)
        line = f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} slots ({rate:.1f}/s)"
        if tty or done == total:
            sys.stderr.write(line + ("\n" if done == total else ""))
            sys.stderr.flush()

    return report


def _load(path: str | None, slots: int | None = None):
    from ..io.instance import load_instance
    inst = load_instance(path or DEFAULT_INSTANCE)
    return inst.head(slots) if slots else inst


def _print_table(df, columns: Sequence[str] | None = None, max_rows: int = 60) -> None:
    import pandas as pd
    view = df if columns is None else df[[c for c in columns if c in df.columns]]
    with pd.option_context("display.max_rows", max_rows, "display.width", 200,
                           "display.max_columns", 30, "display.float_format", "{:.4g}".format):
        print(view.to_string(index=False) if len(view) <= max_rows else view)


def cmd_run(args: argparse.Namespace) -> int:
    from ..model import plan_from_json
    from ..online import run_online, summarise
    inst = _load(args.instance, args.slots)
    out = Path(args.out) / inst.name / args.policy
    out.mkdir(parents=True, exist_ok=True)
    df = run_online(inst, V=args.V, policy=args.policy, replan=not args.no_replan,
                    state_path=out / "controller_state.json" if args.resumable else None,
                    progress=_progress(f"{inst.name} {args.policy} V={args.V:g}"))
    print(f"instance {inst.name}: {inst.n} devices, {inst.num_slots} slots, workload "
          f"{inst.workload.name} ({inst.workload.num_layers} layers, B={inst.workload.batch}, "
          f"u={inst.workload.micro_batch}), policy {args.policy}, V={args.V:g}")
    planned = df[df["plan_json"].notna()] if "plan_json" in df.columns else df.iloc[:0]
    if len(planned):
        t = int(planned["slot"].iloc[0])
        print(f"\nplan of slot {t} (device[first layer:end layer] per stage, in pipeline order):")
        print(plan_from_json(planned["plan_json"].iloc[0]).describe(inst.state(t)))
    cols = ["slot", "plan", "batch_time", "migration_time", *[c for c in df.columns if c.startswith("cost_")],
            *[c for c in df.columns if c.startswith("queue_") and c.endswith("_after")], "solve_time", "status"]
    print()
    _print_table(df, cols)
    summary = summarise(df, inst)
    print("\nsummary:")
    print(json.dumps(summary, indent=2, default=float))
    df.to_csv(out / "slots.csv", index=False)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    written = [out / "slots.csv", out / "summary.json"]
    if not args.no_plots:
        from .plots import plot_run
        written += plot_run(df, inst, out)
    print("\nwrote " + ", ".join(str(p) for p in written))
    return 0


def cmd_solve(args: argparse.Namespace) -> int:
    from ..solve import SolveOptions, solve_slot
    inst = _load(args.instance)
    state = inst.state(args.slot)
    queues = tuple(float(x) for x in args.queues.split(",")) if args.queues else (0.0,) * len(inst.budgets)
    res = solve_slot(state, queues=queues, V=args.V, options=SolveOptions(exact=args.exact))
    print(f"slot {args.slot} of {inst.name}: status {res.status} ({res.message}); "
          f"{res.candidates} candidates in {res.solve_time * 1e3:.1f} ms")
    if res.plan is None:
        return 1
    print(res.plan.describe(state))
    print(f"predicted batch time {res.batch_time:.6g} s"
          + "".join(f", {b.name} {c:.6g}" for b, c in zip(inst.budgets, res.costs))
          + f", objective {res.objective:.6g}")
    for gi, (g, t) in enumerate(zip(res.plan.groups, res.evaluation.group_times)):
        print(f"  group {gi}: {g.num_stages} stage(s), share {g.share}, time {t:.6g} s")
    print(f"  gradient sync {res.evaluation.sync_time:.6g} s")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from ..online.compare import compare_policies
    inst = _load(args.instance, args.slots)
    out = Path(args.out) / inst.name
    out.mkdir(parents=True, exist_ok=True)
    table = compare_policies(inst, V=args.V, policies=args.policies.split(",") if args.policies else None,
                             progress=lambda label: _progress(label))
    _print_table(table)
    table.to_csv(out / "compare.csv", index=False)
    written = [out / "compare.csv"]
    if not args.no_plots:
        from .plots import plot_compare
        written += plot_compare(table, inst, out)
    print("\nwrote " + ", ".join(str(p) for p in written))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.run_all import main as bench_main
    argv = (["--quick"] if args.quick else []) + (["--out", args.out] if args.out else [])
    return bench_main(argv)


def cmd_import_profile(args: argparse.Namespace) -> int:
    from ..io.pipedream import import_profile
    from ..io.workloads import write_workload_csv
    wl = import_profile(args.path)
    out = Path(args.output or f"{Path(args.path).parent.name or 'profile'}.csv")
    write_workload_csv(wl, out)
    print(f"{wl.name}: {wl.num_layers} layers, {wl.total_flops:.4g} FLOP per sample, "
          f"{wl.param_bytes.sum():.4g} parameter bytes -> {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dynpar", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="online controller over an instance; per-slot table, CSV/JSON, plots")
    r.add_argument("instance", nargs="?", help=f"instance TOML (default: {DEFAULT_INSTANCE.name})")
    r.add_argument("--V", type=float, default=1.0, help="drift-plus-penalty weight: seconds of batch time against budgets' worth of cost (default 1)")
    r.add_argument("--policy", default="ours", help="ours | even-dp | lb-bsp | gpipe | dapple | pipedream | "
                                                    "hetpipe | frozen | shares-only | cuts-only | v-inf | v-zero")
    r.add_argument("--out", default="results", help="output folder (default results/)")
    r.add_argument("--slots", type=int, help="only the first SLOTS slots")
    r.add_argument("--no-replan", action="store_true", help="ignore re-planning cost (the article's setting)")
    r.add_argument("--resumable", action="store_true", help="save controller state each slot; resume if present")
    r.add_argument("--no-plots", action="store_true")
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("solve", help="one slot's plan, shown readably")
    s.add_argument("instance")
    s.add_argument("--slot", type=int, required=True, help="0-based slot index")
    s.add_argument("--V", type=float, default=1.0)
    s.add_argument("--queues", default="", help="comma-separated virtual queue values in budget order")
    s.add_argument("--exact", action="store_true", help="exhaustive oracle (n <= 6 available devices)")
    s.set_defaults(func=cmd_solve)

    c = sub.add_parser("compare", help="every policy side by side (table + plot)")
    c.add_argument("instance", nargs="?")
    c.add_argument("--V", type=float, default=1.0)
    c.add_argument("--policies", default="", help="comma-separated subset (default: all)")
    c.add_argument("--out", default="results")
    c.add_argument("--slots", type=int, help="only the first SLOTS slots")
    c.add_argument("--no-plots", action="store_true")
    c.set_defaults(func=cmd_compare)

    b = sub.add_parser("bench", help="benchmark suite: quality vs oracle, V sweep, online vs offline, scaling")
    b.add_argument("--quick", action="store_true", help="small subset (minutes)")
    b.add_argument("--out", default="", help="output folder (default results/bench)")
    b.set_defaults(func=cmd_bench)

    i = sub.add_parser("import-profile", help="PipeDream graph.txt -> layer table CSV")
    i.add_argument("path")
    i.add_argument("-o", "--output", help="output CSV (default <folder name>.csv)")
    i.set_defaults(func=cmd_import_profile)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from ..errors import DynparError
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except DynparError as e:
        print(f"dynpar: error: {e}", file=sys.stderr)
        return 2 if type(e).__name__ == "InstanceError" else 1
    except (FileNotFoundError, IsADirectoryError, ValueError, IndexError) as e:
        print(f"dynpar: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dynpar: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
