"""Masks, solved (notebook 04). True = may attend."""

from __future__ import annotations

import torch


def causal_mask(q_len: int, kv_len: int | None = None, *, align: str = "top_left", device=None) -> torch.Tensor:
    """j <= i (top_left) or j <= i + (kv_len - q_len) (bottom_right)."""
    kv_len = q_len if kv_len is None else kv_len
    i = torch.arange(q_len, device=device)[:, None]
    j = torch.arange(kv_len, device=device)[None, :]
    shift = kv_len - q_len if align == "bottom_right" else 0
    return j <= i + shift


def padding_mask(lengths, max_len: int | None = None) -> torch.Tensor:
    """(B, max_len): True where position < length."""
    lengths = torch.as_tensor(lengths)
    max_len = int(lengths.max()) if max_len is None else max_len
    return torch.arange(max_len)[None, :] < lengths[:, None]
