"""The KV cache, solved (notebook 08)."""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self) -> None:
        self.keys = None      # (B, Hkv, S, E) once something is cached
        self.values = None    # (B, Hkv, S, Ev)

    @property
    def seq_len(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def __len__(self) -> int:
        return self.seq_len

    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values))

    def reset(self) -> None:
        self.keys = self.values = None

    def check(self, key, value) -> None:
        for name, t in (("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                raise TypeError(f"KVCache.update: {name} must be a floating tensor, got {type(t).__name__}")
            if t.dim() != 4:
                raise ValueError(f"KVCache.update: {name} must be (B, Hkv, S_new, head_dim), got {tuple(t.shape)}")
        if key.dtype != value.dtype:
            raise TypeError(f"KVCache.update: key is {key.dtype} but value is {value.dtype}")
        if key.shape[:3] != value.shape[:3]:
            raise ValueError(f"KVCache.update: key {tuple(key.shape)} and value {tuple(value.shape)} must agree "
                             "in (B, Hkv, S_new)")
        if self.keys is None:
            return
        if key.dtype != self.keys.dtype:
            raise TypeError(f"KVCache.update: new keys are {key.dtype}, the cache holds {self.keys.dtype}")
        if (key.shape[:2] != self.keys.shape[:2] or key.shape[3] != self.keys.shape[3]
                or value.shape[3] != self.values.shape[3]):
            raise ValueError(f"KVCache.update: new key {tuple(key.shape)} / value {tuple(value.shape)} do not match "
                             f"the cached {tuple(self.keys.shape)} / {tuple(self.values.shape)} in (B, Hkv, E)")

    def update(self, key, value):
        self.check(key, value)
        if self.keys is None:
            self.keys, self.values = key, value
        else:  # the sequence axis is dim 2 of (B, Hkv, S, E)
            self.keys = torch.cat([self.keys, key], dim=2)                               # (B, Hkv, S + S_new, E)
            self.values = torch.cat([self.values, value], dim=2)                         # (B, Hkv, S + S_new, Ev)
        return self.keys, self.values
