"""A one-stage group accumulates micro-batch by micro-batch (runtime.accumulate): the
schedule model.memory charges (one micro-batch of activations live), the full-batch
gradient, and the emulation knobs (repeat, pad) leave the gradient unchanged."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from solver.runtime.layout import StageRole  # noqa: E402
from solver.runtime.pipeline import Pad, pipeline_step  # noqa: E402

CPU = torch.device("cpu")


def _model() -> nn.Sequential:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 2)).double()


def _data(n: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    return torch.randn(n, 5, generator=g, dtype=torch.float64), torch.randn(n, 2, generator=g, dtype=torch.float64)


def _run(model: nn.Sequential, x, y, share: int, batch: int, u: int, **kw) -> tuple[float, float]:
    role = StageRole(0, 0, 0, len(model), None, None, share, 0)
    return pipeline_step(role, dict(enumerate(model)), x, y, nn.MSELoss(), u, batch, (5,), torch.float64, CPU,
                         step=0, **kw)


def test_one_stage_alternates_forward_and_backward_and_keeps_the_full_batch_gradient() -> None:
    model = _model()
    x, y = _data()
    events: list[str] = []
    model[2].register_forward_hook(lambda *_: events.append("F"))
    model[2].register_full_backward_hook(lambda *_: events.append("B"))
    secs, zero = _run(model, x, y, 12, 24, 4)
    assert events == ["F", "B"] * 3       # u = 4 of a share of 12: three micro-batches, one live at a time
    assert secs > 0 and zero == 0.0
    ref = _model()
    (nn.functional.mse_loss(ref(x), y) * 12 / 24).backward()   # share / batch: the all-reduce's factor
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-14)


@pytest.mark.parametrize("share,u", [(12, 5), (7, 7), (1, 4)])
def test_uneven_micro_batches_repeat_and_pad_leave_the_gradient_unchanged(share: int, u: int) -> None:
    x, y = _data(share)
    plain, emulated = _model(), _model()
    _run(plain, x, y, share, 16, u)
    _run(emulated, x, y, share, 16, u, repeat=3, pad=Pad(1e-5, 1e-5))
    ref = _model()
    (nn.functional.mse_loss(ref(x), y) * share / 16).backward()
    for p, q, r in zip(plain.parameters(), emulated.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, r.grad, rtol=0, atol=1e-14)
        torch.testing.assert_close(q.grad, r.grad, rtol=0, atol=1e-14)


def test_tensor_dataset_rows_at_once_equal_item_by_item_and_subclasses_keep_their_items() -> None:
    """Batches.rows indexes a plain TensorDataset at once (wrapping around its end) with the
    rows and dtypes item-by-item reading gives; a subclass's own __getitem__ is still used."""
    from torch.utils.data import TensorDataset

    from solver.runtime.spec import Batches

    class Items:
        def __init__(self, d) -> None:
            self.d = d

        def __len__(self) -> int:
            return len(self.d)

        def __getitem__(self, j):
            return self.d[j]

    class Doubled(TensorDataset):
        def __getitem__(self, j):
            x, y = super().__getitem__(j)
            return 2 * x, y

    g = torch.Generator().manual_seed(5)
    d = TensorDataset(torch.randn(50, 3, 2, generator=g), torch.randint(0, 9, (50,), generator=g))
    for i, a, b in [(0, 0, 16), (3, 5, 16), (7, 0, 1)]:
        fast, slow = Batches(d, 16).rows(i, a, b), Batches(Items(d), 16).rows(i, a, b)
        for f, s in zip(fast, slow):
            assert torch.equal(f, s) and f.dtype == s.dtype
    x, _ = Batches(Doubled(*d.tensors), 16).rows(1, 0, 4)
    assert torch.equal(x, 2 * Batches(d, 16).rows(1, 0, 4)[0])


def test_row_feed_read_ahead_gives_the_same_rows():
    """The GPU path of runtime.feed.RowFeed (the next step's rows read by a thread), run on
    the CPU: every request, in order or not, gets the rows Batches.rows gives, and steps
    asked for in order are served from the rows read ahead."""
    from torch.utils.data import TensorDataset

    from solver.runtime.feed import RowFeed
    from solver.runtime.spec import Batches
    d = TensorDataset(torch.arange(200.0).reshape(50, 4), torch.arange(50))
    data = Batches(d, 16)
    feed = RowFeed(data, torch.device("cpu"), prefetch=True)
    try:
        asks = [(0, 0, 6), (1, 0, 6), (2, 0, 6), (2, 6, 16), (3, 6, 16), (7, 0, 16), (8, 0, 16), (8, 0, 16)]
        for step, a, b in asks:
            x, y = feed.get(step, a, b)
            want = data.rows(step, a, b)
            assert torch.equal(x, want[0]) and torch.equal(y, want[1])
        assert feed.hits == 4       # steps 1, 2, 3 and 8 were read ahead; the others were not asked for in turn
    finally:
        feed.close()
    assert RowFeed(data, torch.device("cpu")).prefetch is False
