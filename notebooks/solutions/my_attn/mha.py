"""Multi-head plumbing, solved (notebook 05)."""

from __future__ import annotations

import torch


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, L, d_model = x.shape
    return x.view(B, L, num_heads, d_model // num_heads).transpose(1, 2)               # (B, H, L, head_dim)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    B, H, L, hd = x.shape
    return x.transpose(1, 2).reshape(B, L, H * hd)                                     # (B, L, H·head_dim)
