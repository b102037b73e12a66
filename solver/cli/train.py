"""`dynpar train`: the online controller inside a torch job (needs the torch extra).

    dynpar train INSTANCE --model MODULE:FACTORY --steps N --checkpoint-dir DIR
                 [--iterations-per-slot 10] [--checkpoint-every K] [--V 1] [--policy ours]
                 [--devices a,b] [--device-map NODE:LOCAL_RANK=DEVICE,...] [--node NAME]
                 [--repeat DEVICE=R,...] [--kill-at DEVICE:STEP] [--out DIR] [--engine torch|hand]

Spawns one process per device on this machine, or, under torchrun, is one of its ranks
(the device from --device-map and LOCAL_RANK: solver.runtime.binding). Writes slots.csv
and summary.json (like `dynpar run`, plus measured columns) and checkpoints in DIR; the
same command again resumes from the newest checkpoint.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import DynparError


def _torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise DynparError("dynpar train needs torch: pip install 'dynpar[torch]'") from None


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


def _kill(text: str | None) -> tuple[str, int] | None:
    if not text:
        return None
    dev, sep, step = text.rpartition(":")
    if not sep or not dev or not step.isdigit():
        raise ValueError(f"--kill-at: expected DEVICE:STEP, got {text!r}")
    return dev, int(step)


def cmd_train(args: argparse.Namespace) -> int:
    _torch()
    from ..io.instance import load_instance
    from ..runtime.trainer import TrainConfig
    inst = load_instance(args.instance)
    if args.steps < 1:
        raise ValueError(f"--steps: expected >= 1, got {args.steps}")
    if args.iterations_per_slot < 1:
        raise ValueError(f"--iterations-per-slot: expected >= 1, got {args.iterations_per_slot}")
    cfg = TrainConfig(args.model, args.steps, args.checkpoint_dir, args.iterations_per_slot,
                      args.checkpoint_every, args.V, args.policy, args.out,
                      _pairs(args.repeat, "--repeat"), _kill(args.kill_at), args.timeout, args.engine)
    out = Path(args.out or args.checkpoint_dir)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        from ..runtime.binding import from_env
        from ..runtime.trainer import train_worker
        me = from_env(inst, args.device_map, args.node)
        train_worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://", inst, cfg, me)
        if int(os.environ["RANK"]) == 0:
            print(f"wrote {out / 'slots.csv'}, {out / 'summary.json'}; checkpoints in {args.checkpoint_dir}")
        return 0
    from ..runtime.launch import launch
    ran = launch(inst, cfg, args.devices.split(",") if args.devices else None)
    print(f"trained {args.steps} iterations on {', '.join(ran)}; wrote {out / 'slots.csv'}, "
          f"{out / 'summary.json'}; checkpoints in {args.checkpoint_dir}")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register `train` on the dynpar subcommand parser."""
    t = sub.add_parser("train", help="train a torch model with the online controller in the loop (torch extra)")
    t.add_argument("instance", help="instance TOML: devices, traces, budgets, the workload's layer table")
    t.add_argument("--model", required=True, help="MODULE:FACTORY returning a solver.runtime.TrainSpec")
    t.add_argument("--steps", type=int, required=True, help="training iterations in all")
    t.add_argument("--checkpoint-dir", required=True, help="checkpoint folder; resumed from when present")
    t.add_argument("--iterations-per-slot", type=int, default=10, help="iterations between controller decisions (10)")
    t.add_argument("--checkpoint-every", type=int, default=0, help="iterations between checkpoints (0: after re-plans only)")
    t.add_argument("--V", type=float, default=1.0, help="drift-plus-penalty weight (1)")
    t.add_argument("--policy", default="ours", help="a `dynpar run` policy (ours)")
    t.add_argument("--devices", default="", help="comma-separated device names to run (default: all)")
    t.add_argument("--device-map", default="", help="under torchrun: NODE:LOCAL_RANK=DEVICE,... (runtime.binding)")
    t.add_argument("--node", default=None, help="this node's name in --device-map (default $DYNPAR_NODE or host name)")
    t.add_argument("--repeat", default="", help="DEVICE=R,...: emulate a slower device by doing its compute R times")
    t.add_argument("--kill-at", default=None, help="failure drill DEVICE:STEP: that process kills itself (SIGKILL)")
    t.add_argument("--out", default=None, help="folder of slots.csv and summary.json (default: the checkpoint folder)")
    t.add_argument("--timeout", type=float, default=60.0, help="collective timeout, seconds (60)")
    t.add_argument("--engine", choices=("torch", "hand"), default="torch",
                   help="torch: multi-stage groups on torch.distributed.pipelining; hand: the hand-written GPipe (torch)")
    t.set_defaults(func=cmd_train)
