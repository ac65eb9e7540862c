"""Your sliding-window mask and ring-buffer cache (mirrors attn_lib.windows; notebook 11, section 2).
One convention: True = may attend."""

from __future__ import annotations

import torch

from my_attn._todo import todo

_SECTION = "2 · Sliding windows and a ring-buffer cache (Mistral, Gemma 2 and 3, gpt-oss)"


def sliding_window_mask(q_len: int, kv_len: int | None = None, *, window: int, device=None) -> torch.Tensor:
    """Causal sliding-window mask: the L queries are the last L of S positions (bottom-right), and query i (at
    position i' = i + S - L) sees key j when 0 <= i' - j < window (itself included). kv_len defaults to q_len.

    Example, L = S = 4, window 2: [[1,0,0,0],[1,1,0,0],[0,1,1,0],[0,0,1,1]].

    Returns:
        (q_len, kv_len) bool tensor, True = may attend.
    """
    todo("sliding_window_mask", "11", _SECTION)


class RingKVCache:
    """A KV cache of ``window`` slots: the token at position p is stored in slot p % window.

    Attributes after the first update: keys (B, Hkv, window, E), values (B, Hkv, window, Ev), zeros while empty;
    positions (window,) int64, the position each slot holds, -1 while empty. ``seq_len``: tokens seen so far (a
    property or attribute). ``nbytes()``: bytes of keys and values (0 before the first update). ``reset()``: empty.

    ``update(key, value)``: key (B, Hkv, S_new, E), value (B, Hkv, S_new, Ev), the tokens at positions
    seq_len .. seq_len + S_new - 1. Returns (keys, values, positions): the slots BEFORE this chunk followed by the
    chunk, (B, Hkv, window + S_new, E), (B, Hkv, window + S_new, Ev), (window + S_new,) int64; then it stores the
    chunk's last min(S_new, window) tokens in their slots.
    """

    def __init__(self, window: int) -> None:
        todo("RingKVCache", "11", _SECTION)

    @property
    def seq_len(self) -> int:
        todo("RingKVCache", "11", _SECTION)

    def nbytes(self) -> int:
        todo("RingKVCache", "11", _SECTION)

    def reset(self) -> None:
        todo("RingKVCache", "11", _SECTION)

    def update(self, key: torch.Tensor, value: torch.Tensor):
        todo("RingKVCache", "11", _SECTION)
