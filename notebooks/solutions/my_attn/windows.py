"""The sliding-window mask and the ring-buffer cache, solved (notebook 11). True = may attend."""

from __future__ import annotations

import torch


def sliding_window_mask(q_len: int, kv_len: int | None = None, *, window: int, device=None) -> torch.Tensor:
    """0 <= (i + S - L) - j < window."""
    kv_len = q_len if kv_len is None else kv_len
    i = torch.arange(q_len, device=device)[:, None] + (kv_len - q_len)  # (L, 1): each query's position
    j = torch.arange(kv_len, device=device)[None, :]  # (1, S)
    age = i - j
    return (age >= 0) & (age < window)


class RingKVCache:
    """Position p lives in slot p % window."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.reset()

    def reset(self) -> None:
        self.keys = self.values = self.positions = None
        self.seen = 0

    @property
    def seq_len(self) -> int:
        return self.seen

    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values))

    def update(self, key: torch.Tensor, value: torch.Tensor):
        B, Hkv, n, _ = key.shape
        if self.keys is None:
            self.keys = key.new_zeros(B, Hkv, self.window, key.shape[-1])  # (B, Hkv, window, E)
            self.values = value.new_zeros(B, Hkv, self.window, value.shape[-1])  # (B, Hkv, window, Ev)
            self.positions = torch.full((self.window,), -1, dtype=torch.long, device=key.device)
        new = torch.arange(self.seen, self.seen + n, device=key.device)  # (n,)
        out = (torch.cat([self.keys, key], 2), torch.cat([self.values, value], 2), torch.cat([self.positions, new]))
        for t in range(max(0, n - self.window), n):  # only the last `window` tokens can be seen again
            slot = int(new[t]) % self.window
            self.keys[:, :, slot] = key[:, :, t]
            self.values[:, :, slot] = value[:, :, t]
            self.positions[slot] = new[t]
        self.seen += n
        return out
