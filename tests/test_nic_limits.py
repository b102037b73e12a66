"""model.network.effective_bandwidth: the plain-Python NIC limits of short transfer lists give
the numpy path's floats exactly (fits, undeclared NICs, weights, NaN fits)."""
import numpy as np
from hypothesis import given, settings, strategies as st

from solver.model import network as N


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_short_lists_match_the_numpy_path(seed) -> None:
    rng = np.random.default_rng(seed)
    n, S = int(rng.integers(2, 24)), int(rng.integers(1, 6))
    fit = None if rng.random() < 0.5 else rng.normal(size=(n, n, 3))
    if fit is not None:
        fit[rng.random((n, n)) < 0.3] = np.nan
    net = N.Network(server=rng.integers(0, S, n), server_names=tuple(f"s{i}" for i in range(S)),
                    nic=rng.choice([np.inf, 1e9, 2.5e9, 6e9], S), fit=fit)
    bw = rng.uniform(1e8, 1e10, (n, n))
    k = int(rng.integers(1, 40))
    src, dst, msg = rng.integers(0, n, k), rng.integers(0, n, k), rng.uniform(1e3, 1e8, k)
    weights = None if rng.random() < 0.5 else rng.integers(1, 5, n).astype(float)
    fast = N.effective_bandwidth(net, bw, src, dst, msg, weights)
    keep = N.SMALL
    try:
        N.SMALL = -1                    # every list through the numpy path
        slow = N.effective_bandwidth(net, bw, src, dst, msg, weights)
    finally:
        N.SMALL = keep
    assert np.array_equal(fast, slow, equal_nan=True)
