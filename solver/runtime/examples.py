"""Small training jobs for `dynpar train --model solver.runtime.examples:NAME` (tests, README).

Each factory returns a TrainSpec whose data is a map-style dataset (any global batch).
Deterministic: the same parameters and samples in every process.
"""
from __future__ import annotations

import functools
import os

import torch
from torch import nn
from torch.utils.data import TensorDataset

from .spec import TrainSpec


def _teacher(n: int, d_in: int, d_out: int, dtype: torch.dtype, seed: int = 1) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g, dtype=dtype)
    w = torch.randn(d_in, d_out, generator=g, dtype=dtype)
    return TensorDataset(x, torch.tanh(x @ w))


def mlp64() -> TrainSpec:
    """A 7-block float64 MLP (8-32-32-16-4, Tanh between), SGD with momentum 0.9, lr 0.05,
    mean-squared error on 256 teacher samples."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(),
                          nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 4)).double()
    return TrainSpec(model, nn.MSELoss(), functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9),
                     _teacher(256, 8, 4, torch.float64))


def mlp64_adam() -> TrainSpec:
    """mlp64 with Adam (lr 1e-2)."""
    spec = mlp64()
    return TrainSpec(spec.model, spec.loss, functools.partial(torch.optim.Adam, lr=1e-2), spec.data)


def mlp64_clip_sched() -> TrainSpec:
    """mlp64 with the training-loop features: gradients clipped to global norm 0.5 and
    the learning rate halved every 3 iterations (StepLR)."""
    spec = mlp64()
    return TrainSpec(spec.model, spec.loss, spec.make_optimizer, spec.data, clip_norm=0.5,
                     make_scheduler=functools.partial(torch.optim.lr_scheduler.StepLR, step_size=3, gamma=0.5))


def mlp64_adam_clip_sched() -> TrainSpec:
    """mlp64_adam with gradients clipped to global norm 0.5 and a linear warm-up of the
    learning rate over 5 iterations (LinearLR from 0.2)."""
    spec = mlp64_adam()
    return TrainSpec(spec.model, spec.loss, spec.make_optimizer, spec.data, clip_norm=0.5,
                     make_scheduler=functools.partial(torch.optim.lr_scheduler.LinearLR, start_factor=0.2,
                                                      total_iters=5))


def mlp32_bf16() -> TrainSpec:
    """A 7-block float32 MLP (8-64-64-32-4, Tanh between) trained under bf16 autocast, SGD
    with momentum 0.9, lr 0.05, on 256 teacher samples."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                          nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 4))
    return TrainSpec(model, nn.MSELoss(), functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9),
                     _teacher(256, 8, 4, torch.float32), autocast=torch.bfloat16)


def mlp64_dropout() -> TrainSpec:
    """mlp64 with nn.Dropout(0.2) after the first two Tanh (9 blocks)."""
    spec = mlp64()
    m = list(spec.model)
    model = nn.Sequential(m[0], m[1], nn.Dropout(0.2), m[2], m[3], nn.Dropout(0.2), m[4], m[5], m[6])
    return TrainSpec(model, spec.loss, spec.make_optimizer, spec.data)


class ScaledTanh(nn.Module):
    """tanh(x) * scale, `scale` a non-persistent buffer (a constant of the model, not in its
    state_dict, like a causal mask); with `unused`, also a parameter the forward never reads."""

    def __init__(self, width: int, unused: bool = False) -> None:
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 1.5, width, dtype=torch.float64), persistent=False)
        if unused:
            self.unused = nn.Parameter(torch.ones(width, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * self.scale


def mlp64_frozen_const() -> TrainSpec:
    """mlp64's 7 blocks with what migrations, checkpoints and the gradient sync must carry
    alike: blocks 1, 3 and 5 are ScaledTanh (a non-persistent buffer; block 5 also holds a
    parameter no forward uses), block 0's bias is frozen (requires_grad False); AdamW with
    weight decay 0.1, lr 1e-2 (single-process training leaves the frozen and the unused
    parameter as they are: no gradient, so no decay)."""
    spec = mlp64()
    m = list(spec.model)
    m[0].bias.requires_grad_(False)
    model = nn.Sequential(m[0], ScaledTanh(32), m[2], ScaledTanh(32), m[4], ScaledTanh(16, unused=True), m[6])
    return TrainSpec(model, spec.loss, functools.partial(torch.optim.AdamW, lr=1e-2, weight_decay=0.1), spec.data)


def attn64() -> TrainSpec:
    """A 6-block float64 model over sequences of 6 tokens of 8 features with self-attention:
    Linear(8, 16) per token, SelfAttention(16 features, 4 heads: runtime.tensor_parallel),
    Sequential(Linear(16, 32), Tanh), Linear(32, 16), Tanh, Linear(16, 4); SGD with momentum
    0.9, lr 0.05, mean-squared error on 128 teacher sequences (tanh of a linear map per token)."""
    from .tensor_parallel import SelfAttention
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), SelfAttention(16, 4), nn.Sequential(nn.Linear(16, 32), nn.Tanh()),
                          nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 4)).double()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(128, 6, 8, generator=g, dtype=torch.float64)
    w = torch.randn(8, 4, generator=g, dtype=torch.float64)
    return TrainSpec(model, nn.MSELoss(), functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9),
                     TensorDataset(x, torch.tanh(x @ w)))


def wide() -> TrainSpec:
    """A float32 MLP with real compute per block: DYNPAR_WIDE_BLOCKS (default 6) blocks of
    Linear(W, W) + Tanh with W = DYNPAR_WIDE_WIDTH (default 256), then Linear(W, 10); SGD."""
    blocks = int(os.environ.get("DYNPAR_WIDE_BLOCKS", "6"))
    w = int(os.environ.get("DYNPAR_WIDE_WIDTH", "256"))
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Sequential(nn.Linear(w, w), nn.Tanh()) for _ in range(blocks)]
    model = nn.Sequential(*layers, nn.Linear(w, 10))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1024, w, generator=g)
    y = torch.randint(0, 10, (1024,), generator=g)
    return TrainSpec(model, nn.CrossEntropyLoss(), functools.partial(torch.optim.SGD, lr=0.01),
                     TensorDataset(x, y))


class TokenEmbedding(nn.Module):
    """Token ids (N, S) -> token plus learned position embeddings (N, S, D)."""

    def __init__(self, vocab: int, seq: int, dim: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Parameter(0.02 * torch.randn(seq, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tok(x) + self.pos


def token_cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every token: out (N, S, V) logits, y (N, S) ids."""
    return nn.functional.cross_entropy(out.flatten(0, 1), y.flatten())


def _encoder(layers: int, dim: int, seq: int, dtype: torch.dtype = torch.float32) -> TrainSpec:
    vocab = 1024
    torch.manual_seed(0)
    model = nn.Sequential(
        TokenEmbedding(vocab, seq, dim),
        *(nn.TransformerEncoderLayer(dim, max(1, dim // 64), 4 * dim, dropout=0.0, batch_first=True,
                                     norm_first=True) for _ in range(layers)),
        nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, vocab))).to(dtype)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, vocab, (512, seq + 1), generator=g)
    return TrainSpec(model, token_cross_entropy, functools.partial(torch.optim.AdamW, lr=3e-4),
                     TensorDataset(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))


def encoder() -> TrainSpec:
    """A pre-norm transformer encoder on token sequences, its layers timed as whole blocks:
    TokenEmbedding, DYNPAR_ENC_LAYERS (default 4) nn.TransformerEncoderLayer blocks of width
    D = DYNPAR_ENC_DIM (256), max(1, D / 64) heads, feed-forward 4 D, no dropout, then
    LayerNorm + Linear(D, vocab 1024); AdamW (lr 3e-4); token cross-entropy on 512 sequences
    of DYNPAR_ENC_SEQ (128) random tokens, each target the next token (a learnable shift)."""
    return _encoder(int(os.environ.get("DYNPAR_ENC_LAYERS", "4")), int(os.environ.get("DYNPAR_ENC_DIM", "256")),
                    int(os.environ.get("DYNPAR_ENC_SEQ", "128")))


def encoder_bf16() -> TrainSpec:
    """encoder under bf16 autocast (parameters and AdamW state in float32)."""
    spec = encoder()
    return TrainSpec(spec.model, spec.loss, spec.make_optimizer, spec.data, autocast=torch.bfloat16)


def encoder_tiny() -> TrainSpec:
    """encoder at 2 layers of width 16 over 6 tokens, in float64 (tests)."""
    return _encoder(2, 16, 6, torch.float64)
