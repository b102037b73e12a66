"""Compiled least-ratio searches of the slot bound (`solve.bounds`): Dinkelbach's iteration for
min (V + sum_U w) / sum_U theta over device sets U of exactly s devices, or holding every
holder it gains from and at most j non-holders.

Each step takes lambda = (V + sum_U w) / sum_U theta of the current set, then the set of least
reduced sum w - lambda theta under the family's rule, until no set has a negative
V + sum (w - lambda theta) or the ratio stops falling (at most 200 steps). The sets are picked
by stable sorts (ties: the lower index) and every sum is numpy's pairwise sum over the set in
its order (`cost.pipeline.npsum`), so the ratios are the numpy forms' floats.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..cost.pipeline import npsum

MAX_STEPS = 200


@njit(cache=True, error_model="numpy")
def _sum_at(x: np.ndarray, idx: np.ndarray) -> float:
    """npsum of x[idx] (in idx's order)."""
    buf = np.empty(idx.shape[0])
    for i in range(idx.shape[0]):
        buf[i] = x[idx[i]]
    return npsum(buf)


@njit(cache=True, error_model="numpy")
def _ratio(V: float, w: np.ndarray, theta: np.ndarray, idx: np.ndarray) -> float:
    return (V + _sum_at(w, idx)) / _sum_at(theta, idx)


@njit(cache=True, error_model="numpy")
def _step(V: float, w: np.ndarray, theta: np.ndarray, red: np.ndarray, take: np.ndarray, lam: float) -> float:
    """The next lambda from the set `take` of least reduced sum, or lam itself where the
    iteration stops there (no set, a non-negative V + sum red, or no fall)."""
    if take.shape[0] == 0 or V + _sum_at(red, take) >= 0:
        return lam
    nxt = _ratio(V, w, theta, take)
    return nxt if nxt < lam else lam


@njit(cache=True, error_model="numpy")
def exact_ratio(V: float, w: np.ndarray, theta: np.ndarray, s: int, start: float, has_start: bool) -> float:
    """min over sets of exactly s devices of (V + sum w) / sum theta: the first set the s least
    w / theta (or, with has_start, the s least w - start theta); each step the s least
    w - lambda theta."""
    key = w - start * theta if has_start else w / theta
    lam = _ratio(V, w, theta, np.argsort(key, kind="mergesort")[:s])
    for _ in range(MAX_STEPS):
        red = w - lam * theta
        nxt = _step(V, w, theta, red, np.argsort(red, kind="mergesort")[:s], lam)
        if nxt == lam:
            break
        lam = nxt
    return lam


@njit(cache=True, error_model="numpy")
def least_ratio(V: float, w: np.ndarray, theta: np.ndarray, holder: np.ndarray, j: int) -> float:
    """min over non-empty sets with at most j non-holders of (V + sum w) / sum theta: the first
    set every holder and the j non-holders of largest theta; each step the holders and the j
    least non-holders by w - lambda theta, those with a negative reduced value; inf where there
    is no holder and j is 0."""
    hold = np.flatnonzero(holder)
    non = np.flatnonzero(~holder)
    if hold.shape[0] == 0 and j == 0:
        return np.inf
    jn = min(j, non.shape[0])
    first = np.concatenate((hold, non[np.argsort(-theta[non], kind="mergesort")[:jn]]))
    lam = _ratio(V, w, theta, first)
    for _ in range(MAX_STEPS):
        red = w - lam * theta
        picked = np.concatenate((hold, non[np.argsort(red[non], kind="mergesort")[:jn]]))
        take = picked[red[picked] < 0]
        nxt = _step(V, w, theta, red, take, lam)
        if nxt == lam:
            break
        lam = nxt
    return lam
