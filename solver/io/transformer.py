"""Activation bytes a transformer block saves for its backward pass, from its architecture.

Per block and micro-batch of b samples of s tokens, hidden size h, a attention heads, with
element bytes e (activations), m (dropout masks) and q (layer-norm mean and 1/std):

    saved = e (16 s b h + 2 a s^2 b) + m (2 s b h + a s^2 b) + 4 s b q          (dropout on)
    saved = e (16 s b h + a s^2 b) + 4 s b q                                      (no dropout)

Count, after Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", section 4.1: attention keeps the layer-norm input and output, Q, K, V, the softmax
output, its dropout mask and output, the output projection's input and its dropout mask; the
MLP keeps its input, the GeLU input and output (4 h wide each) and a dropout mask; each layer
norm keeps its input. In elements:
16 s b h + 2 a s^2 b of activations, 2 s b h + a s^2 b of masks, and two statistics per token
per layer norm. With e = 2, m = 1 and the statistics left out this is the paper's
s b h (34 + 5 a s / h) bytes. Without dropout the softmax output is both the softmax's saved
output and the input of the attention-times-V product (one tensor), and there are no masks.

Mask bytes depend on the framework: CUDA kernels keep a 1-byte mask; torch's CPU dropout keeps
a mask of the activation dtype (m = e). tests/test_transformer_memory.py checks the formula
against torch's saved-tensor hooks on a small block (float32 and bfloat16, CPU).
"""
from __future__ import annotations


def block_saved_bytes(seq: int, hidden: int, heads: int, samples: int = 1, act_bytes: float = 2.0,
                      mask_bytes: float = 1.0, stat_bytes: float = 0.0, dropout: bool = True) -> float:
    """Bytes one transformer block saves for its backward pass (module doc); seq tokens per
    sample, `samples` samples, act_bytes per activation element, mask_bytes per dropout mask
    element, stat_bytes per layer-norm statistic (0 leaves them out, as the paper does)."""
    for name, v in (("seq", seq), ("hidden", hidden), ("heads", heads), ("samples", samples)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    s, b, h, a = float(seq), float(samples), float(hidden), float(heads)
    sbh, ass = s * b * h, a * s * s * b
    stats = 4.0 * s * b * stat_bytes
    if dropout:
        return act_bytes * (16 * sbh + 2 * ass) + mask_bytes * (2 * sbh + ass) + stats
    return act_bytes * (16 * sbh + ass) + stats


def korthikanti_bytes(seq: int, hidden: int, heads: int, samples: int = 1) -> float:
    """The paper's figure, s b h (34 + 5 a s / h) bytes (16-bit activations, 1-byte masks)."""
    return seq * samples * hidden * (34.0 + 5.0 * heads * seq / hidden)
