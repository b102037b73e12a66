"""A transformer block's saved activation bytes: the architecture formula against the paper's
figure and against torch's saved-tensor hooks (CPU, float32 and bfloat16)."""
from __future__ import annotations

import pytest

from solver.io.transformer import block_saved_bytes, korthikanti_bytes


@pytest.mark.parametrize("s,h,a,b", [(2048, 2560, 32, 1), (8192, 4096, 32, 2), (128, 768, 12, 4)])
def test_formula_reduces_to_the_papers_figure(s, h, a, b):
    assert block_saved_bytes(s, h, a, b) == pytest.approx(korthikanti_bytes(s, h, a, b), rel=1e-12)
    assert korthikanti_bytes(s, h, a, b) == s * b * h * 34 + 5 * a * s * s * b


def test_formula_rejects_bad_shapes():
    with pytest.raises(ValueError, match="heads"):
        block_saved_bytes(16, 10, 3)
    with pytest.raises(ValueError, match="seq"):
        block_saved_bytes(0, 8, 2)


@pytest.mark.torch
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("dropout", [True, False])
def test_saved_tensor_hooks_equal_formula(dtype_name, dropout):
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional
    dtype = getattr(torch, dtype_name)
    s, b, h, a = 32, 2, 64, 4
    p = 0.1 if dropout else 0.0

    class Block(nn.Module):
        """Pre-norm GPT block written as the paper counts it: separate Q, K, V projections."""

        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
            self.q, self.k, self.v, self.o = (nn.Linear(h, h) for _ in range(4))
            self.fc1, self.fc2, self.act = nn.Linear(h, 4 * h), nn.Linear(4 * h, h), nn.GELU()

        def drop(self, t):
            return F.dropout(t, p, True) if dropout else t

        def forward(self, x):
            d = h // a
            y = self.ln1(x)
            q, k, v = (t.view(b, s, a, d).transpose(1, 2).contiguous() for t in (self.q(y), self.k(y), self.v(y)))
            att = self.drop(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * d ** -0.5, -1))
            x = x + self.drop(self.o(torch.matmul(att, v).transpose(1, 2).reshape(b, s, h)))
            return x + self.drop(self.fc2(self.act(self.fc1(self.ln2(x)))))

    torch.manual_seed(0)
    block = Block().to(dtype)
    params = {q.untyped_storage().data_ptr() for q in block.parameters()}
    storages: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            storages[st.data_ptr()] = st.nbytes()
        return t

    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x).sum().backward()
    e = torch.tensor([], dtype=dtype).element_size()
    # torch's CPU dropout keeps a mask of the activation dtype; layer-norm statistics are in it too
    assert sum(storages.values()) == block_saved_bytes(s, h, a, b, act_bytes=e, mask_bytes=e,
                                                       stat_bytes=e, dropout=dropout)
