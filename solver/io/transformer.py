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

Attention dropout can be off while hidden dropout is on (`attention_dropout=False`): the softmax
output is then kept once and has no mask, e (16 s b h + a s^2 b) + m 2 s b h + 4 s b q.

Mask bytes depend on the framework: CUDA kernels keep a 1-byte mask; torch's CPU dropout keeps
a mask of the activation dtype (m = e). tests/test_transformer_memory.py checks the formula
against torch's saved-tensor hooks on a small block (float32 and bfloat16, CPU).

A Llama-style block (`llama_block_saved_bytes`: RMSNorm, rotary embeddings, SwiGLU MLP of width
f, no dropout, no bias in the count) laid out as Megatron-LM does (one fused Q/K/V projection
whose output V keeps alive as a view; attention products on views, no copies):

    saved = e (12 s b h + 4 s b f + a s^2 b) + 2 s b q

each RMSNorm keeps its input, the normalised tensor and its output (the next projection's
input), 3 s b h each, and 1/rms (q per token); attention keeps the fused Q/K/V output (3 s b h),
the rotated Q and K (2 s b h), the softmax output (a s^2 b) and the output projection's input
(s b h); the MLP keeps its first projection's output (2 s b f: the SiLU input and the gate are
views of it), the SiLU output and the product (the last projection's input), s b f each.
"""
from __future__ import annotations


def _check_shape(**values: int) -> None:
    for name, v in values.items():
        if int(v) != v or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    if values["hidden"] % values["heads"]:
        raise ValueError(f"hidden {values['hidden']} is not a multiple of heads {values['heads']}")


def block_saved_bytes(seq: int, hidden: int, heads: int, samples: int = 1, act_bytes: float = 2.0,
                      mask_bytes: float = 1.0, stat_bytes: float = 0.0, dropout: bool = True,
                      attention_dropout: bool | None = None) -> float:
    """Bytes one transformer block saves for its backward pass (module doc); seq tokens per
    sample, `samples` samples, act_bytes per activation element, mask_bytes per dropout mask
    element, stat_bytes per layer-norm statistic (0 leaves them out, as the paper does);
    dropout: hidden (residual) dropout; attention_dropout: dropout on the attention
    probabilities (None: the same as dropout)."""
    _check_shape(seq=seq, hidden=hidden, heads=heads, samples=samples)
    s, b, h, a = float(seq), float(samples), float(hidden), float(heads)
    sbh, ass = s * b * h, a * s * s * b
    stats = 4.0 * s * b * stat_bytes
    att = dropout if attention_dropout is None else bool(attention_dropout)
    acts = 16 * sbh + (2 * ass if att else ass)
    masks = (2 * sbh if dropout else 0.0) + (ass if att else 0.0)
    return act_bytes * acts + mask_bytes * masks + stats


def llama_block_saved_bytes(seq: int, hidden: int, heads: int, ffn: int, samples: int = 1,
                            act_bytes: float = 2.0, stat_bytes: float = 0.0) -> float:
    """Bytes a Llama-style block (module doc) saves for its backward pass: e (12 s b h + 4 s b f
    + a s^2 b) + 2 s b q; ffn = f, the SwiGLU width; act_bytes = e, stat_bytes = q per 1/rms."""
    _check_shape(seq=seq, hidden=hidden, heads=heads, ffn=ffn, samples=samples)
    s, b, h, a, f = float(seq), float(samples), float(hidden), float(heads), float(ffn)
    return act_bytes * (12 * s * b * h + 4 * s * b * f + a * s * s * b) + 2.0 * s * b * stat_bytes


def korthikanti_bytes(seq: int, hidden: int, heads: int, samples: int = 1) -> float:
    """The paper's figure, s b h (34 + 5 a s / h) bytes (16-bit activations, 1-byte masks)."""
    return seq * samples * hidden * (34.0 + 5.0 * heads * seq / hidden)


def block_unsplit_bytes(seq: int, hidden: int, samples: int = 1, act_bytes: float = 2.0, mask_bytes: float = 1.0,
                        dropout: bool = True) -> float:
    """Bytes of a block's saved activations that Megatron's tensor parallelism does not split
    (each of the t devices keeps them whole): the two layer-norm inputs and the two inputs of the
    column-parallel linears (QKV, the MLP's first), 4 s b h elements, and the two dropout masks
    after the row-parallel linears, 2 s b h: with e = 2, m = 1 the 10 s b h of Korthikanti et al.
    2022, section 4.2.2 (s b h (10 + 24 / t + 5 a s / (h t)) per device at degree t)."""
    _check_shape(seq=seq, hidden=hidden, heads=1, samples=samples)
    return float(seq * samples * hidden * (4.0 * act_bytes + (2.0 * mask_bytes if dropout else 0.0)))
