"""A rank's rows of each global batch, on its device.

On the CPU the rows are read when asked for. On a GPU the rows of the next step (same
range) are gathered into pinned host memory by a background thread while the current step
computes, and copied to the device without blocking the host; a request for other rows
(a new plan, a new share) is read at once and the prefetched ones are dropped. The rows
are the same as `Batches.rows` gives: only when they are read changes.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch

from .spec import Batches


class RowFeed:
    """`get(step, start, stop)` -> (inputs, targets) of rows start..stop-1 of batch `step` on
    `device`. close() stops its thread. prefetch: read the next step's rows in the background
    (default: on a GPU; the tests also run it on the CPU, without pinned memory)."""

    def __init__(self, data: Batches, device: torch.device, prefetch: bool | None = None) -> None:
        self.data, self.device = data, device
        self.prefetch = device.type == "cuda" if prefetch is None else bool(prefetch)
        self._pin = device.type == "cuda"
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="dynpar-rows") if self.prefetch else None
        self._ahead: tuple[tuple[int, int, int], Future] | None = None
        self.hits = 0
        """Requests answered from the rows read ahead."""

    def _read(self, step: int, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.data.rows(step, start, stop)
        return (x.pin_memory(), y.pin_memory()) if self._pin else (x, y)

    def get(self, step: int, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.prefetch:
            return self.data.rows(step, start, stop)
        key = (step, start, stop)
        if self._ahead is not None and self._ahead[0] == key:
            x, y = self._ahead[1].result()
            self.hits += 1
        else:
            x, y = self._read(*key)
        if self._pool is not None:
            self._ahead = ((step + 1, start, stop), self._pool.submit(self._read, step + 1, start, stop))
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool, self._ahead = None, None