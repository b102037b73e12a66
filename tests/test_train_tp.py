"""`dynpar train` with tensor-parallel stages (runtime.tensor_parallel, tp_stage, tp_sync):
float64 equivalence to single-process full-batch training for TP stages inside pipelines
(GPipe, 1F1B) and alone, beside degree-1 groups with uneven shares, across a re-plan that
moves shards and a resume from a checkpoint, with SGD-momentum and with Adam (clipping, LR
warm-up); a plan the planner chose; what is refused."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
from torch import nn

from solver.cli import main
from solver.io.instance import load_instance
from solver.model import Group, Plan, plan_to_json
from solver.runtime import examples
from solver.runtime.launch import launch
from solver.runtime.tensor_parallel import degrees_for, stage_roles
from solver.runtime.tp_sync import Piece, tp_buckets
from solver.runtime.trainer import (
    TrainConfig,
    final_state,
    runtime_options,
    unsupported,
)
from tests.test_train import reference, write_instance

pytestmark = pytest.mark.torch


def tp_instance(folder: Path, memory_gb: float | None = None, recorded: bool = False) -> Path:
    """tests.test_train's 4-process instance with its server declared (a TP stage lies in one
    server); `memory_gb`: each device's memory instead of 4 GB; recorded: on the recorded
    layer table (test_train.MLP64_RECORDED) instead of a live profile."""
    f = write_instance(folder, recorded=recorded)
    text = f.read_text()
    if memory_gb is not None:
        text = text.replace("memory_gb = 4\n", f"memory_gb = {memory_gb}\n")
    f.write_text(text + '\n[[servers]]\nname = "s0"\n')
    return f


def assert_matches(folder: Path, steps: int, factory: str) -> None:
    ref, got = reference(steps, getattr(examples, factory)), final_state(folder, 7)
    assert set(got) == set(ref)
    for k, v in ref.items():
        torch.testing.assert_close(got[k], v, rtol=0, atol=1e-12, msg=k)


def test_tp_stage_in_pipelines_across_replan_and_resume(tmp_path: Path) -> None:
    """SGD-momentum. Slot 0: one GPipe group p0 > p1+p2 (stage 1, layers 3..6, TP-2: a
    column/row pair, then a column-parallel Linear gathered). Slot 1, in a new job resumed
    from slot 0's checkpoint (whole layers on disk, cut into shards again): a 1F1B group
    p0 > p1+p2 (layers 2..6 at TP-2) beside p3 alone with an uneven share (24 | 8)."""
    inst = load_instance(tp_instance(tmp_path))
    p1 = Plan((Group((0, 1), (3, 7), 32, "gpipe", tp_peers=((), (2,))),))
    p2 = Plan((Group((0, 1), (2, 7), 24, "1f1b", tp_peers=((), (2,))), Group((3,), (7,), 8)))
    plans = (plan_to_json(p1), plan_to_json(p2))
    launch(inst, TrainConfig("solver.runtime.examples:mlp64", 4, str(tmp_path / "ck"), iterations_per_slot=4,
                             plans=plans))
    assert_matches(tmp_path / "ck", 4, "mlp64")
    launch(inst, TrainConfig("solver.runtime.examples:mlp64", 8, str(tmp_path / "ck"), iterations_per_slot=4,
                             plans=plans))
    assert_matches(tmp_path / "ck", 8, "mlp64")
    rows = pd.read_csv(tmp_path / "ck" / "slots.csv")
    assert [json.loads(j)["groups"][0]["tp_peers"] for j in rows["plan_json"]] == [[[], [2]], [[], [2]]]
    assert list(rows["restarts"]) == [0, 1]
    for js in rows["measured_compute"]:  # the peer p2 measured its own compute
        assert json.loads(js)["2"] > 0


def test_tp_with_adam_alone_and_as_first_stage_across_replan(tmp_path: Path) -> None:
    """Adam with global-norm clipping and an LR warm-up (examples.mlp64_adam_clip_sched).
    Slot 0: a one-stage TP-2 group p0+p1 (two column/row pairs) beside a 1F1B pipeline
    p2 > p3 (shares 16 | 16; the row-parallel biases are reduced whole, the split weights
    by shard). Slot 1 (migrated in the same job): a GPipe group whose first stage p3+p2
    (layers 0..1, the leader's rank above its peer's) is TP-2 and whose second is p0."""
    inst = load_instance(tp_instance(tmp_path))
    p1 = Plan((Group((0,), (7,), 16, tp_peers=((1,),)), Group((2, 3), (4, 7), 16, "1f1b")))
    p2 = Plan((Group((3, 0), (2, 7), 32, "gpipe", tp_peers=((2,), ())),))
    factory = "mlp64_adam_clip_sched"
    launch(inst, TrainConfig(f"solver.runtime.examples:{factory}", 8, str(tmp_path / "ck"), iterations_per_slot=4,
                             plans=(plan_to_json(p1), plan_to_json(p2))))
    assert_matches(tmp_path / "ck", 8, factory)
    rows = pd.read_csv(tmp_path / "ck" / "slots.csv")
    assert rows["measured_migration_time"].iloc[1] > 0


def test_tp_stages_recomputed_equal_single_process(tmp_path: Path) -> None:
    """Recomputation on TP stages (leader and peer checkpointed alike), float64, Adam with
    clipping and LR warm-up, one job over three slots: a GPipe group p0 > p1+p2 (stage 1
    TP-2, recomputed); a 1F1B group p0 > p1+p2 (layers 2..6 TP-2) beside p3, both recomputed,
    shares 24 | 8; a one-stage TP-2 group p0+p1 recomputed beside a 1F1B pipeline p2 > p3."""
    inst = load_instance(tp_instance(tmp_path))
    plans = (Plan((Group((0, 1), (3, 7), 32, "gpipe", True, tp_peers=((), (2,))),)),
             Plan((Group((0, 1), (2, 7), 24, "1f1b", True, tp_peers=((), (2,))), Group((3,), (7,), 8, "gpipe", True))),
             Plan((Group((0,), (7,), 16, "gpipe", True, tp_peers=((1,),)), Group((2, 3), (4, 7), 16, "1f1b"))))
    factory = "mlp64_adam_clip_sched"
    launch(inst, TrainConfig(f"solver.runtime.examples:{factory}", 12, str(tmp_path / "ck"), iterations_per_slot=4,
                             plans=tuple(plan_to_json(p) for p in plans)))
    assert_matches(tmp_path / "ck", 12, factory)
    rows = pd.read_csv(tmp_path / "ck" / "slots.csv")
    assert [g["recompute"] for g in json.loads(rows["plan_json"].iloc[1])["groups"]] == [True, True]


def test_recomputation_keeps_the_forwards_tp_switch() -> None:
    """A forward run with the TP collectives off (local_only: the pipeline's shape inference
    on a TP leader) is recomputed with them off, though its backward runs outside the block
    (with them on, the leader's recomputation waited for peers that never join)."""
    from solver.runtime.recompute import run_recomputed
    from solver.runtime.tensor_parallel import COLLECTIVES_OFF, local_only
    seen: list[bool] = []

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(COLLECTIVES_OFF.get())
            return x * x

    x = torch.randn(3, requires_grad=True)
    with local_only():
        y = run_recomputed([Probe()], x)
    y.sum().backward()
    assert seen == [True, True] and COLLECTIVES_OFF.get() is False
    torch.testing.assert_close(x.grad, 2 * x.detach())
    seen.clear()
    run_recomputed([Probe()], x).sum().backward()
    assert seen == [False, False]


def test_train_runs_the_tp_plan_the_planner_chooses(tmp_path: Path) -> None:
    """Devices of 30 kB: no plan without TP holds mlp64 (the controller's search without TP
    finds none); `dynpar train` plans with the TP degrees the model splits at, runs them and
    ends where single-process training ends."""
    inst = tp_instance(tmp_path, memory_gb=3e-5)
    assert main(["train", str(inst), "--model", "solver.runtime.examples:mlp64", "--steps", "8",
                 "--checkpoint-dir", str(tmp_path / "ck"), "--iterations-per-slot", "4"]) == 0
    rows = pd.read_csv(tmp_path / "ck" / "slots.csv")
    assert len(rows) == 2
    for js in rows["plan_json"]:
        assert any(any(p) for g in json.loads(js)["groups"] for p in g.get("tp_peers", []))
    # the TP ranks timed their collectives; lambda (s per collective) fitted on slot 0 is slot 1's
    for parts in rows["measured_parts"]:
        assert any(v.get("tp_comm", 0.0) > 0 for v in json.loads(parts).values())
    assert rows["tp_collective_latency_used"].tolist() == [0.0, rows["tp_collective_latency"][0]]
    assert_matches(tmp_path / "ck", 8, "mlp64")


def test_tp_refusals_and_search_degrees() -> None:
    """What a TP stage refuses, in one line each naming the layer; the degrees the
    controller's search may use."""
    mlp = list(examples.mlp64().model)
    assert degrees_for(mlp) == (1, 2, 4)  # the last Linear has 4 outputs
    assert runtime_options(mlp).tp_degrees == (1, 2, 4)
    assert runtime_options(None).tp_degrees == (1,)
    slow = TrainConfig("m:f", 1, "ck", repeat={"p1": 2})
    assert runtime_options(mlp, slow).tp_degrees == (1,)
    ln = [nn.Linear(8, 32), nn.Sequential(nn.LayerNorm(32), nn.Tanh()), nn.Linear(32, 6)]
    assert degrees_for(ln) == (1,)
    tp = Plan((Group((0, 1), (1, 3), 32, tp_peers=((), (2, 3, 4))),))
    where = "group 0, stage 1 (layers 1..2): tensor parallelism of degree 4 over devices [1, 2, 3, 4]: "
    assert unsupported(tp, blocks=ln) == [
        where + "layer 1 (0): LayerNorm holds parameters and TP splits nn.Linear and "
        "tensor_parallel.SelfAttention only (inside nn.Sequential blocks)",
        where + "layer 2: Linear(32, 6): out_features 6 is not a multiple of the TP degree 4"]
    assert unsupported(tp, engine="hand", blocks=mlp)[0].endswith("inside a pipeline needs engine 'torch'")
    assert unsupported(Plan((Group((0,), (7,), 32, tp_peers=((1,),)),)), engine="hand", blocks=mlp) == []
    assert "no model given" in unsupported(tp)[0]
    # an optimizer that is not element-wise: no TP searched, a TP plan refused (Adafactor was 5e-3 off)
    from solver.runtime.spec import tp_refusal
    assert tp_refusal(examples.mlp64_adam().make_optimizer) is None
    why = tp_refusal(lambda ps: torch.optim.Adafactor(ps, lr=1e-2))
    assert why.startswith("optimizer Adafactor is not element-wise")
    assert runtime_options(mlp, None, why).tp_degrees == (1,)
    tp2 = Plan((Group((0,), (7,), 32, tp_peers=((1,),)),))
    assert unsupported(tp2, blocks=mlp, no_tp=why) == [
        f"group 0, stage 0 (layers 0..6): tensor parallelism of degree 2 over devices [0, 1]: {why}"]
    # parameters tied inside one block: refused by name (torch's optimizer error before)
    lin = nn.Linear(8, 8)
    twin = nn.Linear(8, 8)
    twin.weight = lin.weight
    assert "layer 0: parameters 0.weight and 2.weight are one tensor (tied)" in \
        " ".join(unsupported(Plan((Group((0,), (1,), 32, tp_peers=((1,),)),)),
                             blocks=[nn.Sequential(lin, nn.Tanh(), twin)]))
    from solver.runtime.checks import PlanMismatchError, check_plan
    with pytest.raises(PlanMismatchError, match=r"group 0: tensor-parallel stages \(tp_peers \[\[1\]\]\) run under"):
        check_plan(Plan((Group((0,), (7,), 32, tp_peers=((1,),)),)), 7, 2, 32)


def test_tp_roles_and_gradient_pieces() -> None:
    """Pairs and gathered Linears by position in the stage; the cross-group gradient pieces:
    by shard where every TP holder splits a parameter alike, whole (zeros outside each shard)
    where they differ or keep it whole."""
    mlp = [copy.deepcopy(b).to("meta") for b in examples.mlp64().model]
    assert stage_roles(mlp[3:7]) == [{}, {"": "col"}, {}, {"": "row"}]
    assert stage_roles(mlp[0:2]) == [{"": "colgather"}, {}]
    has = [any(True for _ in b.parameters()) for b in mlp]
    # group 0: layers 0..6 at TP-2 on ranks 0, 1 (pairs 0-2, 4-6); group 1: layers 0..1 on rank 2
    # alone, layers 2..6 at TP-2 on ranks 5, 3 (pair 2-4, then 6 gathered)
    plan = Plan((Group((0,), (7,), 16, tp_peers=((1,),)), Group((2, 5), (2, 7), 16, tp_peers=((), (3,)))))
    got = tp_buckets(plan, mlp, has)
    assert got[(0, 2)][:2] == [Piece(0, "weight", 0, 0, 2), Piece(0, "bias", 0, 0, 2)]
    assert got[(1, 2)][:2] == [Piece(0, "weight", 0, 1, 2), Piece(0, "bias", 0, 1, 2)]
    assert set(got) == {(0, 2), (1, 2), (0, 1, 3, 5)}
    assert got[(0, 1, 3, 5)] == [Piece(i, n) for i in (2, 4, 6) for n in ("weight", "bias")]


def test_estimator_prices_tp_stages_on_their_units(tmp_path: Path) -> None:
    """Every rank of a TP stage is predicted its unit's stage compute (model.units: the
    split stage, TP collectives included), below the stage's time on one device; a degree-1
    stage keeps its own; peers of a pipeline stage get the pipeline's (negated) context. On the
    recorded layer table: whether the split stage plus its TP collectives (priced on the
    instance's links, the same on every machine) is below the whole stage depends on the
    layer seconds a live profile measures: at 0.45 of the recorded ones (a CPU about twice
    as fast) the unit costs 1.02 of the whole stage (0.73 on the recorded table)."""
    from solver.runtime.estimator import predicted_compute
    from solver.runtime.speeds import contexts
    st = load_instance(tp_instance(tmp_path, recorded=True)).state(0)
    tp = Plan((Group((0, 1), (3, 7), 32, tp_peers=((), (2,))),))
    one = Plan((Group((0, 1), (3, 7), 32),))
    got, ref = predicted_compute(tp, st), predicted_compute(one, st)
    assert set(got) == {0, 1, 2} and got[1] == got[2] and got[0] == pytest.approx(ref[0], rel=1e-12)
    assert 0 < got[1] < ref[1]
    assert contexts(tp, {}) == {0: -3, 1: -3, 2: -3}


def test_tp_dropout_masks_replicated_on_the_stage(tmp_path: Path) -> None:
    """mlp64_dropout (nn.Dropout after the first two Tanh): a dropout between two Linears
    breaks the pair (the first is gathered), and runs whole on every TP rank with the same
    per-sample masks; a 1F1B pipeline of two TP-2 stages, then a one-stage TP-2 group beside a
    pipeline (shares 8 | 24)."""
    f = write_instance(tmp_path, examples.mlp64_dropout)
    f.write_text(f.read_text() + '\n[[servers]]\nname = "s0"\n')
    p1 = Plan((Group((0, 1), (4, 9), 32, "1f1b", tp_peers=((2,), (3,))),))
    p2 = Plan((Group((2,), (9,), 8, tp_peers=((0,),)), Group((3, 1), (5, 9), 24)))
    launch(load_instance(f), TrainConfig("solver.runtime.examples:mlp64_dropout", 6, str(tmp_path / "ck"),
                                         iterations_per_slot=3, plans=(plan_to_json(p1), plan_to_json(p2))))
    ref, got = reference(6, examples.mlp64_dropout), final_state(tmp_path / "ck", 9)
    for k, v in ref.items():
        torch.testing.assert_close(got[k], v, rtol=0, atol=1e-12, msg=k)


def test_local_only_is_scoped_to_its_context() -> None:
    """`local_only` turns the TP collectives off inside the block only, in this thread only
    (a context variable, no module-level flag): a TPLinear without a process group runs
    inside (a gathered column shard repeats its slice, as the shape inference needs), its
    backward built inside skips the gradient all-reduce too; outside, and in another
    thread while the block is open, the collectives are on."""
    import threading

    from solver.runtime.tensor_parallel import COLLECTIVES_OFF, TPLinear, local_only
    torch.manual_seed(0)
    lin = TPLinear("colgather", torch.randn(2, 3), torch.randn(2), 0, 2)
    x = torch.randn(4, 3, requires_grad=True)
    seen: list[bool] = []
    with local_only():
        assert COLLECTIVES_OFF.get() is True
        th = threading.Thread(target=lambda: seen.append(COLLECTIVES_OFF.get()))
        th.start()
        th.join()
        y = lin(x)
    assert seen == [False] and COLLECTIVES_OFF.get() is False
    part = x @ lin.weight.T + lin.bias
    torch.testing.assert_close(y, torch.cat([part, part], dim=-1), rtol=0, atol=0)
    y.sum().backward()  # the graph was built with the collectives off: no all-reduce, no group needed
    torch.testing.assert_close(x.grad, lin.weight.sum(0).expand(4, 3), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="process group has not been initialized"):  # outside: the collective runs
        lin(x)


def test_collective_counts_follow_the_split() -> None:
    """Per block, the TP collectives the runtime's split runs per micro-batch and pass: a
    row-parallel Linear one forward all-reduce; a column-parallel one the backward all-reduce
    of its input's gradient (none for the model's first block: its input is the data); a
    gathered one an all-gather forward and that all-reduce backward."""
    from solver.runtime.tensor_parallel import collective_counts
    assert collective_counts(list(examples.mlp64().model)) == ((0, 0, 1, 0, 0, 0, 1), (0, 0, 0, 0, 1, 0, 0))
    wide = list(examples.wide().model)  # 6 x Sequential(Linear, Tanh), then Linear(W, 10): pairs across blocks
    assert collective_counts(wide) == ((0, 1, 0, 1, 0, 1, 1), (0, 0, 1, 0, 1, 0, 1))


def test_estimator_fits_the_tp_collective_latency(tmp_path: Path) -> None:
    """The per-collective TP latency lambda (runtime.estimator, step 4) from the collective
    seconds the TP ranks measured, the TP ranks' factors from their compute alone: from a
    start that knows neither, one slot's measurements give back the "machine"'s lambda and
    factors, the refit equals the measured batch time, and the factors price a plan without
    TP as the machine does. lambda enters no plan without TP; a ring already above the
    measurement clips lambda at 0, said."""
    from dataclasses import replace

    from solver.cost import evaluate
    from solver.runtime.estimator import (
        estimate,
        observed_state,
        predicted_compute,
        predicted_tp_collectives,
    )
    from solver.runtime.tensor_parallel import collective_counts
    st = load_instance(tp_instance(tmp_path, recorded=True)).state(0)
    st = replace(st, workload=replace(st.workload, tp_collectives=collective_counts(list(examples.mlp64().model))))
    present = np.ones(4, dtype=bool)
    tp = Plan((Group((0,), (7,), 32, tp_peers=((1,),)),))
    truth = observed_state(st, present, {0: 0.5, 1: 0.4, 2: 0.8, 3: 1.0}, tp_latency=1.2e-3)
    comm = predicted_tp_collectives(tp, truth)
    # the stage's 3 collectives per micro-batch (2 forward, 1 backward), 8 micro-batches, each 1.2 ms + its ring
    assert comm[0] == comm[1] and 24 * 1.2e-3 < comm[0] < 24 * 1.3e-3
    compute = {d: v for d, v in predicted_compute(tp, truth).items()}
    # rank 1 computes longer (factor 0.4): it waits least in the collectives, rank 0 waits for it
    wait = compute[1] - compute[0]
    measured_tp = {0: comm[0] + wait, 1: comm[1]}
    measured = {0: compute[0] + wait, 1: compute[1]}
    batch = evaluate(tp, truth).batch_time
    est = estimate({}, 0.0, 1.0, tp, st, present, measured, batch, None, measured_tp)
    assert est.tp_latency == pytest.approx(1.2e-3, rel=1e-9) and est.note == ""
    assert est.factors[1] == pytest.approx(0.4, rel=1e-9)  # the unit's speed: its slowest rank
    assert est.refit_batch_time == pytest.approx(batch, rel=1e-9)
    one = Plan((Group((1,), (7,), 32),))
    fitted = observed_state(st, present, est.factors, tp_latency=est.tp_latency)
    assert evaluate(one, fitted).batch_time == pytest.approx(evaluate(one, truth).batch_time, rel=1e-9)
    assert evaluate(one, replace(fitted, tp_collective_latency=0.5)).batch_time == evaluate(one, fitted).batch_time
    # the old way (the collectives' seconds left in the compute): rank 1's factor 2x too slow here
    plain = estimate({}, 0.0, 1.0, tp, st, present, measured, batch)
    assert plain.factors[1] < 0.5 * 0.4 and plain.tp_latency == 0.0
    low = estimate({}, 0.0, 1.0, tp, st, present, measured, batch, None, {0: 1e-9, 1: 1e-9})
    assert low.tp_latency == 0.0 and "tp_collective_latency clipped at 0" in low.note


def test_instance_declares_the_tp_collective_latency(tmp_path: Path) -> None:
    """[network] tp_collective_latency_ms: the slot states' per-collective TP latency (s),
    0 when absent, kept by save_instance, a negative value refused naming the field; a TP
    stage's predicted compute grows by it, once per collective."""
    from dataclasses import replace

    from solver.io.instance import save_instance
    from solver.runtime.estimator import predicted_tp_collectives
    f = tp_instance(tmp_path, recorded=True)
    assert load_instance(f).state(0).tp_collective_latency == 0.0
    f.write_text(f.read_text() + "\n[network]\ntp_collective_latency_ms = 1.5\n")
    inst = load_instance(f)
    assert inst.state(0).tp_collective_latency == pytest.approx(1.5e-3)
    assert load_instance(save_instance(inst, tmp_path / "saved" / "x.toml")).tp_collective_latency == pytest.approx(1.5e-3)
    tp = Plan((Group((0,), (7,), 32, tp_peers=((1,),)),))
    without = predicted_tp_collectives(tp, replace(inst.state(0), tp_collective_latency=0.0))
    # Megatron's rule without the runtime's counts: 2 collectives per layer and pass, 7 layers, 8 micro-batches
    assert predicted_tp_collectives(tp, inst.state(0))[0] - without[0] == pytest.approx(2 * 2 * 7 * 8 * 1.5e-3)
    f.write_text(f.read_text().replace("tp_collective_latency_ms = 1.5", "tp_collective_latency_ms = -1"))
    from solver.errors import InstanceError
    with pytest.raises(InstanceError, match=r"network\.tp_collective_latency_ms: must be >= 0.*\(got -1\)"):
        load_instance(f)


def test_attention_split_by_heads_equals_single_process(tmp_path: Path) -> None:
    """examples.attn64 (Linear, SelfAttention of 4 heads, a Megatron pair, Linear) with the
    attention split by heads: a one-stage TP-2 group beside a 2-stage GPipe pipeline (shares
    20 | 12: the in_proj's query, key and value rows of each shard reduced with the degree-1
    group's slices), then a GPipe group whose first stage (Linear, attention) is TP-2, then
    one TP-4 stage (one head a rank), migrating between them: the parameters equal
    single-process float64 training to 1e-12; every TP rank timed its collectives."""
    f = write_instance(tmp_path, examples.attn64)
    f.write_text(f.read_text() + '\n[[servers]]\nname = "s0"\n')
    p1 = Plan((Group((0,), (6,), 20, tp_peers=((1,),)), Group((2, 3), (2, 6), 12)))
    p2 = Plan((Group((2, 3), (2, 6), 32, tp_peers=((0,), ())),))
    p3 = Plan((Group((1,), (6,), 32, tp_peers=((0, 2, 3),)),))
    launch(load_instance(f), TrainConfig("solver.runtime.examples:attn64", 9, str(tmp_path / "ck"),
                                         iterations_per_slot=3, plans=tuple(plan_to_json(p) for p in (p1, p2, p3))))
    ref, got = reference(9, examples.attn64), final_state(tmp_path / "ck", 6)
    assert set(got) == set(ref) and any("in_proj_weight" in k for k in ref)
    for k, v in ref.items():
        torch.testing.assert_close(got[k], v, rtol=0, atol=1e-12, msg=k)
    rows = pd.read_csv(tmp_path / "ck" / "slots.csv")
    tp_ranks = [{0, 1}, {0, 2}, {0, 1, 2, 3}]
    for parts, ranks in zip(rows["measured_parts"], tp_ranks):
        timed = {int(d) for d, v in json.loads(parts).items() if v.get("tp_comm", 0.0) > 0}
        assert timed == ranks


def test_attention_shards_and_layouts() -> None:
    """A SelfAttention's shard r of t holds its heads' query, key and value rows (layout
    (0, 3)) and out_proj's columns; cut and join invert each other; the split refuses head
    counts the degree does not divide and dropout, by name."""
    from solver.runtime.tensor_parallel import (
        SelfAttention,
        Split,
        TPSelfAttention,
        cut,
        join,
        local_only,
        problems,
        shard_template,
    )
    torch.manual_seed(0)
    att = SelfAttention(8, 4).double()
    sp = Split(1, 1, 2, (0, 1), {"": "attn"})
    assert sp.layouts(att) == {"in_proj_weight": (0, 3), "in_proj_bias": (0, 3), "out_proj.weight": (1, 1),
                               "out_proj.bias": None}
    shard = shard_template(att, sp)
    assert isinstance(shard, TPSelfAttention) and shard.heads == 2
    w = att.in_proj_weight.detach()
    torch.testing.assert_close(shard.in_proj_weight, torch.cat([w[4:8], w[12:16], w[20:24]]), rtol=0, atol=0)
    torch.testing.assert_close(shard.out_proj.weight, att.out_proj.weight[:, 4:8], rtol=0, atol=0)
    for t in (2, 4):
        torch.testing.assert_close(join([cut(w, (0, 3), t, r) for r in range(t)], (0, 3)), w, rtol=0, atol=0)
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    with local_only():  # each shard's partial output without the all-reduce: their sum is the attention's
        parts = [shard_template(att, Split(1, r, 2, (0, 1), {"": "attn"}))(x) for r in range(2)]
    torch.testing.assert_close(parts[0] + parts[1] - att.out_proj.bias, att(x), rtol=0, atol=1e-13)
    assert problems([SelfAttention(12, 3)], 4, 2) == [
        "layer 4: SelfAttention(12, 3 heads): num_heads 3 is not a multiple of the TP degree 2"]
    assert problems([SelfAttention(8, 4, dropout=0.1)], 0, 2)[0].startswith("layer 0: SelfAttention: dropout 0.1")


def test_profile_measures_shards_at_tp_degrees(tmp_path: Path) -> None:
    """`dynpar profile --tp-degrees 1,2,4` writes one rank's shard at each degree t > 1
    (@tp<t> columns, `# tp_times: shard_compute`): attn64's bytes per rank by hand (float64,
    the whole model split as one stage: Linear(8, 16) gathered, the attention by heads, a
    Megatron pair, Tanh whole, Linear(16, 4) gathered; row-parallel biases whole), seconds
    measured; the planner then prices a TP-2 stage from them plus its collectives. Refused,
    naming the layer or the item: a degree at which a block does not split, a malformed list."""
    from solver.io.workloads import read_workload_csv
    out = tmp_path / "attn.csv"
    assert main(["profile", "solver.runtime.examples:attn64", "--kind", "cpu", "--repeats", "1",
                 "--tp-degrees", "1,2,4", "--tp-mode", "local", "-o", str(out)]) == 0
    assert "# tp_times: shard_compute" in out.read_text()
    wl = read_workload_csv(out, 32, 4)
    assert sorted(wl.tp_variants) == [2, 4]
    whole = [8 * (16 * 8 + 16), 8 * (48 * 16 + 48 + 16 * 16 + 16), 8 * (32 * 16 + 32), 8 * (16 * 32 + 16), 0,
             8 * (4 * 16 + 4)]
    assert list(wl.param_bytes) == whole
    by_hand = {2: [576, 4416, 2176, 2176, 0, 272], 4: [288, 2272, 1088, 1152, 0, 136]}
    for t, var in wl.tp_variants.items():
        assert var.times == "shard_compute" and list(var.param_bytes) == by_hand[t]
        f, b = var.by_micro_batch[4]["cpu"]
        assert len(f) == 6 and all(x > 0 for x in f) and b[1] > 0
        assert not wl.tp_times_include_collectives(t)
    # the Tanh (whole on every rank) saves its whole output; the attention its heads' share
    assert wl.tp_variants[2].stash_bytes[4] == wl.stash_bytes[4]
    assert wl.tp_variants[2].stash_bytes[1] < wl.stash_bytes[1]
    assert main(["profile", "solver.runtime.examples:mlp64", "--kind", "cpu", "--repeats", "1",
                 "--tp-degrees", "8", "-o", str(tmp_path / "m.csv")]) == 2
    assert not (tmp_path / "m.csv").exists()
    from solver.runtime.tp_profile import profile_tp_group, profile_tp_local
    with pytest.raises(ValueError, match=r"tp degree 8: layer 6: Linear\(16, 4\): out_features 4 is not a "
                                         r"multiple of the TP degree 8"):
        profile_tp_local(examples.mlp64().model, torch.zeros(4, 8, dtype=torch.float64), "cpu", 8, 32, 4)
    with pytest.raises(ValueError, match=r"tp degree 8: layer 6: Linear\(16, 4\)"):
        profile_tp_group("solver.runtime.examples:mlp64", "cpu", 8, 32, 4)
    with pytest.raises(ValueError, match=r"tp degree: expected an integer >= 2, got 1"):
        profile_tp_local(examples.mlp64().model, torch.zeros(4, 8, dtype=torch.float64), "cpu", 1, 32, 4)
    assert main(["profile", "solver.runtime.examples:attn64", "--kind", "cpu", "--tp-degrees", "2",
                 "--cpu-quota", "1", "-o", str(tmp_path / "q.csv")]) == 2
    from solver.cli.train import _degrees
    assert _degrees("1,2,4") == (2, 4) and _degrees("") == ()
    with pytest.raises(ValueError, match=r"--tp-degrees: expected comma-separated integers >= 1, got 'x'"):
        _degrees("2,x")


def test_shard_times_price_tp_stages_and_fit_the_factor(tmp_path: Path) -> None:
    """A table with times measured at TP-2 ("shard_compute"): a TP-2 rank's predicted compute
    is its shard's seconds over the unit's factor plus the stage's collectives (not the
    degree-1 seconds over 2); the estimator gives back the machine's factor from the compute
    outside the collectives, and plans without TP price as on the plain table."""
    from dataclasses import replace

    from solver.cost import evaluate
    from solver.model.workload import TPVariant
    from solver.runtime.estimator import estimate, observed_state, predicted_compute, predicted_tp_collectives
    from solver.runtime.tensor_parallel import collective_counts
    st = load_instance(tp_instance(tmp_path, recorded=True)).state(0)
    wl = replace(st.workload, tp_collectives=collective_counts(list(examples.mlp64().model)))
    f1, b1 = wl.measured["cpu"]
    f2, b2 = tuple(1.5 * x for x in f1), tuple(0.9 * x for x in b1)   # shards slower than half the layer
    var = TPVariant(tuple(p / 2 for p in wl.param_bytes), tuple(wl.stash_bytes), {4: {"cpu": (f2, b2)}},
                    times="shard_compute")
    plain = replace(st, workload=wl, tp_collective_latency=1e-3)
    shard = replace(plain, workload=replace(wl, tp_variants={2: var}))
    tp = Plan((Group((0,), (7,), 32, tp_peers=((1,),)),))
    comm = predicted_tp_collectives(tp, shard)
    assert comm[0] == pytest.approx(predicted_tp_collectives(tp, plain)[0], rel=1e-12) and comm[0] > 0
    got = predicted_compute(tp, shard)
    assert got[0] == pytest.approx(32 * (sum(f2) + sum(b2)) + comm[0], rel=1e-12)
    assert predicted_compute(tp, plain)[0] == pytest.approx(32 * (sum(f1) + sum(b1)) / 2 + comm[0], rel=1e-12)
    one = Plan((Group((0,), (7,), 32),))
    assert evaluate(one, shard).batch_time == evaluate(one, plain).batch_time
    present = np.ones(4, dtype=bool)
    truth = observed_state(shard, present, {0: 0.5, 1: 0.5, 2: 1.0, 3: 1.0}, tp_latency=1e-3)
    measured = predicted_compute(tp, truth)
    measured_tp = predicted_tp_collectives(tp, truth)
    est = estimate({}, 0.0, 1.0, tp, shard, present, measured, evaluate(tp, truth).batch_time, None, measured_tp,
                   1e-3)
    assert est.factors[0] == pytest.approx(0.5, rel=1e-9) and est.factors[1] == pytest.approx(0.5, rel=1e-9)
    assert est.tp_latency == pytest.approx(1e-3, rel=1e-9)


def test_profile_times_shards_in_a_live_tp_group(tmp_path: Path) -> None:
    """--tp-mode group (the default): two gloo processes each time their own shard with the
    collectives on, their seconds left out of every pass (the model's 3 row-parallel /
    gathered blocks and the attention all-reduce in forward); the bytes per rank are the
    local mode's, the seconds positive, and the caller's model is not changed."""
    from solver.io.workloads import read_workload_csv
    from solver.runtime.profiler import _time
    from solver.runtime.tensor_parallel import CollectiveClock
    out = tmp_path / "g.csv"
    assert main(["profile", "solver.runtime.examples:attn64", "--kind", "cpu", "--repeats", "1",
                 "--tp-degrees", "2", "-o", str(out)]) == 0
    text = out.read_text()
    assert "--tp-mode group" in text and "# tp_times: shard_compute" in text
    var = read_workload_csv(out, 32, 4).tp_variants[2]
    assert list(var.param_bytes) == [576, 4416, 2176, 2176, 0, 272]
    f, b = var.by_micro_batch[4]["cpu"]
    assert all(x > 0 for x in f) and b[1] > 0
    # the clock's seconds counted during a pass are left out of it
    clock = CollectiveClock()

    def work() -> None:
        clock.seconds += 5.0     # as if a collective of 5 s ran inside the pass
    assert -5.0 < _time(work, 3, exclude=clock) < -4.9


@pytest.mark.parametrize("exc, says", [
    ("exited", "tp degree 2: rank 1 was killed by SIGABRT"),
    ("raised", "tp degree 2: rank 0 raised RuntimeError: gloo connect timed out"),
    ("status", "tp degree 2: rank 1 exited with status 3"),
])
def test_a_failed_tp_group_profile_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture, exc: str, says: str) -> None:
    """A rank of `--tp-mode group` that dies or raises gives `dynpar: error: ...` naming the
    degree, the rank and the cause, not torch's traceback; no layer table is written."""
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException
    made = {"exited": ProcessExitedException("process 1 terminated with signal SIGABRT", 1, 7, -6, "SIGABRT"),
            "raised": ProcessRaisedException("\n-- Process 0 terminated with the following error:\nTraceback...\n"
                                             "RuntimeError: gloo connect timed out\n", 0, 7),
            "status": ProcessExitedException("process 1 terminated with exit code 3", 1, 7, 3)}[exc]

    def fail(*a: object, **k: object) -> None:
        raise made
    monkeypatch.setattr(mp, "start_processes", fail)
    out = tmp_path / "g.csv"
    assert main(["profile", "solver.runtime.examples:attn64", "--kind", "cpu", "--repeats", "1",
                 "--tp-degrees", "2", "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"dynpar: error: {says}" and not out.exists()


def test_constant_buffers_frozen_and_unused_parameters_across_tp_replan_and_resume(tmp_path: Path) -> None:
    """examples.mlp64_frozen_const (non-persistent buffers, a frozen bias, a parameter no
    forward uses; AdamW with weight decay): slot 0 puts the buffers' blocks on a TP-2 stage,
    the re-plan migrates them to plain stages, and a second job resumes from the checkpoint.
    The buffers came back as uninitialised memory after a migration or a resume (2e-2 off, or
    NaN), and the frozen and unused parameters were given zero gradients, so weight decay moved
    them; now every parameter and buffer ends where single-process training ends."""
    inst = load_instance(tp_instance(tmp_path))
    p1 = Plan((Group((0, 1), (4, 7), 24, "gpipe", tp_peers=((2,), ())), Group((3,), (7,), 8)))
    p2 = Plan((Group((3, 0), (2, 7), 16, "1f1b"), Group((1, 2), (5, 7), 16, "gpipe")))
    plans = (plan_to_json(p1), plan_to_json(p2))
    factory = "mlp64_frozen_const"
    launch(inst, TrainConfig(f"solver.runtime.examples:{factory}", 6, str(tmp_path / "ck"), iterations_per_slot=4,
                             plans=plans))
    launch(inst, TrainConfig(f"solver.runtime.examples:{factory}", 8, str(tmp_path / "ck"), iterations_per_slot=4,
                             plans=plans))
    assert_matches(tmp_path / "ck", 8, factory)
    spec = examples.mlp64_frozen_const()
    got = final_state(tmp_path / "ck", 7)
    torch.testing.assert_close(got["0.bias"], spec.model[0].bias.detach(), rtol=0, atol=0)
    torch.testing.assert_close(got["5.unused"], spec.model[5].unused.detach(), rtol=0, atol=0)
