"""Your positions (mirrors attn_lib.positional; notebook 02: sinusoidal; notebook 04, last part: RoPE, ALiBi).

Shapes: L = sequence length, d_model, head_dim."""

from __future__ import annotations

import torch

from my_attn._todo import todo


def sinusoidal_positional_encoding(num_positions: int, d_model: int, *, base: float = 10000.0,
                                   dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """The Transformer's fixed positions (Vaswani et al. 2017, §3.5), one row per position.

    Row p, columns 2i and 2i+1 (interleaved): sin(p / base^(2i/d_model)), cos(p / base^(2i/d_model)).

    Args:
        num_positions: N >= 0. d_model: an even width > 0. base: the 10000 of the formula.
        dtype, device: of the result.

    Returns:
        (num_positions, d_model) tensor of ``dtype``.
    """
    todo("sinusoidal_positional_encoding", "02", "1 · Sinusoidal encodings (the original Transformer)")


def alibi_slopes(num_heads: int, *, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """ALiBi's per-head slopes (Press et al. 2022, §3): for H a power of two, 2^(-8h/H) for h = 1..H.

    For another H, the slopes of the closest power of two below it, then every other slope of twice that power
    (the paper's footnote and its reference code).

    Returns:
        (num_heads,) tensor of ``dtype``, positive and decreasing.
    """
    todo("alibi_slopes", "04", "ALiBi: one more bias on the scores, beside the mask")


def apply_rope(x: torch.Tensor, positions=None, *, base: float = 10000.0, interleaved: bool = False) -> torch.Tensor:
    """Rotate each pair of dimensions of ``x`` by the angle m·θ_i, θ_i = base^(-2i/head_dim) (Su et al. 2021, §3.4).

    Args:
        x: (..., L, head_dim) floating tensor, head_dim even.
        positions: integer positions broadcastable to (..., L); default 0..L-1.
        base: the 10000 of θ_i.
        interleaved: False pairs (x[i], x[i + head_dim/2]) ("half-split", HF Llama); True pairs (x[2i], x[2i+1]).

    Returns:
        a tensor of x's shape and dtype.
    """
    todo("apply_rope", "04", "RoPE: rotate the queries and keys (LLaMA)")
