"""`dynpar train` and `dynpar profile` check every option before any worker process starts or
any file is written: a bad value is one line naming the flag and the value, exit status 2.
No test here starts a worker: the launcher and the worker entry are replaced by stubs that
fail the test if reached (or record what they were given)."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from solver.cli import main  # noqa: E402
from tests.test_train import write_instance  # noqa: E402

pytestmark = pytest.mark.torch
MODEL = "solver.runtime.examples:mlp64"


def _rc(argv: list[str]) -> int:
    """main's exit status, argparse's own (SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code)


@pytest.fixture
def no_workers(monkeypatch):
    """launch and train_worker stubbed: a call fails the test (validation must come first)."""
    import solver.runtime.launch as launch_mod
    import solver.runtime.trainer as trainer_mod

    def refuse(*a, **k):
        raise AssertionError("a worker was started before the options were checked")
    monkeypatch.setattr(launch_mod, "launch", refuse)
    monkeypatch.setattr(trainer_mod, "train_worker", refuse)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


@pytest.fixture
def inst(tmp_path: Path) -> Path:
    return write_instance(tmp_path, recorded=True)   # 4 devices p0..p3 of kind cpu, 3 slots


def _train(inst: Path, ck: Path, *extra: str) -> int:
    return _rc(["train", str(inst), "--model", MODEL, "--steps", "8", "--iterations-per-slot", "4",
                "--checkpoint-dir", str(ck), *extra])


BAD_TRAIN = [
    # (extra arguments, the flag named, the value named)
    (["--policy", "foo"], "--policy", "'foo'"),
    (["--V", "-1"], "--V", "'-1'"),
    (["--V", "nan"], "--V", "'nan'"),
    (["--V", "inf"], "--V", "'inf'"),
    (["--timeout", "0"], "--timeout", "'0'"),
    (["--timeout", "-1"], "--timeout", "'-1'"),
    (["--timeout", "nan"], "--timeout", "'nan'"),
    (["--timeout", "inf"], "--timeout", "'inf'"),
    (["--checkpoint-every", "-1"], "--checkpoint-every", "'-1'"),
    (["--checkpoint-every", "x"], "--checkpoint-every", "'x'"),
    (["--steps", "0"], "--steps", "'0'"),
    (["--steps", "13"], "--steps", "13"),                     # > 3 slots * 4 iterations
    (["--iterations-per-slot", "0"], "--iterations-per-slot", "'0'"),
    (["--model", "no_such_module_xyz:f"], "--model", "'no_such_module_xyz:f'"),
    (["--model", "solver.runtime.examples:no_such_factory"], "--model", "no_such_factory"),
    (["--model", "solver.runtime.examples"], "--model", "'solver.runtime.examples'"),
    (["--devices", "p0,p9"], "--devices", "'p0,p9'"),
    (["--devices", "p0,p0"], "--devices", "'p0,p0'"),
    (["--devices", "p0,,p1"], "--devices", "'p0,,p1'"),
    (["--repeat", "p9=2"], "--repeat", "'p9=2'"),
    (["--repeat", "p0=0"], "--repeat", "'p0=0'"),
    (["--cpu-quota", "p0=half"], "--cpu-quota", "'p0=half'"),
    (["--cpu-quota", "p9=1"], "--cpu-quota", "'p9=1'"),
    (["--cpu-quota", "p0=0"], "--cpu-quota", "'p0=0'"),
    (["--cpu-quota", "p0=1", "--cpu-pin", "p0=-1"], "--cpu-pin", "'p0=-1'"),
    (["--cpu-quota", "p0=1", "--cpu-pin", "p1=0"], "--cpu-pin", "['p1']"),
    (["--cpu-quota", "p0=1", "--cpu-pin", "p0=99999"], "--cpu-pin", "99999"),
    (["--contention", "1=2"], "--contention", "'1=2'"),
    (["--contention", "2=x"], "--contention", "'2=x'"),
    (["--kill-at", "p0"], "--kill-at", "'p0'"),
    (["--kill-at", "p9:3"], "--kill-at", "'p9:3'"),
    (["--kill-at", "p0:8"], "--kill-at", "'p0:8'"),            # never fires: --steps 8
    (["--device-map", "0p0"], "--device-map", "'0p0'"),
    (["--device-map", "0=p9"], "--device-map", "'0=p9'"),
    (["--engine", "jax"], "--engine", "'jax'"),
]
try:
    import torch
    if not torch.cuda.is_available():   # on a machine without a GPU, cuda is refused up front too
        BAD_TRAIN.append((["--accelerator", "cuda"], "--accelerator", "'cuda'"))
except ImportError:
    pass


@pytest.mark.parametrize("extra,flag,value", BAD_TRAIN, ids=[" ".join(b[0]) for b in BAD_TRAIN])
def test_train_bad_option_exits_2_before_any_worker_or_file(inst: Path, tmp_path: Path, capsys, no_workers,
                                                             extra: list[str], flag: str, value: str) -> None:
    ck = tmp_path / "ck"
    assert _train(inst, ck, *extra) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dynpar: error: "), err
    assert flag in lines[0] and value in lines[0], err
    assert "gloo" not in err and "Traceback" not in err
    assert not ck.exists()


def test_train_out_and_checkpoint_dir_must_be_folders(inst: Path, tmp_path: Path, capsys, no_workers) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert _train(inst, a_file) == 2
    assert "--checkpoint-dir: expected a folder" in capsys.readouterr().err
    assert _train(inst, tmp_path / "ck", "--out", str(a_file)) == 2
    assert "--out: expected a folder" in capsys.readouterr().err
    assert not (tmp_path / "ck").exists() and a_file.read_text() == "x"


def test_train_under_torchrun_checks_before_the_worker(inst: Path, tmp_path: Path, capsys, no_workers,
                                                       monkeypatch) -> None:
    """A process torchrun started is itself a rank: a bad option exits 2 before train_worker."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert _train(inst, tmp_path / "ck", "--device-map", "0=p0,1=nope") == 2
    assert "--device-map: no device 'nope'" in capsys.readouterr().err
    assert _train(inst, tmp_path / "ck", "--timeout", "0") == 2
    assert "argument --timeout" in capsys.readouterr().err
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize("error,line", [
    (RuntimeError("[../third_party/gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500"),
     "dynpar: error: rank 1: a peer's connection closed (RuntimeError): another rank failed or was killed"),
    (ValueError("bad\nthing"), "dynpar: error: rank 1: ValueError: bad thing; traceback in "),
])
def test_train_rank_under_torchrun_fails_in_one_line(inst: Path, tmp_path: Path, capsys, monkeypatch,
                                                     error: Exception, line: str) -> None:
    """Under torchrun each rank is its own process: a failed rank says why in one line (exit 1)
    and leaves its traceback in the checkpoint folder; a rank whose peer was killed says so
    instead of a gloo traceback (an outside audit's kill -9 drill printed the peers' tracebacks)."""
    import solver.runtime.trainer as trainer_mod

    def fail(*a, **k):
        raise error
    monkeypatch.setattr(trainer_mod, "train_worker", fail)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    ck = tmp_path / "ck"
    assert _train(inst, ck, "--device-map", "0=p0,1=p1") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(line), err
    assert "Traceback" in (ck / "rank-1.trace").read_text()


def test_train_good_options_reach_the_launcher_parsed(inst: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """Valid values pass the checks unchanged (the launcher stubbed: nothing spawned); a negative
    value after its flag is its value, and --kill-at may name a device not in --devices (a
    device recorded lost, on resume)."""
    import solver.runtime.launch as launch_mod
    got = {}

    def fake(instance, cfg, devices):
        got.update(cfg=cfg, devices=devices)
        return devices or [d.name for d in instance.devices]
    monkeypatch.setattr(launch_mod, "launch", fake)
    monkeypatch.delenv("RANK", raising=False)
    ck = tmp_path / "ck"
    assert _train(inst, ck, "--V", "0", "--policy", "even-dp", "--timeout", "0.5", "--checkpoint-every", "0",
                  "--devices", "p0, p2", "--repeat", "p2=2", "--kill-at", "p1:7", "--contention", "2=0.5",
                  "--device-map", "0=p0,1=p2") == 0
    cfg = got["cfg"]
    assert got["devices"] == ["p0", "p2"]
    assert (cfg.V, cfg.policy, cfg.timeout_s, cfg.checkpoint_every) == (0.0, "even-dp", 0.5, 0)
    assert (cfg.steps, cfg.iterations_per_slot, cfg.repeat, cfg.kill) == (8, 4, {"p2": 2}, ("p1", 7))
    assert cfg.contention == {2: 0.5}
    assert "trained 8 iterations on p0, p2" in capsys.readouterr().out


BAD_PROFILE = [
    (["--batch", "0"], "--batch", "'0'"),
    (["--micro-batch", "-1"], "--micro-batch", "'-1'"),
    (["--batch", "30", "--micro-batch", "4"], "--batch / --micro-batch", "30 / 4"),
    (["--repeats", "0"], "--repeats", "'0'"),
    (["--threads", "0"], "--threads", "'0'"),
    (["--cpu-quota", "0"], "--cpu-quota", "'0'"),
    (["--cpu-quota", "nan"], "--cpu-quota", "'nan'"),
    (["--kind", " "], "--kind", "' '"),
    (["--tp-degrees", "2,x"], "--tp-degrees", "'x'"),
]


@pytest.mark.parametrize("extra,flag,value", BAD_PROFILE, ids=[" ".join(b[0]) for b in BAD_PROFILE])
def test_profile_bad_option_exits_2_before_any_timing(tmp_path: Path, capsys, monkeypatch,
                                                      extra: list[str], flag: str, value: str) -> None:
    import solver.cli.train as train_mod

    def refuse(*a, **k):
        raise AssertionError("profiled before the options were checked")
    monkeypatch.setattr(train_mod, "_profile", refuse)
    out = tmp_path / "p.csv"
    assert _rc(["profile", MODEL, "--kind", "cpu", "-o", str(out), *extra]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and value in lines[0], err
    assert not out.exists()


@pytest.mark.parametrize("model", ["no_such_module_xyz:f", "solver.runtime.examples:no_such_factory", "nocolon"])
def test_profile_bad_model_exits_2(tmp_path: Path, capsys, model: str) -> None:
    out = tmp_path / "p.csv"
    assert _rc(["profile", model, "--kind", "cpu", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dynpar: error: --model: ") and repr(model) in err and not out.exists()


def _checkpoint_at(inst: Path, ck: Path, step: int) -> None:
    """A complete checkpoint of this test's job (iterations_per_slot 4) at `step`, as ckpt.save
    publishes it (meta.json with the job's identity; no block is read before a worker starts)."""
    import json
    from solver.io.instance import load_instance
    from solver.runtime.trainer import TrainConfig
    ident = TrainConfig(MODEL, 8, str(ck), 4).identity(load_instance(inst))
    (ck / f"ckpt-{step:08d}").mkdir(parents=True)
    (ck / f"ckpt-{step:08d}" / "meta.json").write_text(json.dumps({"identity": ident, "step": step}))
    (ck / "LATEST").write_text(f"ckpt-{step:08d}")


@pytest.mark.parametrize("done,hint", [
    (8, "a larger --steps, up to num_slots * iterations_per_slot = 12, trains on from it"),
    (12, "every slot of instance 'cpu4' is trained, 3 x 4 iterations: to train on, raise num_slots in"),
])
def test_train_nothing_to_train_says_what_trains_on(inst: Path, tmp_path: Path, capsys, no_workers,
                                                    done: int, hint: str) -> None:
    """At or past --steps: the hint names what extends the run; once every slot of the instance is
    trained, a larger --steps would be refused (at most num_slots * iterations_per_slot), so the
    hint is the instance's num_slots instead."""
    ck = tmp_path / "ck"
    _checkpoint_at(inst, ck, done)
    assert _train(inst, ck) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"nothing to train: the newest checkpoint in {ck} is at step {done}") and hint in out, out
    if done == 12:
        assert "a larger --steps" not in out


def test_train_unwritable_checkpoint_dir_exits_2_before_any_worker(inst: Path, tmp_path: Path, capsys,
                                                                    no_workers) -> None:
    """A checkpoint folder that cannot be created is one line naming the flag, exit 2 (it was a
    worker's FileNotFoundError, exit 1); the probe leaves nothing behind."""
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    assert _train(inst, Path("/proc/dynpar-no-such")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dynpar: error: --checkpoint-dir: cannot create or write folder "
                                               "/proc/dynpar-no-such"), err
    ck = tmp_path / "ck"
    assert _train(inst, ck, "--out", "/proc/dynpar-no-such") == 2
    assert "--out: cannot create or write folder" in capsys.readouterr().err
    assert not ck.exists() and not list(tmp_path.glob(".dynpar-probe-*"))


def wrong_shape():
    """mlp64 with 6 input features (its first Linear takes 8)."""
    import torch
    from torch.utils.data import TensorDataset
    from solver.runtime.examples import mlp64
    spec = mlp64()
    spec.data = TensorDataset(torch.zeros(64, 6, dtype=torch.float64), torch.zeros(64, 4, dtype=torch.float64))
    return spec


def wrong_dtype():
    """mlp64 (float64) on float32 samples."""
    import torch
    from torch.utils.data import TensorDataset
    from solver.runtime.examples import mlp64
    spec = mlp64()
    spec.data = TensorDataset(torch.zeros(64, 8), torch.zeros(64, 4))
    return spec


@pytest.mark.parametrize("factory,why", [("wrong_shape", "(1x6 and 8x32)"), ("wrong_dtype", "dtype")])
def test_train_data_that_does_not_fit_the_model_exits_2_before_any_worker(inst: Path, tmp_path: Path, capsys,
                                                                           no_workers, factory: str, why: str) -> None:
    """The first sample's shape and dtype are checked against the model in the parent, as
    `dynpar profile` does: one line, exit 2 (it was 'rank 0: SpecError', exit 1)."""
    ck = tmp_path / "ck"
    assert _rc(["train", str(inst), "--model", f"tests.test_train_cli:{factory}", "--steps", "8",
                "--iterations-per-slot", "4", "--checkpoint-dir", str(ck)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dynpar: error: model: block 0 (Linear) fails on its input") \
        and why in err[0], err
    assert not ck.exists()


def optimizer_not_one():
    """mlp64 whose optimizer factory returns a string."""
    from solver.runtime.examples import mlp64
    spec = mlp64()
    spec.make_optimizer = lambda params: "sgd"
    return spec


def optimizer_with_closure():
    """mlp64 under LBFGS, whose step needs a closure."""
    import torch
    from solver.runtime.examples import mlp64
    spec = mlp64()
    spec.make_optimizer = lambda params: torch.optim.LBFGS(params)
    return spec


def loss_not_callable():
    from solver.runtime.examples import mlp64
    spec = mlp64()
    spec.loss = "mse"
    return spec


def loss_per_sample():
    """A loss that returns one value per sample (reduction='none')."""
    import torch
    from solver.runtime.examples import mlp64
    spec = mlp64()
    spec.loss = torch.nn.MSELoss(reduction="none")
    return spec


def loss_summed():
    """A sum over the micro-batch: its gradient scales with the micro-batch size the plan picks."""
    import torch
    from solver.runtime.examples import mlp64
    spec = mlp64()
    spec.loss = torch.nn.MSELoss(reduction="sum")
    return spec


def loss_token_mean():
    """mlp64's 4 outputs read as 4 tokens: a token mean of squared errors that skips targets
    equal to 0, with a different number of them per sample (as ignore_index padding does), so
    the batch's loss is not the mean of its samples' losses."""
    import torch
    from torch.utils.data import TensorDataset
    from solver.runtime.examples import mlp64
    spec = mlp64()
    x, y = spec.data.tensors
    y = y.clone()
    for j in range(len(y)):
        y[j, : j % 4] = 0.0          # sample j counts 4 - j % 4 of its 4 targets
    spec.data = TensorDataset(x, y)

    def loss(out, target):
        keep = target != 0
        return ((out - target) ** 2)[keep].sum() / keep.sum()
    spec.loss = loss
    return spec


@pytest.mark.parametrize("factory,why", [
    ("optimizer_not_one", "make_optimizer: expected a torch.optim.Optimizer (step, zero_grad, state_dict, "
                          "load_state_dict), got str"),
    ("optimizer_with_closure", "make_optimizer: LBFGS.step() fails when called with no closure"),
    ("loss_not_callable", "loss: expected a callable"),
    ("loss_per_sample", "loss: expected a scalar floating-point tensor"),
    ("loss_summed", "loss: expected the mean over the micro-batch of a per-sample loss"),
    ("loss_token_mean", "loss: expected the mean over the micro-batch of a per-sample loss"),
])
def test_train_optimizer_and_loss_the_runtime_cannot_train_exit_2_before_any_worker(
        inst: Path, tmp_path: Path, capsys, no_workers, factory: str, why: str) -> None:
    """Each was a rank-0 error after the workers had started (exit 1, a step-0 checkpoint left
    that then blocked the folder), or, for the token mean, a run whose parameters depended on
    the plan's micro-batch size (an outside audit: 0.036 off full-batch training)."""
    ck = tmp_path / "ck"
    assert _rc(["train", str(inst), "--model", f"tests.test_train_cli:{factory}", "--steps", "8",
                "--iterations-per-slot", "4", "--checkpoint-dir", str(ck)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dynpar: error: ") and why in err[0], err
    assert not ck.exists()


def test_profile_optimizer_the_runtime_cannot_step_exits_2(tmp_path: Path, capsys) -> None:
    """It was a traceback from the optimizer's timing."""
    out = tmp_path / "p.csv"
    assert _rc(["profile", "tests.test_train_cli:optimizer_not_one", "--kind", "cpu", "--repeats", "1",
                "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dynpar: error: make_optimizer: ") and not out.exists(), err
