"""Python's cyclic garbage collector paused for the length of one solve (SolveOptions.pause_gc).

A solve creates tens of thousands of short-lived tuples, dicts and small objects, almost none of
them in reference cycles: reference counting frees them. Each pass of the cyclic collector
still walks every tracked object of the process (numba, numpy and the caller's own objects:
over 100 000 of them): on Sailor's 32-GPU case the class search took 2-18% longer (median
pair, between runs) and 7-12% longer in the mean with the collector running, 1-2% on 8 and
16 devices (benchmarks/bench_gc.py).
Pausing it is safe for memory here: whatever cycles the solve leaves are collected at the
collector's next pass after the solve.

The collector is re-enabled on exit only if this pause disabled it: nested solves (one solve
calling another) and solves in other threads leave it as they found it, and a caller that
disabled it keeps it disabled.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused(on: bool = True) -> Iterator[None]:
    """Disable the cyclic collector inside the block when `on` and it is enabled; enable it
    again on exit (normal or by an exception) if it was enabled on entry."""
    was = on and gc.isenabled()
    if was:
        gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
