"""SolveOptions.pause_gc: the collector is paused during a solve and left as it was found."""
import gc

import pytest

from solver import SolveOptions, solve_slot
from solver.io.synthetic import random_state
from solver.solve import gc_pause


def test_collector_paused_inside_and_restored_after():
    assert gc.isenabled()
    with gc_pause.paused():
        assert not gc.isenabled()
        with gc_pause.paused():             # nested: the inner pause leaves it to the outer
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with gc_pause.paused(False):
        assert gc.isenabled()


def test_restored_on_error_and_a_caller_disabled_collector_kept():
    with pytest.raises(RuntimeError):
        with gc_pause.paused():
            raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_pause.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_solve_slot_leaves_the_collector_enabled_and_answers_alike():
    st = random_state(4242, n=5, L=8)
    on = solve_slot(st, V=1.0)
    assert gc.isenabled()
    off = solve_slot(random_state(4242, n=5, L=8), V=1.0, options=SolveOptions(pause_gc=False))
    assert on.plan == off.plan and on.objective == off.objective
    with pytest.raises(ValueError):         # an error inside the solve: still restored
        solve_slot(st, V=-1.0)
    assert gc.isenabled()
