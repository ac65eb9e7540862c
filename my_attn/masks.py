"""Your masks (mirrors attn_lib.masks; notebook 04). One convention: True = may attend."""

from __future__ import annotations

import torch

from my_attn._todo import todo


def causal_mask(q_len: int, kv_len: int | None = None, *, align: str = "top_left", device=None) -> torch.Tensor:
    """The (q_len, kv_len) bool mask where query i may attend to key j.

    ``align="top_left"`` (torch's is_causal): j <= i. ``align="bottom_right"`` (a KV cache, flash-attn): the last
    query sees every key, j <= i + (kv_len - q_len). kv_len defaults to q_len.

    Returns:
        (q_len, kv_len) bool tensor, True = may attend.
    """
    todo("causal_mask", "04", "Top-left or bottom-right? When there are fewer queries than keys")


def padding_mask(lengths, max_len: int | None = None) -> torch.Tensor:
    """(B, max_len) bool mask, True at the real tokens of each sequence: position j < lengths[b].

    Args:
        lengths: B non-negative ints (a list or a 1-D integer tensor). max_len: the padded length; defaults to
            max(lengths).

    Returns:
        (B, max_len) bool tensor.
    """
    todo("padding_mask", "04", "Padding masks on a real batch")
