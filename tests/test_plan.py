"""Plan.validate: every constraint name it can report, on hand-made and random plans.

`random_plan` (a valid plan of a state) is also used by tests/test_costmodel.py.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, strategies as st

from solver.model import memory_use
from solver.model import Group, Plan
from solver.io.synthetic import random_state

CONSTRAINTS = ("nonempty", "cuts_match_stages", "known_device", "device_once", "available",
               "stage_nonempty", "layers_covered", "share_positive", "share_multiple", "shares_sum",
               "memory")


def random_plan(rng: np.random.Generator, state) -> Plan:
    """A random valid plan: a random subset of the available devices in random order,
    split into groups of at most L devices, random increasing cuts ending at L, and
    random positive shares in whole micro-batches summing to B (memory is not checked:
    synthetic states have room for any plan)."""
    L, B, u = state.workload.num_layers, state.workload.batch, state.workload.micro_batch
    avail = list(rng.permutation(state.available_indices))
    chosen = avail[: int(rng.integers(1, len(avail) + 1))]
    m = int(rng.integers(1, min(len(chosen), B // u) + 1))
    bounds = sorted(rng.choice(np.arange(1, len(chosen)), size=m - 1, replace=False)) if m > 1 else []
    members = [chosen[a:b][:L] for a, b in zip([0, *bounds], [*bounds, len(chosen)])]
    n_mb = B // u                                  # micro-batches to hand out, >= 1 per group
    split = sorted(rng.choice(np.arange(1, n_mb), size=m - 1, replace=False)) if m > 1 else []
    counts = np.diff([0, *split, n_mb])
    groups = []
    for devs, c in zip(members, counts):
        k = len(devs)
        cuts = sorted(int(x) for x in rng.choice(np.arange(1, L), size=k - 1, replace=False)) + [L]
        groups.append(Group(tuple(int(d) for d in devs), tuple(cuts), int(c) * u))
    return Plan(tuple(groups))


def names(plan: Plan, state) -> set[str]:
    return {v.constraint for v in plan.validate(state)}


def with_memory(state, device: int, memory_bytes: float):
    devs = list(state.devices)
    devs[device] = dataclasses.replace(devs[device], memory_bytes=memory_bytes)
    return dataclasses.replace(state, devices=tuple(devs))


def with_unavailable(state, device: int):
    avail = np.array(state.available, dtype=bool)
    avail[device] = False
    return dataclasses.replace(state, available=avail)


@pytest.fixture
def state():
    """4 available devices, 8 layers, B = 64, u = 4."""
    return random_state(7, n=4, L=8, batch=64, micro_batch=4)


def test_hand_made_valid_plan(state):
    plan = Plan((Group((0, 1), (3, 8), 32), Group((2,), (8,), 16), Group((3,), (8,), 16)))
    assert plan.validate(state) == []


@pytest.mark.parametrize("broken, plan", [
    ("nonempty", Plan(())),
    ("nonempty", Plan((Group((), (), 0), Group((0,), (8,), 64)))),
    ("cuts_match_stages", Plan((Group((0, 1), (8,), 64),))),
    ("known_device", Plan((Group((0, 4), (3, 8), 64),))),
    ("known_device", Plan((Group((-1,), (8,), 64),))),
    ("device_once", Plan((Group((0, 1), (3, 8), 32), Group((1,), (8,), 32)))),
    ("stage_nonempty", Plan((Group((0, 1, 2), (3, 3, 8), 64),))),
    ("stage_nonempty", Plan((Group((0, 1), (0, 8), 64),))),
    ("layers_covered", Plan((Group((0, 1), (3, 7), 64),))),
    ("layers_covered", Plan((Group((0,), (9,), 64),))),
    ("share_positive", Plan((Group((0,), (8,), 0), Group((1,), (8,), 64)))),
    ("share_multiple", Plan((Group((0,), (8,), 30), Group((1,), (8,), 34)))),
    ("shares_sum", Plan((Group((0,), (8,), 32), Group((1,), (8,), 28)))),
])
def test_each_constraint_alone(state, broken, plan):
    assert names(plan, state) == {broken}
    assert all(str(v).startswith(broken + ": ") for v in plan.validate(state))


def test_available_and_memory_alone(state):
    plan = Plan((Group((0, 1), (3, 8), 32), Group((2, 3), (5, 8), 32)))
    assert names(plan, with_unavailable(state, 2)) == {"available"}
    need = memory_use(state, (2, 3), (5, 8), 32)
    assert names(plan, with_memory(state, 3, need[1] * 0.99)) == {"memory"}
    assert names(plan, with_memory(state, 3, need[1])) == set()      # exactly full is fine


# A mutation of a valid plan (or of its state) and the one name it must produce.
def _drop_cut(p, s, rng):
    g = p.groups[0]
    return Plan((dataclasses.replace(g, cuts=g.cuts[1:] if len(g.cuts) > 1 else (*g.cuts, g.cuts[-1])),
                 *p.groups[1:])), s, "cuts_match_stages"


def _unknown_device(p, s, rng):
    g = p.groups[-1]
    return Plan((*p.groups[:-1], dataclasses.replace(g, devices=(*g.devices[:-1], s.n)))), s, "known_device"


def _duplicate_device(p, s, rng):
    g = p.groups[-1]
    d = p.devices[0]
    if len(p.devices) == 1:                       # one device in all: duplicate it inside its group
        return Plan((Group((d, d), (1, g.cuts[-1]), g.share),)), s, "device_once"
    return Plan((*p.groups[:-1], dataclasses.replace(g, devices=(*g.devices[:-1], d)))), s, "device_once"


def _unavailable(p, s, rng):
    return p, with_unavailable(s, int(rng.choice(p.devices))), "available"


def _empty_stage(p, s, rng):
    multi = [i for i, g in enumerate(p.groups) if g.num_stages > 1]
    if not multi:
        return None                                 # one stage always ends at L
    groups = list(p.groups)
    g = groups[multi[0]]
    groups[multi[0]] = dataclasses.replace(g, cuts=(0, *g.cuts[1:]))
    return Plan(tuple(groups)), s, "stage_nonempty"


def _uncovered(p, s, rng):
    g = p.groups[-1]
    return Plan((*p.groups[:-1], dataclasses.replace(g, cuts=(*g.cuts[:-1], g.cuts[-1] + 1)))), s, "layers_covered"


def _zero_share(p, s, rng):
    if len(p.groups) == 1:
        return None
    a, b = p.groups[0], p.groups[1]
    return Plan((dataclasses.replace(a, share=0), dataclasses.replace(b, share=b.share + a.share),
                 *p.groups[2:])), s, "share_positive"


def _odd_share(p, s, rng):
    if len(p.groups) == 1 or p.groups[0].share == s.workload.micro_batch or s.workload.micro_batch == 1:
        return None                                 # shares_sum / share_positive / nothing to break
    a, b = p.groups[0], p.groups[1]
    return Plan((dataclasses.replace(a, share=a.share - 1), dataclasses.replace(b, share=b.share + 1),
                 *p.groups[2:])), s, "share_multiple"


def _extra_share(p, s, rng):
    g = p.groups[0]
    return Plan((dataclasses.replace(g, share=g.share + s.workload.micro_batch), *p.groups[1:])), s, "shares_sum"


def _small_memory(p, s, rng):
    g = p.groups[int(rng.integers(len(p.groups)))]
    j = int(rng.integers(len(g.devices)))
    need = memory_use(s, g.devices, g.cuts, g.share)[j]
    return p, with_memory(s, g.devices[j], need * 0.5), "memory"


MUTATIONS = [_drop_cut, _unknown_device, _duplicate_device, _unavailable, _empty_stage, _uncovered,
             _zero_share, _odd_share, _extra_share, _small_memory]


@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(2, 8),
       st.sampled_from([(16, 4), (24, 2), (12, 1), (8, 8)]), st.floats(0.3, 1.0))
def test_random_valid_plans_and_mutations(seed, n, L, batch_u, p_avail):
    B, u = batch_u
    state = random_state(seed, n=n, L=L, batch=B, micro_batch=u, p_available=p_avail)
    rng = np.random.default_rng(seed)
    plan = random_plan(rng, state)
    assert plan.validate(state) == [], plan.describe(state)
    for mutate in MUTATIONS:
        out = mutate(plan, state, rng)
        if out is None:
            continue
        p2, s2, expected = out
        assert names(p2, s2) == {expected}, (mutate.__name__, p2, p2.validate(s2))
