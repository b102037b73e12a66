"""A transformer block's saved activation bytes: the architecture formula against the paper's
figure and against torch's saved-tensor hooks (CPU, float32 and bfloat16)."""
from __future__ import annotations

import pytest

from solver.io.transformer import block_saved_bytes, korthikanti_bytes, llama_block_saved_bytes


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


def test_attention_dropout_off_keeps_one_score_tensor_and_no_score_mask():
    s, h, a, b, e, m = 64, 32, 4, 2, 4.0, 1.0
    both = block_saved_bytes(s, h, a, b, e, m, dropout=True)
    hidden_only = block_saved_bytes(s, h, a, b, e, m, dropout=True, attention_dropout=False)
    assert both - hidden_only == e * a * s * s * b + m * a * s * s * b
    assert hidden_only == e * (16 * s * b * h + a * s * s * b) + m * 2 * s * b * h


@pytest.mark.torch
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_llama_block_saved_tensor_hooks_equal_formula(dtype_name):
    """A Llama-style block in Megatron-LM's layout ([s, b, ...] tensors, one fused Q/K/V
    projection, rotary embeddings, attention products by bmm on views, SwiGLU): the storages its
    autograd graph saves (parameters and the rotary tables left out) equal the formula."""
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional
    dtype = getattr(torch, dtype_name)
    s, b, h, a, f = 16, 2, 32, 4, 48
    d = h // a

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1, self.w2 = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))
            self.qkv, self.o = nn.Linear(h, 3 * h, bias=False), nn.Linear(h, h, bias=False)
            self.fc1, self.fc2 = nn.Linear(h, 2 * f, bias=False), nn.Linear(f, h, bias=False)
            ang = torch.arange(s)[:, None] * (1e-2 ** (torch.arange(d) / d))[None, :]
            self.register_buffer("cos", ang.cos()[:, None, None, :].to(dtype))
            self.register_buffer("sin", ang.sin()[:, None, None, :].to(dtype))

        @staticmethod
        def rms(x, w):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

        def rope(self, t):
            t1, t2 = t.chunk(2, dim=-1)
            return t * self.cos + torch.cat((-t2, t1), dim=-1) * self.sin

        def forward(self, x):                                        # x: [s, b, h]
            mixed = self.qkv(self.rms(x, self.w1)).view(s, b, a, 3 * d)
            q, k, v = mixed.split(d, dim=-1)
            q, k = self.rope(q), self.rope(k)
            q, k, v = (t.reshape(s, b * a, d).transpose(0, 1) for t in (q, k, v))   # views
            p = torch.softmax(torch.bmm(q, k.transpose(1, 2)) * d ** -0.5, dim=-1)
            ctx = torch.bmm(p, v).transpose(0, 1).reshape(s, b, h)
            x = x + self.o(ctx)
            g, up = self.fc1(self.rms(x, self.w2)).chunk(2, dim=-1)
            return x + self.fc2(F.silu(g) * up)

    torch.manual_seed(0)
    block = Block().to(dtype)
    skip = {t.untyped_storage().data_ptr() for t in [*block.parameters(), *block.buffers()]}
    storages: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            storages[st.data_ptr()] = st.nbytes()
        return t

    x = torch.randn(s, b, h, dtype=dtype, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x).sum().backward()
    e = torch.tensor([], dtype=dtype).element_size()
    assert sum(storages.values()) == llama_block_saved_bytes(s, h, a, f, b, act_bytes=e, stat_bytes=e)


def test_formulas_reproduce_sailors_block_bytes(shared_data):
    """Sailor's measured bytes per block (llm_info.json, tp 1, one sample) from the architecture,
    as the profiled fp32 run had it (docs/MODEL.md section 5): GPT-Neo 2.7B (20 heads, hidden
    dropout, no attention dropout) and the profiled LLAMA-3-8 block (SwiGLU of width 4 h)."""
    import json

    info = json.loads((shared_data / "profiles" / "sailor" / "llm_info.json").read_text())
    neo, llama = info["GPT-Neo-2.7"]["1"]["1"], info["LLAMA-3-8"]["1"]["1"]
    for blk, (s, h) in ((neo, (2048, 2560)), (llama, (8192, 4096))):
        assert blk["act_output_floats"] == s * h and blk["act_output_bytes"] == 4 * s * h     # fp32 tensors
    assert llama["params_floats"] == 16 * 4096 ** 2 + 15 * 4096                            # f = 4 h, no grouped K/V
    assert block_saved_bytes(2048, 2560, 20, act_bytes=4, mask_bytes=1, stat_bytes=4, dropout=True,
                             attention_dropout=False) == neo["act_mem_bytes"]
    assert llama_block_saved_bytes(8192, 4096, 32, 4 * 4096, act_bytes=4, stat_bytes=4) == llama["act_mem_bytes"]
