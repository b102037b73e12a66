"""`dynpar train` and `dynpar profile`: torch jobs (need the torch extra).

    dynpar profile MODULE:FACTORY --kind NAME [-o FACTORY.csv] [--batch 32] [--micro-batch 4]
                   [--cpu-quota FRACTION] [--tp-degrees 1,2,4] [--tp-mode group|local]
                   [--accelerator cpu|cuda]

    dynpar train INSTANCE --model MODULE:FACTORY --steps N --checkpoint-dir DIR
                 [--iterations-per-slot 10] [--checkpoint-every K] [--V 1] [--policy ours]
                 [--devices a,b] [--device-map NODE:LOCAL_RANK=DEVICE,...] [--node-name NAME]
                 [--repeat DEVICE=R,...] [--cpu-quota DEVICE=FRACTION,...] [--cpu-pin DEVICE=CORE,...]
                 [--kill-at DEVICE:STEP] [--contention K=RHO,...]
                 [--out DIR] [--engine torch|hand] [--accelerator cpu|cuda]

Spawns one process per device on this machine, or, under torchrun, is one of its ranks
(the device from --device-map and LOCAL_RANK: solver.runtime.binding). Writes slots.csv
and summary.json (like `dynpar run`, plus measured columns) and checkpoints in DIR; the
same command again resumes from the newest checkpoint. Every option is checked (train_config)
before any process starts or any file is written, and so are the factory's model and first
sample (_check_blocks): a bad value is one line naming the flag, exit status 2.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

from ..errors import DynparError
from ..online.policies import POLICY_NAMES
from .argtypes import out_path, parsed, positive_int, tolerance, v_weight
from .output import UsageError, out_dir, out_file


def _torch(command: str) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise DynparError(f"dynpar {command} needs torch: pip install 'dynpar[torch]'") from None


def _pairs(text: str, flag: str) -> dict[str, int]:
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = part.partition("=")
        try:
            out[k.strip()] = int(v)
        except ValueError:
            raise ValueError(f"{flag}: expected DEVICE=INTEGER, got {part!r}") from None
        if not sep or out[k.strip()] < 1:
            raise ValueError(f"{flag}: expected DEVICE=INTEGER >= 1, got {part!r}")
    return out


def _contention(text: str) -> dict[int, float]:
    """--contention K=RHO,...: k (2 or more busy devices on a node) -> rho in (0, 4]."""
    out: dict[int, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = part.partition("=")
        try:
            kk, rho = int(k), float(v)
        except ValueError:
            raise ValueError(f"--contention: expected K=RHO (an integer K >= 2, a rate RHO), got {part!r}") from None
        if not sep or kk < 2 or not 0 < rho <= 4:
            raise ValueError(f"--contention: expected K >= 2 and RHO in (0, 4], got {part!r}")
        out[kk] = rho
    return out


def _fractions(text: str, flag: str) -> dict[str, float]:
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = part.partition("=")
        try:
            out[k.strip()] = float(v)
        except ValueError:
            raise ValueError(f"{flag}: expected DEVICE=FRACTION, got {part!r}") from None
        if not sep or not 0.01 <= out[k.strip()] <= 64:
            raise ValueError(f"{flag}: expected DEVICE=FRACTION with a fraction of a core in [0.01, 64], "
                             f"got {part!r}")
    return out


def _cores(text: str) -> dict[str, int]:
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = part.partition("=")
        if not sep or not v.strip().isdigit():
            raise ValueError(f"--cpu-pin: expected DEVICE=CORE (a core number >= 0), got {part!r}")
        out[k.strip()] = int(v)
    return out


def _kill(text: str | None) -> tuple[str, int] | None:
    if not text:
        return None
    dev, sep, step = text.rpartition(":")
    if not sep or not dev or not step.isdigit():
        raise ValueError(f"--kill-at: expected DEVICE:STEP, got {text!r}")
    return dev, int(step)


def _count(text: str) -> int:
    """--checkpoint-every: an integer >= 0 (argparse type)."""
    return parsed(text, int, lambda v: v >= 0, "an integer >= 0 (0: after re-plans only)")


def _seconds(text: str) -> float:
    """--timeout: finite seconds, at least a millisecond (the collectives' timeout is whole ms)."""
    return parsed(text, float, lambda v: math.isfinite(v) and 0.001 <= v <= 1e9,
                   "a finite number of seconds in [0.001, 1e9]")


def _core_fraction(text: str) -> float:
    """profile --cpu-quota: a fraction of a core in [0.01, 64] (runtime.cpuquota)."""
    return parsed(text, float, lambda v: 0.01 <= v <= 64, "a fraction of a core in [0.01, 64]")


def _kind(text: str) -> str:
    return parsed(text, str.strip, lambda v: v != "" and "," not in v and v.isprintable(),
                  "a device kind name (printable, no comma)")


def _check_model(ref: str) -> None:
    """--model MODULE:FACTORY: MODULE imports here and FACTORY is a callable of it (UsageError
    otherwise). MODULE is looked for in the current folder first, as `python -m` would (the
    `dynpar` script alone would look in its own folder; spawned workers inherit the path). The
    factory is not called here (`_check_blocks` calls it, once every other option has been
    checked)."""
    from ..runtime.spec import SpecError, factory_of
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        factory_of(ref)
    except SpecError as e:
        raise UsageError(str(e)) from None


def _check_blocks(ref: str, inst: Any, accelerator: str = "cpu") -> None:
    """UsageError unless the model and data of `ref`'s factory pass, here, the checks every worker
    would make first: an optimizer that steps with no closure (spec.check_optimizer), the
    runtime's refusals (spec.check_semantics), as many pipeline blocks as the instance's workload
    has layers, data giving batches of the workload's size, and the first samples passing through
    every block to a loss that is the mean of per-sample losses (spec.check_loss; their shape and
    dtype fit the model: forward passes on CPU, on copies in eval mode, under the factory's
    autocast; with --accelerator cuda these are left to the workers, whose factory may build its
    model on the GPU and whose autocast is not CPU's). The factory is called once here, before
    any process starts; under torchrun (train_worker per rank) each rank makes these checks as
    it starts."""
    import torch

    from ..runtime.spec import Batches, SpecError, check_layer_count, check_loss, check_optimizer, check_semantics
    from ..runtime.spec import error_line, input_shapes, listed_blocks, load_factory
    try:
        spec = load_factory(ref)
        check_optimizer(spec.make_optimizer)
        blocks = listed_blocks(spec.model)
        check_semantics(blocks)
        check_layer_count(len(blocks), inst.workload.name, inst.workload.num_layers)
        data = Batches(spec.data, inst.workload.batch)
        if accelerator == "cpu":     # a factory for cuda may build its model on the GPU
            try:
                x = data.example()
            except Exception as e:      # the factory's dataset, failing as a worker's would
                raise SpecError(f"data: reading sample 0 failed: {error_line(e)}") from None
            input_shapes(blocks, x, spec.autocast_context(torch.device("cpu")))
            check_loss(blocks, spec.loss, data, autocast=spec.autocast)
    except SpecError as e:
        raise UsageError(str(e)) from None


def _known(flag: str, given: Any, names: list[str], inst_name: str, text: str) -> None:
    """UsageError naming `flag` and its value unless every device in `given` is in `names`."""
    bad = [n for n in dict.fromkeys(given) if n not in names]
    if bad:
        raise UsageError(f"{flag}: no device {', '.join(map(repr, bad))} in instance {inst_name!r} (devices: "
                         f"{', '.join(names)}), got {text!r}")


def _run_devices(text: str, names: list[str], inst_name: str) -> list[str] | None:
    """--devices a,b: device names of the instance, each once (None: all)."""
    if not text.strip():
        return None
    wanted = [p.strip() for p in text.split(",")]
    if "" in wanted:
        raise UsageError(f"--devices: expected comma-separated device names, got {text!r}")
    _known("--devices", wanted, names, inst_name, text)
    twice = sorted({n for n in wanted if wanted.count(n) > 1})
    if twice:
        raise UsageError(f"--devices: device(s) {', '.join(map(repr, twice))} named twice, got {text!r}")
    return wanted


def _folder(flag: str, path: str | None) -> None:
    """UsageError naming `flag` and `path` unless it is a folder this process can create and
    write in (output.out_dir)."""
    if not path:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{flag}: expected a folder, got {path!r} (a file)")
    out_dir(p, flag)


def train_config(args: argparse.Namespace, inst: Any) -> tuple[Any, list[str] | None]:
    """Every option of `dynpar train` checked against the instance before any process starts or
    any file is written (UsageError, exit status 2, naming the flag and its value); returns the
    job's TrainConfig and the devices named by --devices (None: all)."""
    from ..runtime import cpuquota
    from ..runtime.binding import parse_map
    from ..runtime.spec import SpecError
    from ..runtime.trainer import TrainConfig
    names = [d.name for d in inst.devices]
    if args.accelerator == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise UsageError("--accelerator: expected a machine with a CUDA GPU for 'cuda', got none "
                             "(torch.cuda.is_available() is False); use --accelerator cpu")
    if args.steps < 1:
        raise UsageError(f"--steps: expected an integer >= 1, got {args.steps}")
    per_slot = args.iterations_per_slot if args.iterations_per_slot is not None else inst.iterations_per_slot or 10
    if per_slot < 1:
        raise UsageError(f"--iterations-per-slot: expected an integer >= 1, got {per_slot}")
    if args.steps > inst.num_slots * per_slot:
        raise UsageError(f"--steps: expected <= num_slots * iterations_per_slot = {inst.num_slots} * {per_slot} = "
                         f"{inst.num_slots * per_slot} (instance {inst.name!r}), got {args.steps}")
    _check_model(args.model)
    _folder("--checkpoint-dir", args.checkpoint_dir)
    _folder("--out", args.out)
    devices = _run_devices(args.devices, names, inst.name)
    repeat = _pairs(args.repeat, "--repeat")
    _known("--repeat", repeat, names, inst.name, args.repeat)
    quota, pin = _fractions(args.cpu_quota, "--cpu-quota"), _cores(args.cpu_pin)
    _known("--cpu-quota", quota, names, inst.name, args.cpu_quota)
    _known("--cpu-pin", pin, names, inst.name, args.cpu_pin)
    try:        # a pin without a quota, a core this machine lacks
        cpuquota.check(quota, pin, names)
    except SpecError as e:
        raise UsageError(str(e)) from None
    kill = _kill(args.kill_at)
    if kill is not None:
        _known("--kill-at", [kill[0]], names, inst.name, args.kill_at)
        if kill[1] >= args.steps:
            raise UsageError(f"--kill-at: expected DEVICE:STEP with STEP < --steps {args.steps} (else the drill "
                             f"never fires), got {args.kill_at!r}")
    try:
        dmap = parse_map(args.device_map)
    except SpecError as e:
        raise UsageError(str(e)) from None
    _known("--device-map", dmap.values(), names, inst.name, args.device_map)
    cfg = TrainConfig(args.model, args.steps, args.checkpoint_dir, per_slot, args.checkpoint_every, args.V,
                      args.policy, args.out, repeat, kill, args.timeout, args.engine, accelerator=args.accelerator,
                      cpu_quota=quota, cpu_pin=pin, contention=_contention(args.contention),
                      budget_tolerance=args.budget_tolerance)
    return cfg, devices


def _resumes_at(cfg: Any, inst: Any) -> int | None:
    """The step of the newest checkpoint this job would resume from (None: none, it starts at
    0); a checkpoint of another job is a UsageError naming what differs."""
    from ..runtime import ckpt
    from ..runtime.spec import SpecError
    try:
        found = ckpt.latest(cfg.checkpoint_dir)
    except FileNotFoundError as e:
        raise UsageError(f"--checkpoint-dir: {e}") from None
    if found is None:
        return None
    meta = ckpt.read_meta(found)
    try:
        ckpt.same_job(found, meta, cfg.identity(inst))
    except SpecError as e:
        raise UsageError(f"--checkpoint-dir: {e}") from None
    return int(meta["step"])


def _train_on(done: int, per_slot: int, inst: Any, path: str) -> str:
    """What trains on from a checkpoint at step `done`: a larger --steps while the instance has
    slots left (--steps <= num_slots * iterations_per_slot), else more slots in the instance
    file (--iterations-per-slot and the instance's name are the job's identity: ckpt.same_job)."""
    most = inst.num_slots * per_slot
    if done < most:
        return f"a larger --steps, up to num_slots * iterations_per_slot = {most}, trains on from it"
    return (f"every slot of instance {inst.name!r} is trained, {inst.num_slots} x {per_slot} iterations: to train on, "
            f"raise num_slots in {path} (same name, traces covering the new slots) and --steps with it")


def cmd_train(args: argparse.Namespace) -> int:
    _torch("train")
    from ..io.instance import load_instance
    inst = load_instance(args.instance)
    cfg, devices = train_config(args, inst)      # nothing started or written before this
    if args.iterations_per_slot is not None and inst.iterations_per_slot not in (None, cfg.iterations_per_slot):
        print(f"note: --iterations-per-slot {cfg.iterations_per_slot} replaces the instance's [train] "
              f"iterations_per_slot = {inst.iterations_per_slot}", file=sys.stderr)
    out = Path(args.out or args.checkpoint_dir)
    done = _resumes_at(cfg, inst)
    if done is not None and done >= cfg.steps:
        print(f"nothing to train: the newest checkpoint in {args.checkpoint_dir} is at step {done}, and --steps is "
              f"{cfg.steps} ({_train_on(done, cfg.iterations_per_slot, inst, args.instance)}); "
              f"{out / 'slots.csv'} and {out / 'summary.json'} are unchanged")
        return 0
    if done is not None and os.environ.get("RANK", "0") == "0":   # under torchrun: rank 0 says it
        print(f"resuming at step {done} of {cfg.steps} from the newest checkpoint in {args.checkpoint_dir}",
              flush=True)
    from ..runtime.trainer import budget_note
    note = budget_note(inst, cfg)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        from ..runtime.binding import from_env
        from ..runtime.trainer import train_worker
        me = from_env(inst, args.device_map, args.node)
        if note and int(os.environ["RANK"]) == 0:
            print(f"note: {note}", file=sys.stderr, flush=True)
        try:
            train_worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://", inst, cfg, me)
        except DynparError:
            raise
        except Exception as e:      # one line per rank, as spawned runs give; the traceback to a file
            return _rank_failed(int(os.environ["RANK"]), e, Path(args.checkpoint_dir))
        if int(os.environ["RANK"]) == 0:
            print(f"wrote {out / 'slots.csv'}, {out / 'summary.json'}; checkpoints in {args.checkpoint_dir}")
        return 0
    from ..runtime.launch import launch
    _check_blocks(cfg.model, inst, cfg.accelerator)
    if note:
        print(f"note: {note}", file=sys.stderr, flush=True)
    ran = launch(inst, cfg, devices)
    print(f"trained {args.steps} iterations on {', '.join(ran)}; wrote {out / 'slots.csv'}, "
          f"{out / 'summary.json'}; checkpoints in {args.checkpoint_dir}")
    return 0


def _rank_failed(rank: int, e: Exception, folder: Path) -> int:
    """A torchrun rank's failure in one line on stderr (exit 1), its traceback in
    folder/rank-<rank>.trace: a collective's error on a rank whose peer failed or was killed
    (launch.peer_closed) is said to be that, not the cause."""
    import traceback

    from ..runtime.launch import peer_closed
    from ..runtime.spec import error_line
    why = error_line(e)[:600]
    trace = folder / f"rank-{rank}.trace"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        trace.write_text(traceback.format_exc())
        where = f"; traceback in {trace}"
    except OSError:
        where = ""
    if peer_closed(why):
        print(f"dynpar: error: rank {rank}: a peer's connection closed ({type(e).__name__}): another rank failed "
              f"or was killed, and its own line says why; torchrun restarts the job where --max-restarts allows, "
              f"and the same command resumes from the newest checkpoint{where}", file=sys.stderr)
    else:
        print(f"dynpar: error: rank {rank}: {why}{where}", file=sys.stderr)
    return 1


def _degrees(text: str | None) -> tuple[int, ...]:
    """--tp-degrees 1,2,4: the TP degrees t > 1 to profile (1, the plain table, is always
    measured); ValueError naming the flag and the item unless every item is an integer >= 1."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"--tp-degrees: expected comma-separated integers >= 1, got {part!r}")
        if int(part) > 1 and int(part) not in out:
            out.append(int(part))
    return tuple(sorted(out))


def cmd_profile(args: argparse.Namespace) -> int:
    _torch("profile")
    import torch
    args.model = args.model.strip()
    _check_model(args.model)
    args.tp_degrees = _degrees(args.tp_degrees)
    if args.accelerator == "cuda" and (args.tp_degrees or args.cpu_quota is not None):
        raise ValueError("--accelerator cuda: --tp-degrees and --cpu-quota time CPU processes; profile them "
                         "with --accelerator cpu")
    if args.tp_degrees and args.tp_mode == "group" and args.cpu_quota is not None:
        raise ValueError("--cpu-quota with --tp-mode group: the quota would hold all t processes of the TP group "
                         "(use --tp-mode local, or profile the TP degrees without a quota)")
    if args.batch < 1 or args.micro_batch < 1 or args.batch % args.micro_batch:
        raise ValueError(f"--batch / --micro-batch: expected B a multiple of u >= 1, got {args.batch} / "
                         f"{args.micro_batch}")
    if args.repeats < 1:
        raise ValueError(f"--repeats: expected >= 1, got {args.repeats}")
    out = out_file("--out", Path(args.out or f"{args.model.rpartition(':')[2]}.csv"), "CSV")
    if out.exists() and not args.force:
        raise ValueError(f"--out: {out} exists (use --force to overwrite)")
    torch.set_num_threads(args.threads)
    quota = None
    if args.cpu_quota is not None:
        from ..runtime import cpuquota
        quota = cpuquota.enter("the profiled process", args.cpu_quota)
    try:
        wl = _profile(args, out)
    finally:
        if quota is not None:
            cpuquota.leave(quota)
    f, b = wl.measured[args.kind]
    print(f"{wl.name}: {wl.num_layers} blocks, forward {sum(f) * 1e3:.4g} ms and backward {sum(b) * 1e3:.4g} ms "
          f"per sample, optimizer step {sum(wl.optimizer_seconds[args.kind]) * 1e3:.4g} ms per iteration on kind "
          f"{args.kind!r} (opt_s:{args.kind}: charged with the instance's optimizer_step = \"measured\"), "
          f"{wl.param_bytes.sum():.4g} parameter bytes -> {out}")
    for t, var in wl.tp_variants.items():
        f, b = var.by_micro_batch[args.micro_batch][args.kind]
        print(f"  at TP degree {t} (--tp-mode {args.tp_mode}): a rank's shard computes forward {sum(f) * 1e3:.4g} ms and backward "
              f"{sum(b) * 1e3:.4g} ms per sample (collectives not included: # tp_times: shard_compute), "
              f"{sum(var.param_bytes):.4g} parameter bytes per rank")
    return 0


def _profile(args: argparse.Namespace, out: Path) -> Any:
    """Time the blocks (and their shards at --tp-degrees) and write the layer table; return the workload."""
    from dataclasses import replace

    import torch
    from torch import nn

    from ..io.workloads import write_workload_csv
    from ..runtime.profiler import profile_module
    from ..runtime.tp_profile import profile_tp_group, profile_tp_local
    from ..runtime.seeding import batch_context
    from ..runtime.spec import Batches, blocks_of, check_optimizer, load_factory
    from ..runtime.placement import place
    spec = load_factory(args.model)
    check_optimizer(spec.make_optimizer)
    dev, _ = place(args.accelerator, 0)
    blocks = nn.Sequential(*blocks_of(spec.model)).to(dev)
    x = Batches(spec.data, args.batch).rows(0, 0, args.micro_batch)[0].to(dev)
    with batch_context(0), spec.autocast_context(x.device):
        wl = profile_module(blocks, x, args.kind, args.batch, args.micro_batch, args.repeats,
                            name=args.model.rpartition(":")[2], make_optimizer=spec.make_optimizer,
                            private=False)    # blocks_of's copies
    degrees = tuple(getattr(args, "tp_degrees", ()) or ())
    if degrees:
        variants = {}
        for t in degrees:
            try:
                if args.tp_mode == "group":
                    variants[t] = profile_tp_group(args.model, args.kind, t, args.batch, args.micro_batch,
                                                   args.repeats, args.threads)
                else:
                    with batch_context(0), spec.autocast_context(x.device):
                        variants[t] = profile_tp_local(blocks, x, args.kind, t, args.batch, args.micro_batch,
                                                       args.repeats)
            except ValueError as e:
                raise ValueError(f"--tp-degrees {t}: {e}") from None
        wl = replace(wl, tp_variants=variants)
    quota = f", CPU quota {args.cpu_quota} core" if args.cpu_quota is not None else ""
    how = ("t gloo processes here, each rank's shard timed with its collectives' seconds left out"
           if args.tp_mode == "group" else "shard 0 alone in one process, its collectives skipped")
    tp = (f"; at TP degrees {', '.join(map(str, degrees))} (@tp<t> columns, --tp-mode {args.tp_mode}: {how}; "
          "tp_times shard_compute: the cost model adds the collectives)" if degrees else "")
    where = (f"on {torch.cuda.get_device_name(dev)} ({dev})" if dev.type == "cuda"
             else f"{args.threads} thread(s)")
    write_workload_csv(wl, out, comment=f"dynpar profile {args.model} --kind {args.kind}: seconds per sample "
                                         f"measured at micro-batch {args.micro_batch}, {where}{quota}{tp}")
    return wl


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `train` and `profile` on the dynpar subcommand parser."""
    p = sub.add_parser("profile", help="measure a torch model's blocks on this device -> layer table CSV (torch extra)")
    p.add_argument("model", help="MODULE:FACTORY returning a solver.runtime.TrainSpec")
    p.add_argument("--kind", required=True, type=_kind,
                   help="device kind the seconds belong to (an instance's [[kinds]] or hardware kind)")
    p.add_argument("--batch", type=positive_int, default=32, help="global batch B written into the table (32)")
    p.add_argument("--micro-batch", type=positive_int, default=4, help="micro-batch u: samples per timed pass (4)")
    p.add_argument("--repeats", type=positive_int, default=5, help="timed passes per block, median taken (5)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads while timing (1, as dynpar train)")
    p.add_argument("--cpu-quota", type=_core_fraction, default=None,
                   help="time inside a CPU quota of this fraction of a core, raised weight (runtime.cpuquota)")
    p.add_argument("--tp-degrees", default="",
                   help="also measure one rank's shard at these tensor-parallel degrees, e.g. 1,2,4 (written as "
                        "@tp<t> columns, collectives not included: solver.io.columns)")
    p.add_argument("--tp-mode", choices=("group", "local"), default="group",
                   help="--tp-degrees: group (default): t gloo processes here, each timing its shard, its "
                        "collectives' seconds left out; local: shard 0 alone, collectives skipped "
                        "(runtime.tp_profile)")
    p.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: time on the CPU with --threads; cuda: on GPU 0 (LOCAL_RANK when set), each "
                        "timing between device synchronisations")
    p.add_argument("-o", "--out", type=out_path, default=None, help="output CSV (default FACTORY.csv)")
    p.add_argument("--force", action="store_true", help="overwrite --out")
    p.set_defaults(func=cmd_profile)

    t = sub.add_parser("train", help="train a torch model with the online controller in the loop (torch extra)")
    t.add_argument("instance", help="instance TOML: devices, traces, budgets, the workload's layer table")
    t.add_argument("--model", required=True, help="MODULE:FACTORY returning a solver.runtime.TrainSpec")
    t.add_argument("--steps", type=positive_int, required=True, help="training iterations in all")
    t.add_argument("--checkpoint-dir", type=out_path, required=True, help="checkpoint folder; resumed from when present")
    t.add_argument("--iterations-per-slot", type=positive_int, default=None,
                   help="iterations between controller decisions (default: the instance's [train] "
                        "iterations_per_slot, else 10)")
    t.add_argument("--checkpoint-every", type=_count, default=0,
                   help="iterations between checkpoints, >= 0 (0, the default: after re-plans only)")
    t.add_argument("--V", type=v_weight, default=1.0, help="drift-plus-penalty weight, a finite number >= 0 (1)")
    t.add_argument("--budget-tolerance", type=tolerance, default=0.01, metavar="FRACTION",
                   help="for policy ours on an instance with budgets: keep every budget within (1 + FRACTION) of "
                        "its limit with dynpar run's budget tracker and history price, on the measured costs "
                        "(default 0.01; 'off': the plain queue controller at --V)")
    t.add_argument("--policy", default="ours", choices=POLICY_NAMES, metavar="POLICY",
                   help=f"a `dynpar run` policy: {' | '.join(POLICY_NAMES)} (ours)")
    t.add_argument("--devices", default="", help="comma-separated device names to run (default: all)")
    t.add_argument("--device-map", default="", help="under torchrun: NODE:LOCAL_RANK=DEVICE,... (runtime.binding)")
    t.add_argument("--node-name", "--node", dest="node", default=None,
                   help="this node's name in --device-map (default $DYNPAR_NODE or host name; under torchrun "
                        "only --node-name: torchrun takes --node for an abbreviation of its --node-rank)")
    t.add_argument("--repeat", default="", help="DEVICE=R,...: emulate a slower device by doing its compute R times")
    t.add_argument("--cpu-quota", default="",
                   help="DEVICE=FRACTION,...: the device's process in a cgroup of its own, raised weight; FRACTION "
                        "< 1 a CPU quota of that fraction of a core (runtime.cpuquota)")
    t.add_argument("--cpu-pin", default="", help="DEVICE=CORE,...: run that device's process on that core only "
                   "(devices with --cpu-quota)")
    t.add_argument("--contention", default="",
                   help="K=RHO,...: prior relative CPU-time rate of a device while K of the plan's devices compute "
                        "on its node (runtime.speeds; default 1, learned once a device ran alone and at K)")
    t.add_argument("--kill-at", default=None, help="failure drill DEVICE:STEP: that process kills itself (SIGKILL)")
    t.add_argument("--out", type=out_path, default=None, help="folder of slots.csv and summary.json (default: the checkpoint folder)")
    t.add_argument("--timeout", type=_seconds, default=60.0, help="collective timeout, seconds in [0.001, 1e9] (60)")
    t.add_argument("--engine", choices=("torch", "hand"), default="torch",
                   help="torch (default): multi-stage groups on torch.distributed.pipelining; hand: the hand-written GPipe")
    t.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu",
                   help="cpu (default): gloo, one thread per process; cuda: GPU LOCAL_RANK per process, NCCL (run on one H200 with one process; several GPUs not yet run)")
    t.set_defaults(func=cmd_train)
