"""Your KV cache (mirrors attn_lib.kv_cache; notebook 08).

Shapes: B batch, Hkv key/value heads, S cached positions, S_new new positions, E head_dim of the keys,
Ev head_dim of the values.
"""

from __future__ import annotations

import torch

from my_attn._todo import todo

_SECTION = "What the cache holds, step by step"


class KVCache:
    """A growing cache of keys and values for one attention layer, HuggingFace's DynamicCache for one layer.

    ``attn_lib.mha.MultiHeadAttention(..., kv_cache=cache)`` calls ``cache.seq_len`` (how many positions are cached
    before the new tokens), ``cache.check(k, v)`` and then ``cache.update(k, v)``, which appends the new tokens'
    keys and values along the sequence axis and returns everything cached.

    Attributes:
        keys: (B, Hkv, S, E) and values: (B, Hkv, S, Ev), or None while the cache is empty.
    """

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    @property
    def seq_len(self) -> int:
        """The number of cached positions S (0 while empty)."""
        todo("KVCache", "08", _SECTION)

    def __len__(self) -> int:
        """The same as seq_len."""
        todo("KVCache", "08", _SECTION)

    def nbytes(self) -> int:
        """Bytes held by keys and values: numel × bytes per element of each (0 while empty)."""
        todo("KVCache", "08", _SECTION)

    def reset(self) -> None:
        """Empty the cache (a new sequence starts)."""
        todo("KVCache", "08", _SECTION)

    def check(self, key: torch.Tensor, value: torch.Tensor) -> None:
        """Raise unless update(key, value) would accept them; change nothing.

        Raises:
            TypeError: key or value is not a floating tensor, or their dtype differs from the cached one.
            ValueError: not 4-D; key and value differ in (B, Hkv, S_new); (B, Hkv, E) or Ev differ from the cached.
        """
        todo("KVCache", "08", _SECTION)

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append key (B, Hkv, S_new, E) and value (B, Hkv, S_new, Ev) after the cached positions.

        Returns:
            (keys (B, Hkv, S + S_new, E), values (B, Hkv, S + S_new, Ev)): everything cached, in order.

        Raises:
            as check.
        """
        todo("KVCache", "08", _SECTION)
