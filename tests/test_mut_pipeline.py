"""Mutation-audit tests for cost.pipeline: boundary transfers use the link in the direction
the activations travel (stage j's device -> stage j+1's), on asymmetric links."""
from __future__ import annotations

import numpy as np
import pytest

from solver.cost.pipeline import group_coeffs, stage_times
from solver.model import Layer
from tests.test_mut_sync import links_state  # noqa: E402


def _state(bw, lat, u=2):
    return links_state(tuple(Layer(f"l{i}", 1e9, 2e9, 1e6 * (i + 1), 1e6, 1e6) for i in range(3)), bw, lat, u)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_boundary_seconds_use_the_forward_direction_of_each_link(schedule):
    """Devices 0 -> 1 -> 2, cuts after layers 1 and 2. Link 0->1 is 1e9 B/s but 1->0 only 1e6;
    link 1->2 is 1e8 B/s, 2->1 1e10. By hand: lam_0 = o_1 / 1e9 + lat / u, lam_1 = o_2 / 1e8 + lat / u
    (o_1 = 1 MB, o_2 = 2 MB per sample, u = 2)."""
    bw = [[0, 1e9, 1e9], [1e6, 0, 1e8], [1e9, 1e10, 0]]
    lat = [[0, 1e-3, 1e-3], [2e-3, 0, 3e-3], [1e-3, 4e-3, 0]]
    state = _state(bw, lat)
    want = np.array([1e6 / 1e9 + 1e-3 / 2, 2e6 / 1e8 + 3e-3 / 2])
    gc = group_coeffs(state, (0, 1, 2), (1, 2, 3), schedule)
    assert gc.lam == pytest.approx(want, rel=1e-12)
    assert stage_times(state, (0, 1, 2), (1, 2, 3))[2] == pytest.approx(want, rel=1e-12)
