"""Positions, solved (notebook 02: sinusoidal; notebook 04: RoPE, ALiBi)."""

from __future__ import annotations

import torch


def sinusoidal_positional_encoding(num_positions: int, d_model: int, *, base: float = 10000.0,
                                   dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """(num_positions, d_model): column 2i = sin(p·ω_i), column 2i+1 = cos(p·ω_i), ω_i = base^(-2i/d_model)."""
    p = torch.arange(num_positions, dtype=torch.float64, device=device)[:, None]      # (N, 1)
    omega = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64, device=device) / d_model)  # (d/2,)
    angles = p * omega                                                                  # (N, d/2)
    out = torch.stack([angles.sin(), angles.cos()], dim=-1)                             # (N, d/2, 2)
    return out.reshape(num_positions, d_model).to(dtype)


def alibi_slopes(num_heads: int, *, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """2^(-8h/n) for the closest power of two n <= H, then every other slope of 2n for the rest."""
    def powers(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    n = 1 << (num_heads.bit_length() - 1)
    slopes = powers(n) + powers(2 * n)[0::2][: num_heads - n]
    return torch.tensor(slopes, dtype=dtype, device=device)


def apply_rope(x: torch.Tensor, positions=None, *, base: float = 10000.0, interleaved: bool = False) -> torch.Tensor:
    """Rotate pair i of x (half-split or interleaved) by the angle position·base^(-2i/head_dim)."""
    L, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(L, device=x.device)
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    theta = base ** (-torch.arange(0, d, 2, dtype=work, device=x.device) / d)           # (d/2,)
    angle = positions.to(work)[..., None] * theta                                       # (..., L, d/2)
    cos, sin = angle.cos(), angle.sin()
    if interleaved:
        a, b = x[..., 0::2].to(work), x[..., 1::2].to(work)
        out = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    else:
        a, b = x[..., : d // 2].to(work), x[..., d // 2:].to(work)
        out = torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    return out.to(x.dtype)
