"""Your multi-head plumbing (mirrors attn_lib.mha; notebook 05). B batch, L length, H heads, d_model = H · head_dim."""

from __future__ import annotations

import torch

from my_attn._todo import todo


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, d_model) -> (B, H, L, head_dim): head h gets columns h·head_dim ... (h+1)·head_dim - 1.

    Returns:
        a tensor of shape (B, num_heads, L, d_model // num_heads).
    """
    todo("split_heads", "05", "2 · The mechanics, shape by shape")


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, head_dim) -> (B, L, H · head_dim), the inverse of split_heads."""
    todo("merge_heads", "05", "2 · The mechanics, shape by shape")
