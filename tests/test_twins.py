"""Twin groups (SlotCache.signature): groups of like devices on like links share cut DPs and
group coefficients. A twin's numbers must be the group's own, computed afresh."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
from hypothesis import given, strategies as st

from solver.cost.pipeline import group_coeffs
from solver.io.instance import load_instance
from solver.solve.options import SolveOptions
from solver.solve.scoring import Scorer
from solver.subproblems.cache import SlotCache
from solver.subproblems.cuts import frontier_cuts, min_bottleneck_cuts

LAYERS = "name,fwd_flops,bwd_flops,out_bytes,stash_bytes,param_bytes\n" + "".join(
    f"l{i},{(3 + i % 4) * 1e9},{(6 + i % 3) * 1e9},{(1 + i % 5) * 1e6},{(2 + i % 3) * 1e6},{(1 + i % 2) * 1e9}\n"
    for i in range(12))


def cluster(tmp_path: Path):
    """Four servers: A and B alike (2 V100 + 2 T4 each, 16 GB, a 10 Gb/s NIC shared by their
    senders), C (2 V100 of 32 GB, the same NIC), D (2 V100 of 16 GB, a 40 Gb/s NIC); memory
    binds for large shares."""
    (tmp_path / "layers.csv").write_text(LAYERS)
    body = ['name = "twins"', "num_slots = 1", "[workload]", 'model = "layers.csv"', "batch = 64",
            "micro_batch = 4", "[network]", "intra_server_gbps = 200.0", "inter_server_gbps = 25.0",
            "intra_server_latency_ms = 0.001", "inter_server_latency_ms = 0.01", ""]
    devs = [(f"{s}{i}", kind, s) for s in "AB" for i, kind in enumerate(["V100", "V100", "T4", "T4"])]
    devs += [("C0", "V100", "C"), ("C1", "V100", "C"), ("D0", "V100", "D"), ("D1", "V100", "D")]
    for name, kind, srv in devs:
        body += ["[[devices]]", f'name = "{name}"', f'kind = "{kind}"', f'server = "{srv}"',
                 f"memory_gb = {32 if srv == 'C' else 16}", ""]
    for srv, nic in (("A", 10), ("B", 10), ("C", 10), ("D", 40)):
        body += ["[[servers]]", f'name = "{srv}"', f"nic_gbps = {nic}", ""]
    body += ["[[budgets]]", 'kind = "money"', "limit = 1000.0", ""]
    (tmp_path / "twins.toml").write_text("\n".join(body))
    return load_instance(tmp_path / "twins.toml").state(0)


def groups(n: int, rng: np.random.Generator, count: int) -> list[tuple[int, ...]]:
    """Random ordered groups of 2-4 devices, each followed by its mirror (servers A and B
    swapped: a twin, whose numbers come from the first one's)."""
    out = []
    for _ in range(count):
        k = int(rng.integers(2, 5))
        g = tuple(int(x) for x in rng.permutation(n)[:k])
        out += [g, tuple((x + 4) % 8 if x < 8 else x for x in g)]
    return out


def test_signature_tells_unlike_groups_apart(tmp_path) -> None:
    state = cluster(tmp_path)
    cache = SlotCache(state)
    a0, a1, a2, b0, b1, c0, d0 = 0, 1, 2, 4, 5, 8, 10
    assert cache.signature((a0, a1)) == cache.signature((b0, b1))      # like servers, like kinds
    assert cache.signature((a0, a1)) != cache.signature((a0, a2))      # a T4 is not a V100
    assert cache.signature((a0, b0)) != cache.signature((a0, a1))      # across servers vs inside one
    assert cache.signature((a0, c0)) != cache.signature((a0, b0))      # C's memory differs
    assert cache.signature((a0, d0)) != cache.signature((a0, b0))      # D's NIC differs
    assert cache.signature((a0, a1, b0)) != cache.signature((a0, b0, b1))   # where the server changes


@given(st.integers(0, 2**31))
def test_twin_coefficients_equal_their_own(seed) -> None:
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        state = cluster(Path(d))
    cache = SlotCache(state)
    rng = np.random.default_rng(seed)
    for dev in groups(state.n, rng, 30):
        c = min_bottleneck_cuts(state, dev, None, cache=cache)
        if c is None:
            continue
        for schedule, recompute in itertools.product(("gpipe", "1f1b"), (False, True)):
            got = cache.group_coeffs(dev, c, schedule, recompute)
            own = group_coeffs(state, dev, c, schedule, recompute)
            assert got.devices == own.devices == dev
            assert (got.alpha, got.beta, got.cap) == (own.alpha, own.beta, own.cap)
            for x, y in ((got.fwd, own.fwd), (got.bwd, own.bwd), (got.lam, own.lam),
                         (got.busy_j_per_sample, own.busy_j_per_sample)):
                assert np.array_equal(x, y)


@given(st.integers(0, 2**31))
def test_twin_cuts_equal_their_own(seed) -> None:
    """The Scorer's cuts and frontiers (twins shared) against fresh DPs on a fresh cache, at
    one micro-batch and at shares where memory binds."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        state = cluster(Path(d))
    sc = Scorer(state, np.zeros(1), 1.0, SolveOptions(), None)
    rng = np.random.default_rng(seed)
    for dev in groups(state.n, rng, 30):
        share = [None, 8, 24, 64][int(rng.integers(0, 4))]
        variant = [("gpipe", False), ("1f1b", False), ("gpipe", True)][int(rng.integers(0, 3))]
        own = min_bottleneck_cuts(state, dev, share, cache=SlotCache(state), schedule=variant[0],
                                  recompute=variant[1])
        assert sc.cuts(dev, share, None, variant) == own
        assert sc.frontier(dev, share, None, variant) == frontier_cuts(
            state, dev, sc.opt.frontier, share, cache=SlotCache(state), relax=sc.tuning.frontier_relax,
            seeds=sc.tuning.frontier_seeds, schedule=variant[0], recompute=variant[1])
