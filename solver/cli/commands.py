"""The `dynpar` command line: a thin layer over the library (no logic of its own).

    dynpar run [INSTANCE] [--V V] [--budget-tolerance 0.01] [--pricing {history,queue}] [--policy ours]
               [--out results] [--slots N] [--preemption RESTART_S:CHECKPOINT_EVERY] [--ignore-hazards]
    dynpar solve INSTANCE --slot T [--V 1] [--queues 0,0] [--exact] [--json]
    dynpar compare [INSTANCE] [--V 1] [--policies a,b] [--out results] [--slots N]
    dynpar bench [--quick] [--out DIR]
    dynpar import-profile [--format {pipedream,dapple,sailor,metis}] PATH [--out layers.csv] [--force]
                          [--minibatch N] [--kind KIND] [--precision P] [--activation-bytes B]

Errors print one line on stderr and exit with status 2 (bad input) or 1 (no plan).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..io.data import default_instance
from ..io.pipedream import DEFAULT_KIND
from ..online.policies import POLICY_NAMES
from ..model.workload import PRECISIONS
from ..solve.inputs import QUEUE_MAX
from .argtypes import out_path, parsed, positive_int, time_factor, tolerance, v_weight
from .output import (UNIT_WORDS, UsageError, compare_columns, dumps, out_dir, out_file, plots_skipped,
                     plotting_available, print_slots, progress, slot_columns, summary_keys, table_text, with_units,
                     writable, write_atomic)

if TYPE_CHECKING:
    import pandas as pd

    from ..model.state import Instance

DEFAULT_INSTANCE = default_instance()
"""The packaged default instance (solver/data/instances; the checkout's instances/ links to it)."""


def _load(path: str | None, slots: int | None = None):
    """The instance at `path` (default: the packaged one), cut to its first `slots` slots."""
    from ..io.instance import load_instance
    inst = load_instance(path or DEFAULT_INSTANCE)
    if slots is None:
        return inst
    if not 1 <= slots <= inst.num_slots:
        raise UsageError(f"--slots: must be 1..{inst.num_slots} (instance {inst.name!r} has {inst.num_slots} "
                         f"slots), got {slots}")
    return inst.head(slots)


def _plots_wanted(args: argparse.Namespace) -> bool:
    """--no-plots not given and matplotlib present; says so in one line when it is absent."""
    if args.no_plots:
        return False
    if not plotting_available():
        print(plots_skipped())
        return False
    return True


def _stale(out: Path, names: Sequence[str], written: Sequence[Path]) -> None:
    """Remove the files `names` in `out` that this command writes but did not write this time
    (plots of an earlier run beside new results), saying so in one line."""
    gone = [n for n in names if (out / n).is_file() and out / n not in written]
    for n in gone:
        (out / n).unlink()
    if gone:
        print(f"removed {', '.join(gone)} of an earlier run in {out} (not written this time)")


def _slot_reason(t: int, message: str) -> str:
    message = message or "no reason given"
    return message if message.startswith(f"slot {t}") else f"slot {t}: {message}"


def compile_note() -> None:
    """On stderr, one line when this install has not compiled the solver's kernels yet (the first
    solve then takes about 40 CPU seconds more)."""
    from ..subproblems.dp_kernel import compiled_cached
    if compiled_cached() is False:
        print("note: compiling the cut DP and share kernels (numba, first run of this install: about 40 s; "
              "cached afterwards)", file=sys.stderr, flush=True)


def _count(n: int, noun: str) -> str:
    """'1 device', '2 devices'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _budget_notes(inst: "Instance", tolerance: float, options=None) -> tuple[str, ...]:
    """The pre-flight lines (online.controller.budget_check) of a command whose runs the budget
    tracker does not keep: budgets no plan meets on average within (1 + tolerance) of the limit."""
    from ..online.controller import budget_check
    return budget_check(inst, tolerance, options)[1] if inst.budgets else ()


def cmd_run(args: argparse.Namespace) -> int:
    from ..model import plan_from_json
    from ..online import run_online
    if args.pricing == "history" and args.policy != "ours":
        raise UsageError(f"--pricing history: prices the budgets for policy ours, not {args.policy!r}")
    inst = _load(args.instance, args.slots)
    if args.ignore_hazards and args.preemption is None and inst.preemption is None:
        raise UsageError("--ignore-hazards: the instance declares no [preemption] and --preemption is not given")
    out = out_dir(Path(args.out) / inst.name / args.policy)
    writable(out, ("slots.csv", "summary.json", "run.png", "devices.png", "controller_state.json"))
    v_text = "default rule" if args.V is None else f"{args.V:g}"
    print(f"instance {inst.name}: {_count(inst.n, 'device')}, {_count(inst.num_slots, 'slot')}, workload "
          f"{inst.workload.name} ({inst.workload.num_layers} layers, B={inst.workload.batch}, "
          f"u={inst.workload.micro_batch}), policy {args.policy}, V={v_text}, budget tolerance "
          f"{'off' if args.budget_tolerance is None else f'{100 * args.budget_tolerance:g}%'}"
          + ("" if args.policy == "ours" or args.budget_tolerance is None else " (only ours is tracked)")
          + (f", pricing {args.pricing}" if args.pricing else ""), flush=True)
    for n in inst.notes:
        print(f"note: {n}")
    compile_note()
    from ..solve import SolveOptions
    if args.preemption is not None or inst.preemption is not None:
        pre = args.preemption or inst.preemption
        aware = args.policy == "ours" and not args.ignore_hazards
        print(f"preemption: {pre.restart_s:g} s to restart, a checkpoint every {pre.checkpoint_every} iterations; "
              + ("ours weighs each device's hazard from the trace so far" if aware else "no hazard weighed"))
    saved = out / "controller_state.json"
    if args.resumable and saved.is_file():
        from ..online.checkpoint import ControllerState
        try:
            ControllerState.load(saved)
        except ValueError as e:
            raise UsageError(f"--resumable: {e}") from None

    def resumed(at: int) -> None:
        print(f"resuming from {saved} at slot {at} of {inst.num_slots}" if at < inst.num_slots else
              f"{saved}: the run is complete (every slot ran); its results are written again", flush=True)
    options = SolveOptions(tp_degrees=_tp_degrees(args, inst), classes=args.classes)
    run = run_online(inst, V=args.V, policy=args.policy, replan=not args.no_replan, options=options,
                     state_path=saved if args.resumable else None,
                     progress=progress(f"{inst.name} {args.policy} V={v_text}"),
                     budget_tolerance=args.budget_tolerance, pricing=args.pricing,
                     preemption=args.preemption, availability_aware=not args.ignore_hazards, on_resume=resumed)
    df = run.rows
    # ours runs the pre-flight check itself (tracked or not); the baselines and ablations are checked here
    checked = () if args.policy == "ours" else _budget_notes(inst, 0.0, options)
    for note in (*run.notes, *checked):
        print(f"note: {note}", flush=True)
    if run.V is not None:
        print(f"V in force: {run.V.describe()}")
    elif run.summary["V"] in (0.0, math.inf):
        print(f"V in force: {run.summary['V']:g} (policy {args.policy})")
    planned = df[df["plan_json"] != "null"] if "plan_json" in df.columns else df.iloc[:0]
    if len(planned):
        t = int(planned["slot"].iloc[0])
        print(f"\nplan of slot {t} (device[first layer:end layer] per stage, in pipeline order):")
        text = plan_from_json(planned["plan_json"].iloc[0]).describe(inst.state(t))
        print("\n".join(x for x in text.splitlines() if not (x.startswith("note: ") and x[6:] in inst.notes)))
    units = slot_columns(inst.budgets)
    table = with_units(df, units)
    summary = {**run.summary, "notes": [*run.summary["notes"], *checked]}
    summary = {summary_keys(inst.budgets).get(k, k): v for k, v in summary.items()}
    written = [write_atomic(out / "slots.csv", table.to_csv(index=False)),
               write_atomic(out / "summary.json", dumps(summary) + "\n")]
    cols = ["slot", "plan", "batch_time_s", "migration_time_s", *[units[f"cost_{b.name}"] for b in inst.budgets],
            *[f"queue_{b.name}_after" for b in inst.budgets],
            *[c for b in inst.budgets for c in (f"over_{b.name}_pct", f"bound_{b.name}_pct")], "V",
            "solve_time_s", "status"]
    if "preemption_time_s" in table and (table["preemption_time_s"] > 0).any():
        cols.insert(cols.index("migration_time_s") + 1, "preemption_time_s")
    print()
    print_slots(table, cols, out / "slots.csv")
    print("\nsummary (times in s, avg_batch_time_s with each slot's migration spread over its iterations, "
          "avg_plan_time_s the plans' own; money in USD and energy in J per iteration; queues in budgets; "
          "overshoot and bound as fractions of the limit):")
    print(dumps(summary))
    skipped = df[df["plan_json"] == "null"] if "plan_json" in df.columns else df.iloc[:0]
    if len(skipped):
        shown = "; ".join(_slot_reason(int(r.slot), r.message) for r in skipped.head(5).itertuples())
        more = f"; and {len(skipped) - 5} more (status column of slots.csv)" if len(skipped) > 5 else ""
        print(f"\n{len(skipped)} of {len(df)} slot(s) had no feasible plan and were skipped (no cost charged, "
              f"their time and cost columns empty, left out of every average; queues unchanged): {shown}{more}")
    if _plots_wanted(args):
        from .plots import plot_device_map, plot_run
        written += plot_run(df, inst, out) + plot_device_map(df, inst, out)
    _stale(out, ("run.png", "devices.png"), written)
    print("\nwrote " + ", ".join(str(p) for p in written))
    if not len(planned):
        print(f"dynpar: error: {_no_plan_message(skipped, len(df), out)}", file=sys.stderr)
        return 1
    return 0


def _no_plan_message(skipped: pd.DataFrame, total: int, out: Path) -> str:
    """The one line of a run in which no slot had a feasible plan: the first slot's reason, and
    that the results written to `out` hold no plan."""
    why = ""
    if len(skipped):
        first = skipped.iloc[0]
        more = f"; and {len(skipped) - 1} more" if len(skipped) > 1 else ""
        message = first["message"] if isinstance(first["message"], str) else ""     # an empty cell reads as NaN
        why = f" ({_slot_reason(int(first['slot']), message)}{more})"
    return (f"no slot of {total} had a feasible plan{why}; the results in {out} hold no plan, only each "
            "slot's reason (status and message columns of slots.csv)")


def _queues(text: str, inst) -> tuple[float, ...]:
    """--queues: one virtual-queue backlog per budget, in budget order, each in [0, QUEUE_MAX]
    (solve.inputs: larger backlogs overflow the objective)."""
    if not text:
        return (0.0,) * len(inst.budgets)
    cells = [x.strip() for x in text.split(",")]
    try:
        q = tuple(float(x) for x in cells)
    except ValueError:
        raise UsageError(f"--queues: expected comma-separated numbers, got {text!r}") from None
    if len(q) != len(inst.budgets):
        names = ", ".join(b.name for b in inst.budgets)
        raise UsageError(f"--queues: expected {len(inst.budgets)} queue value(s) ({names}), got {len(q)}: {text!r}")
    for b, v, cell in zip(inst.budgets, q, cells):
        if not 0 <= v <= QUEUE_MAX:
            raise UsageError(f"--queues: {b.name}: expected a finite number >= 0 and <= {QUEUE_MAX:g} (a virtual "
                             f"queue's backlog, in budgets), got {cell}")
    return q


def _solve_json(inst, slot: int, V: float, queues: Sequence[float], res) -> dict:
    """The plan (solver.model.plan_to_dict) and its figures, units in the key names."""
    from ..model import plan_to_dict
    ev = res.evaluation
    return {
        "instance": inst.name, "slot": slot, "V": V, "queues": list(queues),
        "status": str(res.status), "message": res.message,
        "plan": plan_to_dict(res.plan) if res.plan is not None else None,
        "batch_time_s": res.batch_time if res.plan is not None else None,
        "costs": {b.name: {"value": c, "unit": UNIT_WORDS[b.kind]} for b, c in zip(inst.budgets, res.costs)}
        if res.plan is not None else None,
        "objective": res.objective if res.plan is not None else None,
        "group_times_s": list(ev.group_times) if ev is not None else None,
        "sync_time_s": ev.sync_time if ev is not None else None,
        "solve_time_s": res.solve_time, "candidates": res.candidates,
        "notes": list(_solve_notes(inst, inst.state(slot), res)),
    }


def _solve_notes(inst, state, res) -> tuple[str, ...]:
    """What a solve's figures rest on: the instance's own notes (what its reader noted: traces
    that replace static figures, fields a measured kind does not use, tables found beside it)
    and the plan's (or, with no plan, the slot's) measurement notes."""
    own = res.plan.notes(state) if res.plan is not None else state.notes
    return tuple(dict.fromkeys(tuple(inst.workload.notes) + tuple(own)))


def _solve_plot(args: argparse.Namespace, inst, state, res) -> Path | None:
    """--plot [PATH]: the slot's pipeline timeline (default results/<instance>/timeline_slot<T>.png);
    with no plan, a line on stderr that none was written."""
    if args.plot is None:
        return None
    if res.plan is None:
        print(f"note: --plot: no plot written: slot {args.slot} has no plan", file=sys.stderr)
        return None
    if not plotting_available():
        print(plots_skipped(), file=sys.stderr)
        return None
    from .plots import plot_timeline
    path = Path(args.plot) if args.plot else Path("results") / inst.name / f"timeline_slot{args.slot}.png"
    return plot_timeline(res.plan, state, path, title=f"{inst.name}, slot {args.slot} ({res.status})")


def cmd_solve(args: argparse.Namespace) -> int:
    from ..solve import SolveOptions, solve_slot
    inst = _load(args.instance)
    if not 0 <= args.slot < inst.num_slots:
        raise UsageError(f"--slot: must be 0..{inst.num_slots - 1} (instance {inst.name!r} has {inst.num_slots} "
                         f"slots), got {args.slot}")
    if args.plot:
        out_file("--plot", Path(args.plot), "PNG")
    state = inst.state(args.slot)
    queues = _queues(args.queues, inst)
    compile_note()
    res = solve_slot(state, queues=queues, V=args.V, options=SolveOptions(exact=args.exact, tp_degrees=_tp_degrees(args, inst),
                                                                         classes=args.classes))
    plot = _solve_plot(args, inst, state, res)
    if plot and args.json:
        print(f"wrote {plot}", file=sys.stderr)
    if args.json:
        print(dumps(_solve_json(inst, args.slot, args.V, queues, res)))
        return 0 if res.plan is not None else 1
    print(f"slot {args.slot} of {inst.name}: status {res.status} ({res.message}); "
          f"{res.candidates} candidates in {res.solve_time * 1e3:.1f} ms")
    for n in _solve_notes(inst, state, res):
        print(f"note: {n}")
    if res.plan is None:
        return 1
    print(res.plan.describe(state, notes=False))      # its notes are among those printed above
    print(f"predicted batch time {res.batch_time:.6g} s"
          + "".join(f", {b.name} {c:.6g} {UNIT_WORDS[b.kind]}" for b, c in zip(inst.budgets, res.costs))
          + f", objective {res.objective:.6g}")
    for gi, (g, t) in enumerate(zip(res.plan.groups, res.evaluation.group_times)):
        print(f"  group {gi}: {g.num_stages} stage(s), share {g.share}, time {t:.6g} s")
    print(f"  gradient sync {res.evaluation.sync_time:.6g} s")
    if plot:
        print(f"wrote {plot}")
    return 0


def _policies(text: str) -> list[str] | None:
    """--policies checked against the known names before anything runs (None: all)."""
    if text is None:
        return None
    names = [p.strip() for p in text.split(",")]
    if "" in names:
        raise UsageError(f"--policies: expected comma-separated policy names, got {text!r}; known: "
                         f"{', '.join(POLICY_NAMES)}")
    bad = [p for p in names if p not in POLICY_NAMES]
    if bad:
        raise UsageError(f"--policies: unknown policy {', '.join(map(repr, bad))}; "
                         f"known: {', '.join(POLICY_NAMES)}")
    twice = sorted({p for p in names if names.count(p) > 1})
    if twice:
        raise UsageError(f"--policies: expected each policy once, got {', '.join(map(repr, twice))} more than once "
                         f"in {text!r}")
    return names


def cmd_compare(args: argparse.Namespace) -> int:
    from ..online.compare import compare_policies
    from ..online.gain import MEET_TOLERANCE_PCT, within_budget_note
    policies = _policies(args.policies)
    inst = _load(args.instance, args.slots)
    out = out_dir(Path(args.out) / inst.name)
    writable(out, ("compare.csv", "compare.png"))
    for note in _budget_notes(inst, MEET_TOLERANCE_PCT / 100):    # once, for every policy
        print(f"note: {note}", flush=True)
    table = compare_policies(inst, V=args.V, policies=policies, progress=lambda label: progress(label))
    shown = with_units(table, compare_columns(inst.budgets))
    print(table_text(shown))
    from .plots.common import policy_label
    print("\n" + within_budget_note(table, label=policy_label))
    written = [write_atomic(out / "compare.csv", shown.to_csv(index=False))]
    if _plots_wanted(args):
        from .plots import plot_compare
        written += plot_compare(table, inst, out)
    _stale(out, ("compare.png",), written)
    print("\nwrote " + ", ".join(str(p) for p in written))
    if (table["infeasible_slots"] >= inst.num_slots).all():
        print(f"dynpar: error: no policy found a feasible plan in any of the {inst.num_slots} slot(s) of "
              f"{inst.name!r} (dynpar run gives each slot's reason)", file=sys.stderr)
        return 1
    return 0


def _checkout() -> Path | None:
    """A checkout of the repository with benchmarks/: the current folder, or the one this
    package was installed from in editable mode; None for an installed wheel."""
    import solver
    for root in (Path.cwd(), Path(solver.__file__).resolve().parent.parent):
        if (root / "benchmarks" / "run_all.py").is_file():
            return root
    return None


def cmd_bench(args: argparse.Namespace) -> int:
    root = _checkout()
    if root is None:
        raise UsageError("bench: the benchmarks are not part of the installed package; run `dynpar bench` from "
                         "the root of a checkout of the repository (it has benchmarks/run_all.py)")
    sys.path.insert(0, str(root))
    from benchmarks.run_all import main as bench_main
    argv = ((["--quick"] if args.quick else []) + (["--out", args.out] if args.out else [])
            + ["--time-limit-factor", repr(args.time_limit_factor)])
    return bench_main(argv)


def cmd_import_profile(args: argparse.Namespace) -> int:
    from ..errors import InstanceError
    from ..io.importers import import_any, write_table
    from ..io.workloads import read_workload_csv
    imp = import_any(args.format, args.path, minibatch=args.minibatch, kind=args.kind, precision=args.precision,
                     activation_bytes=args.activation_bytes)
    wl = imp.workload
    default = args.out is None
    out = out_file("--out", Path(args.out) if not default else Path.cwd() / f"{wl.name or 'profile'}.csv", "CSV")
    if out.exists() and not args.force:
        raise UsageError(f"--out: {out} exists; pass --force to overwrite it, or choose another --out")
    with tempfile.TemporaryDirectory() as folder:   # read back as an instance would, before --out is touched
        tmp = Path(folder) / out.name
        write_table(imp, tmp)
        try:
            read_workload_csv(tmp, wl.micro_batch, wl.micro_batch)
        except InstanceError as e:
            raise InstanceError(f"{args.path}: the imported layer table would not load "
                                f"({str(e).replace(f'{tmp}: ', '').replace(str(tmp), 'the table')}); nothing written") from None
    write_table(imp, out)
    sizes = sorted({(b, t) for _, b, t in imp.variants})
    print(f"{wl.name}: {wl.num_layers} layers, {wl.total_flops:.4g} FLOP per sample, "
          f"{wl.param_bytes.sum():.4g} parameter bytes; measured kinds {', '.join(imp.kinds)} at "
          f"{', '.join(f'mbs {b} tp {t}' for b, t in sizes)} -> {out}"
          + (" (no --out given: named after the profile, in the current folder)" if default else ""))
    for n in imp.notes:
        print(f"note: {n}")
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return f"dynpar {version('dynpar')}"
    except PackageNotFoundError:
        return "dynpar (version unknown: the package is not installed; pip install .)"


def _preemption(text: str):
    """--preemption RESTART_S:CHECKPOINT_EVERY within the ranges of an instance's [preemption]
    (solver.io.ranges RESTART_S, ITERATIONS)."""
    from ..io.ranges import ITERATIONS, RESTART_S
    from ..model.preemption import Preemption
    expected = (f"RESTART_S:CHECKPOINT_EVERY, seconds >= {RESTART_S.lo:g} and <= {RESTART_S.hi:g} and an integer "
                f">= {ITERATIONS.lo:g} and <= {ITERATIONS.hi:g} (e.g. 120:50)")
    parts = text.split(":")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    restart = parsed(parts[0], float, lambda v: RESTART_S.problem(v) is None, f"{expected}; restart seconds")
    every = parsed(parts[1], int, lambda v: ITERATIONS.problem(v) is None, f"{expected}; checkpoint interval")
    return Preemption(restart, every)


def _precision(text: str) -> str:
    """--precision: one of model.workload.PRECISIONS."""
    return parsed(text, str, lambda v: v in PRECISIONS, f"one of {', '.join(sorted(PRECISIONS))}")


def _degrees(text: str) -> tuple[int, ...]:
    """--tp-degrees: comma-separated integers >= 1."""
    try:
        out = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1 (e.g. 1,2,4), got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1 (e.g. 1,2,4), got {text!r}")
    return out


CLASSES_HELP = ("both (default): a slot of 16 or more devices in at most 4 classes of 4 or more interchangeable "
                "devices is also searched over uniform dp x pp x tp shapes per class (solver.solve.classes), the "
                "better plan kept; auto: that search alone there (3.5-8.4x faster in median, sometimes worse plans); off: "
                "device by device only")


def _tp_degrees(args: argparse.Namespace, inst: "Instance") -> tuple[int, ...]:
    """The --tp-degrees given (SolveOptions' default when not), with a note when they were given
    for an instance that declares no servers: TP is searched within servers only."""
    from ..solve import SolveOptions
    if args.tp_degrees is None:
        return SolveOptions().tp_degrees
    if inst.network is None and max(args.tp_degrees) > 1:
        print(f"note: --tp-degrees {','.join(map(str, args.tp_degrees))}: instance {inst.name!r} declares no "
              f"[[servers]], and tensor parallelism is searched only within a server: no stage is "
              f"tensor-parallel", file=sys.stderr)
    return args.tp_degrees


TP_HELP = ("tensor-parallel degrees a stage may have besides 1 (always searched), comma-separated (default "
           "1,2,4,8; used where the instance declares servers; 1: no tensor parallelism)")


NEGATIVE = re.compile(r"^-\.?\d")
"""A value such as -1, -1,0 or -.5: no option of dynpar starts so."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line: `dynpar: error: ...`, exit status 2; a negative value
    after an option that takes one (`--queues -1,0`) is that option's value, as `--queues=-1,0`,
    so that the option's own check names it (argparse alone takes only plain numbers such as
    -1 for values, and says `expected one argument` for the rest)."""

    def __init__(self, *args, **kwargs) -> None:
        self.options: set[str] = set()
        self.one_value: set[str] = set()
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.options.update(action.option_strings)
        if action.option_strings and action.nargs is None:
            self.one_value.update(action.option_strings)
        return action

    def takes_one_value(self, arg: str) -> bool:
        """`arg` names a one-value option, whole or as the unique prefix argparse accepts."""
        if arg in self.options:
            return arg in self.one_value
        named = [o for o in self.options if arg.startswith("--") and o.startswith(arg)] if self.allow_abbrev else []
        return len(named) == 1 and named[0] in self.one_value

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        return super().parse_known_args(self.joined(sys.argv[1:] if args is None else list(args)), namespace)

    def joined(self, args: list[str]) -> list[str]:
        """`args` with each one-value option and a negative value after it as one argument."""
        out: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--":
                return out + args[i:]
            if i + 1 < len(args) and NEGATIVE.match(args[i + 1]) and self.takes_one_value(a):
                out.append(f"{a}={args[i + 1]}" if a.startswith("--") else a + args[i + 1])
                i += 2
                continue
            out.append(a)
            i += 1
        return out

    def error(self, message: str):
        self.exit(2, f"dynpar: error: {self.prog}: {message}\n")


V_HELP = ("drift-plus-penalty weight: seconds of batch time against budgets' worth of cost, >= 0 "
          "(larger = faster, less budget care)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="dynpar", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="online controller over an instance; per-slot table, CSV/JSON, plots")
    r.add_argument("instance", nargs="?", help="instance TOML (default: the packaged default instance)")
    r.add_argument("--V", type=v_weight, default=None, help=V_HELP + "; default: the scale-free rule "
                   "V = tolerance x slots / fastest batch time (docs/BUDGETS.md)")
    r.add_argument("--budget-tolerance", type=tolerance, default=0.01, metavar="FRACTION",
                   help="keep every budget within (1 + FRACTION) of its limit over the run (default 0.01 = 1%%; "
                        "0: within the limit, and the default V rule then gives V = 0, the cheapest plans, "
                        "unless --V is given (a note says so); 'off': the plain drift-plus-penalty controller)")
    r.add_argument("--pricing", choices=("history", "queue"), default=None,
                   help="how ours prices the budgets: history (the offline LP's price over the slots seen so "
                        "far) or queue (the virtual queues, the article's controller); default: history with "
                        "the budget tracker, queue with --budget-tolerance off (docs/BUDGETS.md)")
    r.add_argument("--policy", default="ours", choices=POLICY_NAMES, metavar="POLICY",
                   help=f"{' | '.join(POLICY_NAMES)} (default ours)")
    r.add_argument("--out", type=out_path, default="results", help="output folder; files go to OUT/<instance>/<policy>/ "
                                                    "(default results)")
    r.add_argument("--slots", type=int, help="only the first SLOTS slots, 1..the instance's slot count "
                                             "(default all)")
    r.add_argument("--no-replan", action="store_true", help="ignore re-planning cost (the article's setting)")
    r.add_argument("--preemption", type=_preemption, default=None, metavar="RESTART_S:CHECKPOINT_EVERY",
                   help="charge each slot after a device of the plan was preempted the restart seconds and the "
                        "iterations since the last checkpoint (default: the instance's [preemption], if any); "
                        "ours weighs per-device hazards learnt from the trace so far (docs/BUDGETS.md)")
    r.add_argument("--ignore-hazards", action="store_true",
                   help="with a preemption cost, plan without the hazards (losses are still charged)")
    r.add_argument("--resumable", action="store_true",
                   help="save the controller state to controller_state.json after each slot; resume from it "
                        "when present")
    r.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    r.add_argument("--tp-degrees", type=_degrees, default=None, metavar="T,...", help=TP_HELP)
    r.add_argument("--classes", choices=("both", "auto", "off"), default="both", help=CLASSES_HELP)
    r.set_defaults(func=cmd_run)

    s = sub.add_parser("solve", help="one slot's plan, shown readably (or as JSON)")
    s.add_argument("instance", help="instance TOML (`dynpar run` with no argument names the packaged default)")
    s.add_argument("--slot", type=int, required=True, help="0-based slot index")
    s.add_argument("--V", type=v_weight, default=1.0, help=V_HELP + " (default 1)")
    s.add_argument("--queues", default="", help="comma-separated virtual queue values in budget order, each a "
                                                "backlog >= 0 in budgets (default all 0)")
    s.add_argument("--exact", action="store_true", help="exhaustive oracle (n <= 6 available devices)")
    s.add_argument("--tp-degrees", type=_degrees, default=None, metavar="T,...", help=TP_HELP)
    s.add_argument("--classes", choices=("both", "auto", "off"), default="both", help=CLASSES_HELP)
    s.add_argument("--json", action="store_true", help="print the plan and its figures as JSON")
    s.add_argument("--plot", nargs="?", const="", default=None, metavar="PATH",
                   help="write the slot's pipeline timeline PNG (event simulator) to PATH "
                        "(default results/<instance>/timeline_slot<T>.png)")
    s.set_defaults(func=cmd_solve)

    c = sub.add_parser("compare", help="every policy side by side (table + plot)")
    c.add_argument("instance", nargs="?", help="instance TOML (default: the packaged default instance)")
    c.add_argument("--V", type=v_weight, default=1.0, help=V_HELP + " (default 1)")
    c.add_argument("--policies", default=None, help="comma-separated subset of the policies (default all)")
    c.add_argument("--out", type=out_path, default="results", help="output folder; files go to OUT/<instance>/ (default results)")
    c.add_argument("--slots", type=int, help="only the first SLOTS slots, 1..the instance's slot count (default all)")
    c.add_argument("--no-plots", action="store_true", help="write no PNG plots")
    c.set_defaults(func=cmd_compare)

    b = sub.add_parser("bench", help="benchmark suite (needs a checkout): quality vs oracle, V sweep, "
                                     "online vs offline, scaling")
    b.add_argument("--quick", action="store_true", help="small subset (minutes)")
    b.add_argument("--out", type=out_path, default=None, help="output folder (default results/bench)")
    b.add_argument("--time-limit-factor", type=time_factor, default=1.0, metavar="F",
                   help="multiplies each benchmark module's time limit (3600 s, bench_budgets 4 h; with --quick "
                        "240 s, bench_budgets 900 s); "
                        "0: no limit (default 1)")
    b.set_defaults(func=cmd_bench)

    i = sub.add_parser("import-profile", help="PipeDream, DAPPLE, Sailor or Metis profile -> layer table CSV")
    i.add_argument("path", help="the profile: a graph.txt (pipedream, dapple), a Sailor profiles/<MODEL> folder or "
                                "profile.json (sailor), a folder or file DeviceType.<GPU>_tp<t>_bs<b>.json (metis)")
    i.add_argument("--format", default="pipedream", choices=("pipedream", "dapple", "sailor", "metis"),
                   help="the profile's format (default pipedream; formats: solver.io.importers)")
    i.add_argument("-o", "--out", "--output", dest="out", type=out_path,
                   help="output CSV (default: <profile name>.csv in the current folder)")
    i.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    i.add_argument("--minibatch", type=positive_int, help="pipedream/dapple: the profiled minibatch (default: from "
                   "the graph, the file name's pbs-N or the folder); sailor/metis: the micro-batch size of the plain "
                   "columns (default: the smallest profiled)")
    i.add_argument("--kind", help=f"pipedream/dapple: the kind the profile was measured on (default {DEFAULT_KIND}); "
                                  "sailor/metis: GPU=KIND[,GPU=KIND] to map the profile's GPU names")
    i.add_argument("--precision", type=_precision, help="the profile's precision, recorded in the table (one of "
                   f"{', '.join(sorted(PRECISIONS))})")
    i.add_argument("--activation-bytes", type=float, help="metis: bytes per sample after each layer, where the "
                                                          "profile has no activation_parameters_bytes")
    i.set_defaults(func=cmd_import_profile)

    from .train import add_parsers as add_train_parsers
    add_train_parsers(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from ..errors import DynparError, InstanceError
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, InstanceError) as e:
        print(f"dynpar: error: {e}", file=sys.stderr)
        return 2
    except DynparError as e:        # bad input (the model, a given plan: ValueError kinds) 2, a failed run 1
        print(f"dynpar: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, ValueError) else 1
    except BrokenPipeError:        # stdout closed early (`dynpar ... | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (OSError, ValueError, IndexError) as e:     # a path that cannot be written, a bad value
        print(f"dynpar: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dynpar: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
