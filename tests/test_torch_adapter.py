"""Torch adapter: multi-process training equals single-process full-batch training,
re-plans lose nothing, the profiler counts bytes exactly, bad plans fail before spawning."""
from __future__ import annotations

import copy
import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from solver.errors import DynparError  # noqa: E402
from solver.model import Device, SlotState  # noqa: E402
from solver.model import Group, Plan  # noqa: E402
from solver.runtime import (PlanMismatchError, Slot, TensorBatches, buckets,  # noqa: E402
                                  layer_holders, micro_sizes, profile_module, run)
from solver.runtime.replan import transfers  # noqa: E402

pytestmark = pytest.mark.torch
B, U = 32, 4


def make_model(dtype: torch.dtype = torch.float64) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 3)).to(dtype)


def make_data(dtype: torch.dtype = torch.float64) -> TensorBatches:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(96, 6, generator=g, dtype=dtype)
    y = torch.randn(96, 3, generator=g, dtype=dtype)
    return TensorBatches(x, y, B)


def reference(model: nn.Sequential, data: TensorBatches, steps: int, make_opt) -> nn.Sequential:
    """Single-process full-batch training: the result every plan must reproduce."""
    return reference_with_opt(model, data, steps, make_opt)[0]


def reference_with_opt(model: nn.Sequential, data: TensorBatches, steps: int, make_opt):
    m = copy.deepcopy(model)
    opt = make_opt(m.parameters())
    for i in range(steps):
        x, y = data.get(i)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return m, opt


def assert_same(result, ref: nn.Sequential, rtol: float, atol: float) -> None:
    ref_sd = ref.state_dict()
    assert set(result.state_dict) == set(ref_sd)
    for k, v in ref_sd.items():
        torch.testing.assert_close(result.state_dict[k], v, rtol=rtol, atol=atol, msg=k)


def plan(*groups: tuple[tuple[int, ...], tuple[int, ...], int]) -> Plan:
    return Plan(tuple(Group(d, c, s) for d, c, s in groups))


def test_micro_sizes_uneven() -> None:
    assert micro_sizes(19, 4) == [4, 4, 4, 4, 3]
    assert micro_sizes(8, 4) == [4, 4]
    assert micro_sizes(3, 4) == [3]


def test_equivalence_uneven_shares_float64() -> None:
    """2 groups x 2 stages, different cuts, shares 24/8 then 19/13 (uneven micro-batches)."""
    model, data = make_model(), make_data()
    sgd = functools.partial(torch.optim.SGD, lr=0.1)
    p1 = plan(((0, 1), (3, 7), 24), ((2, 3), (5, 7), 8))
    p2 = plan(((0, 1), (3, 7), 19), ((2, 3), (5, 7), 13))
    res = run(model, [Slot(p1, 3), Slot(p2, 3)], data, nn.MSELoss(), sgd, world_size=4, micro_batch=U)
    assert_same(res, reference(model, data, 6, sgd), rtol=1e-12, atol=1e-13)
    assert [len(t) for t in res.times] == [3, 3]
    assert res.success and res.status == "feasible" and "2 slots, 6 iterations" in res.message


def test_replan_momentum_carried_over() -> None:
    """Cuts move, a group is removed (a device leaves) then added, shares change; SGD
    momentum state travels with its layer: equal to training without re-plans."""
    model, data = make_model(), make_data()
    sgd = functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9)
    slots = [
        Slot(plan(((0, 1), (3, 7), 24), ((2, 3), (5, 7), 8)), 2),
        Slot(plan(((2, 0, 3), (2, 4, 7), 32)), 2),                       # device 1 leaves
        Slot(plan(((1,), (7,), 12), ((3, 2), (6, 7), 8), ((0,), (7,), 12)), 2),  # 3 groups
    ]
    res = run(model, slots, data, nn.MSELoss(), sgd, world_size=4, micro_batch=U)
    ref, ref_opt = reference_with_opt(model, data, 6, sgd)
    assert_same(res, ref, rtol=1e-12, atol=1e-13)
    for i, mod in enumerate(ref):
        params = list(mod.parameters())
        st = res.opt_states[i]
        if not params:
            assert st is None
            continue
        assert len(st["state"]) == len(params)
        for j, p in enumerate(params):  # per-layer optimizer: parameter j of layer i
            torch.testing.assert_close(st["state"][j]["momentum_buffer"],
                                       ref_opt.state[p]["momentum_buffer"], rtol=1e-12, atol=1e-13)


def test_replan_adam_float32() -> None:
    """Adam state (step, exp_avg, exp_avg_sq) survives a re-plan that moves every layer."""
    model, data = make_model(torch.float32), make_data(torch.float32)
    adam = functools.partial(torch.optim.Adam, lr=1e-2)
    slots = [Slot(plan(((0, 1), (2, 7), 20), ((2, 3), (4, 7), 12)), 2),
             Slot(plan(((3, 2), (5, 7), 16), ((1, 0), (1, 7), 16)), 2)]
    res = run(model, slots, data, nn.MSELoss(), adam, world_size=4, micro_batch=U)
    assert_same(res, reference(model, data, 4, adam), rtol=1e-4, atol=1e-6)
    assert float(res.opt_states[0]["state"][0]["step"]) == 4.0


def test_layout_buckets_per_layer_and_transfers() -> None:
    """Different cuts: a bucket is a layer's holder-rank set; each missing layer has one source."""
    p = plan(((0, 1), (3, 7), 24), ((2, 3), (5, 7), 8))
    has = [True, False, True, False, True, False, True]
    assert buckets(p, 7, has) == {(0, 2): [0, 2], (1, 2): [4], (1, 3): [6]}
    q = plan(((2, 0, 3), (2, 4, 7), 32))
    t = transfers(layer_holders(p, 7), layer_holders(q, 7))
    assert t == {(1, 0): [3], (1, 3): [4]}  # device 1 leaves: it hands layers 3 and 4 over
    assert all(len({s for (s, d), ls in t.items() if layer in ls and d == dst}) <= 1
               for layer in range(7) for dst in range(4))


def test_profiler_exact_bytes() -> None:
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.Conv2d(1, 2, 3, padding=1))
    wl = profile_module(m[:3], torch.randn(16, 4), "cpu", batch=32, micro_batch=4, repeats=2)
    assert wl.num_layers == 3 and set(wl.measured) == {"cpu"}
    assert [l.param_bytes for l in wl.layers] == [(4 * 8 + 8) * 4, 0, (8 * 3 + 3) * 4]
    assert [l.out_bytes for l in wl.layers] == [32, 32, 12]
    assert [l.stash_bytes for l in wl.layers] == [16, 32, 32]  # Linear: input; ReLU: output
    assert [l.fwd_flops for l in wl.layers] == [64, 0, 48]
    assert wl.input_bytes == 16
    fwd, bwd = wl.measured["cpu"]
    assert len(fwd) == len(bwd) == 3 and all(t > 0 for t in fwd)
    conv = profile_module(nn.Sequential(m[3]), torch.randn(2, 1, 5, 5), "cpu", 4, 2, repeats=1)
    assert conv.layers[0].fwd_flops == 2 * 9 * 2 * 25
    assert conv.layers[0].param_bytes == (2 * 9 + 2) * 4
    assert conv.layers[0].out_bytes == 2 * 25 * 4


def test_profiler_leaves_the_callers_model_untouched() -> None:
    """profile_module times a private copy by default: the caller's BatchNorm statistics and
    gradients are as they were (an outside audit: running statistics moved by 0.42 and
    gradients were cleared); private=False times the model itself."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2))
    m(torch.randn(8, 4)).sum().backward()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    grads = [p.grad.clone() for p in m.parameters()]
    profile_module(m, torch.randn(8, 4), "cpu", batch=16, micro_batch=8, repeats=1)
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())
    assert all(p.grad is not None and torch.equal(p.grad, g) for p, g in zip(m.parameters(), grads))
    profile_module(m, torch.randn(8, 4), "cpu", batch=16, micro_batch=8, repeats=1, private=False)
    assert not torch.equal(m[1].running_mean, before["1.running_mean"])


def tiny_state(mem: float) -> SlotState:
    wl = profile_module(make_model(), torch.randn(4, 6, dtype=torch.float64), "emu", B, U, repeats=1)
    devs = tuple(Device(f"d{i}", "emu", 1e9, mem, 100.0, 30.0, 0.0) for i in range(4))
    ones = np.ones(4)
    bw = np.full((4, 4), 1e9)
    return SlotState(0, devs, wl, (), np.ones(4, bool), ones * 1e9, ones, ones * 0.0, bw, bw * 0)


@pytest.mark.parametrize("bad, words", [
    (plan(((0, 1), (3, 6), 32)), "layer count mismatch"),
    (plan(((0, 5), (3, 7), 32)), "device index 5"),
    (plan(((0, 1), (3, 7), 20), ((2, 3), (5, 7), 8)), "shares sum to 28"),
    (plan(((0, 0), (3, 7), 32)), "appears twice"),
])
def test_bad_plan_fails_before_spawn(bad: Plan, words: str) -> None:
    sgd = functools.partial(torch.optim.SGD, lr=0.1)
    with pytest.raises(PlanMismatchError, match=words) as e:
        run(make_model(), [Slot(bad, 1)], make_data(), nn.MSELoss(), sgd, world_size=4, micro_batch=U,
            timeout_s=5)
    assert isinstance(e.value, ValueError) and isinstance(e.value, DynparError)


def test_memory_violation_fails_before_spawn() -> None:
    p = plan(((0, 1), (3, 7), 32))
    sgd = functools.partial(torch.optim.SGD, lr=0.1)
    with pytest.raises(PlanMismatchError, match="memory"):
        run(make_model(), [Slot(p, 1)], make_data(), nn.MSELoss(), sgd, world_size=4, micro_batch=U,
            states=[tiny_state(mem=100.0)])
    with pytest.raises(PlanMismatchError, match="layer count mismatch"):
        run(make_model()[:5], [Slot(plan(((0,), (5,), 32)), 1)], make_data(), nn.MSELoss(), sgd,
            world_size=4, micro_batch=U, states=[tiny_state(mem=1e9)])


def test_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """python -m solver.runtime, shortened: a table row per slot, and training learns."""
    from solver.runtime.__main__ import main
    assert main(["--slots", "2", "--steps", "2", "--t-ref", "1e-3", "--samples", "256"]) == 0
    out = capsys.readouterr().out
    assert "predicted ms" in out and out.count("hand ") >= 2 and "loss" in out


@pytest.mark.parametrize("bad, constraint", [
    (plan(((0, 1), (3, 6), 32)), "layers_covered"),
    (plan(((0, 1, 2), (3, 7), 32)), "cuts_match_stages"),
    (plan(((0, 1), (3, 7), 20), ((2, 3), (5, 7), 8)), "shares_sum"),
    (plan(((1, 0), (0, 7), 32)), "stage_nonempty"),
])
def test_one_structural_check(bad: Plan, constraint: str) -> None:
    """The runtime's check_plan and Plan.validate report a structural fault in the same words
    (model.plan.structure_violations)."""
    from solver.runtime import check_plan
    state = tiny_state(mem=1e9)
    details = [v.detail for v in bad.validate(state) if v.constraint == constraint]
    assert details
    with pytest.raises(PlanMismatchError) as e:
        check_plan(bad, 7, 4, B)
    assert all(d in str(e.value) for d in details)
