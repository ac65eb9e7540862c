"""Sliding-window attention, its rolling (ring-buffer) KV cache, attention sinks and local:global layers (notebook 11).

- **Sliding window** (Beltagy et al. 2020, "Longformer", section 3.1; Mistral 7B; Gemma 2 and 3): query i sees only
  the ``window`` most recent keys, j with 0 <= i - j < window (itself included), the convention of transformers'
  ``sliding_window`` (``masking_utils.sliding_window_overlay``). :func:`sliding_window_mask` is the course's causal
  mask (:func:`attn_lib.masks.causal_mask`) minus the keys that fell out of the window.
- **Ring-buffer cache** (:class:`RingKVCache`): a window-sized cache where position p lives in slot p % window, so its
  memory stays constant however long the sequence. Keys are stored after RoPE, so the slots need not be in order.
- **StreamingLLM** (Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks", section 3.2): keep
  the first ``num_sinks`` tokens besides the window (:func:`streaming_mask`); gpt-oss learns a sink logit per head
  instead (:mod:`attn_lib.variants`).
- **Local:global layers** (Gemma 3 technical report, section 2.2: five sliding-window layers of 1024 tokens for each
  global one): :func:`local_global_cache_bytes`.

Masks are bool, True = may attend (the convention of :mod:`attn_lib.masks`); shapes use attn_lib's legend.
tests/test_windows.py proves the window mask equal to transformers' Mistral, and the ring cache's decode equal to a
full-cache decode masked to the window, token for token.
"""

from __future__ import annotations

import math

import torch

from attn_lib._checks import check_int, check_number, check_same_device, check_tensor
from attn_lib.kv_cache import _check_chunk
from attn_lib.masks import causal_mask

# The largest ring window: slot indices and the cache's allocation of B x Hkv x window x E elements stay sane.
MAX_WINDOW = 2**31

__all__ = ["sliding_window_mask", "window_mask_from_positions", "streaming_mask", "RingKVCache",
           "ring_slot_positions", "local_global_cache_bytes"]


def sliding_window_mask(q_len: int, kv_len: int | None = None, *, window: int, device=None) -> torch.Tensor:
    """Causal sliding-window mask, True = may attend; the L queries are the last L of S positions (bottom-right).

    mask[i, j] = 0 <= (i + S - L) - j < window. Example, L = S = 4, window 2: [[1,0,0,0],[1,1,0,0],[0,1,1,0],[0,0,1,1]].

    Args:
        q_len: L. kv_len: S (default L). window: keys each query sees, itself included (int >= 1).
        device: as :func:`attn_lib.masks.causal_mask`.

    Returns:
        bool (L, S).

    Raises:
        TypeError / ValueError: as :func:`attn_lib.masks.causal_mask`; window not an int >= 1.

    Source: transformers' ``sliding_window`` convention (``masking_utils.sliding_window_overlay``);
    Beltagy et al. 2020 (Longformer), section 3.1.
    """
    window = check_int("window", window, minimum=1)
    causal = causal_mask(q_len, kv_len, align="bottom_right", device=device)
    L, S = causal.shape
    too_old = torch.ones(L, S, dtype=torch.bool, device=causal.device).tril(diagonal=S - L - window)  # i' - j >= window
    return causal & ~too_old


def _positions(name: str, p) -> torch.Tensor:
    check_tensor(name, p, ndim=1)
    if p.is_floating_point() or p.dtype == torch.bool:
        raise TypeError(f"{name} must be integer positions, got dtype {p.dtype}")
    return p


def window_mask_from_positions(q_positions: torch.Tensor, k_positions: torch.Tensor, *, window: int | None = None,
                               num_sinks: int = 0) -> torch.Tensor:
    """Mask from the true positions of queries and keys: causal, within ``window`` (None: unbounded), plus the first
    ``num_sinks`` positions; a key position < 0 (an empty ring slot) is never attended.

    Args:
        q_positions: (L,) integers. k_positions: (S,) integers, in any order (a ring buffer's slots).

    Returns:
        bool (L, S): ``k >= 0 and k <= q and (q - k < window or k < num_sinks)``.

    Raises:
        TypeError: positions not 1-D integer tensors. ValueError: window < 1 or num_sinks < 0; the two position
        tensors on different devices.

    Source: transformers' sliding-window cache masks (the mask built from each slot's position), with
    StreamingLLM's sinks (Xiao et al. 2023, section 3.2).
    """
    q, k = _positions("q_positions", q_positions)[:, None], _positions("k_positions", k_positions)[None, :]
    check_same_device(q_positions=q_positions, k_positions=k_positions)
    num_sinks = check_int("num_sinks", num_sinks, minimum=0)
    keep = (k >= 0) & (k <= q)
    if window is not None:
        window = check_int("window", window, minimum=1)
        if window < 2**63:  # a larger one reaches every key (q - k < 2**63), and torch would wrap it: all False
            keep = keep & ((q - k < window) | (k < num_sinks))
    return keep


def streaming_mask(q_len: int, kv_len: int | None = None, *, window: int, num_sinks: int = 4, device=None) -> torch.Tensor:
    """StreamingLLM's mask (Xiao et al. 2023, §3.2): the sliding window plus the first ``num_sinks`` keys ("attention
    sinks") for every query. ``num_sinks=0`` is :func:`sliding_window_mask`.

    Returns:
        bool (L, S).

    Raises:
        TypeError / ValueError: as :func:`sliding_window_mask`; num_sinks not an int >= 0.
    """
    num_sinks = check_int("num_sinks", num_sinks, minimum=0)
    mask = sliding_window_mask(q_len, kv_len, window=window, device=device)
    sinks = torch.zeros_like(mask)
    sinks[:, :num_sinks] = True
    return mask | (sinks & causal_mask(q_len, kv_len, align="bottom_right", device=device))


def ring_slot_positions(num_seen: int, window: int) -> list[int]:
    """The position each slot of a ring-buffer cache holds after ``num_seen`` tokens: slot s holds the latest
    p < num_seen with p % window == s, or -1 while empty. Example: 7 tokens, window 3 -> [6, 4, 5].

    Raises:
        TypeError / ValueError: num_seen not an int >= 0, window not an int in [1, 2**31] (one list entry a slot).

    Takes and returns no tensors: ints in, a list of ints out.

    Source: the course's own: notebook 11 (the ring buffer of transformers' sliding-window cache layer).
    """
    num_seen = check_int("num_seen", num_seen, minimum=0)
    window = check_int("window", window, minimum=1, maximum=MAX_WINDOW)
    out = [-1] * window
    for p in range(max(0, num_seen - window), num_seen):
        out[p % window] = p
    return out


class RingKVCache:
    """A KV cache of fixed size ``window`` for sliding-window layers: position p is written to slot p % window.

    Its memory stays B x Hkv x window x (E + Ev) elements however many tokens pass (transformers' sliding-window
    cache layer keeps the same window). Keys are kept after RoPE, so attention needs only each slot's position
    (for the mask), not the slots' order.

    ``update`` returns the old slots followed by the new tokens (window + S_new keys, with their positions) for this
    step's attention, then keeps only the last ``window`` tokens.

    Attributes:
        keys (B, Hkv, window, E), values (B, Hkv, window, Ev), positions (window,) int64 (-1 = empty), or None.

    Raises:
        TypeError / ValueError: window not an int in [1, 2**31] (the cache allocates window slots per head).
    """

    def __init__(self, window: int) -> None:
        self.window = check_int("window", window, minimum=1, maximum=MAX_WINDOW)
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.positions: torch.Tensor | None = None
        self._seen = 0

    @property
    def seq_len(self) -> int:
        """Tokens seen so far (the position of the next one); the cache holds min(seq_len, window) of them."""
        return self._seen

    def nbytes(self) -> int:
        """Bytes of the stored keys and values (constant once the first token arrived)."""
        if self.keys is None:
            return 0
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()

    def reset(self) -> None:
        """Empty the cache."""
        self.keys = self.values = self.positions = None
        self._seen = 0

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Attend-and-store one chunk.

        Args:
            key: (B, Hkv, S_new, E), value: (B, Hkv, S_new, Ev) of the tokens at positions seq_len .. seq_len + S_new - 1.

        Returns:
            (keys, values, positions): (B, Hkv, window + S_new, E), (..., Ev) and (window + S_new,) int64: the slots
            before this chunk (empty ones at position -1) followed by the chunk; mask them with
            :func:`window_mask_from_positions`.

        Raises:
            TypeError / ValueError: as :class:`attn_lib.kv_cache.KVCache`'s checks (4-D floating tensors of one
                dtype and device, matching the cached B, Hkv, E, Ev).
        """
        cached = None if self.keys is None else (self.keys.shape, self.values.shape, self.keys.dtype, self.keys.device)
        _check_chunk("RingKVCache", key, value, cached)
        B, Hkv, S_new, _ = key.shape
        if self.keys is None:
            try:  # the whole window is reserved at the first update (the cache's size never changes afterwards)
                self.keys = key.new_zeros(B, Hkv, self.window, key.shape[-1])
                self.values = value.new_zeros(B, Hkv, self.window, value.shape[-1])
                self.positions = torch.full((self.window,), -1, dtype=torch.long, device=key.device)
            except (RuntimeError, MemoryError) as e:
                if not isinstance(e, MemoryError) and "alloc" not in str(e).lower():
                    raise
                self.keys = self.values = self.positions = None
                need = B * Hkv * self.window * (key.shape[-1] + value.shape[-1]) * key.element_size()
                raise ValueError(f"window: a ring cache of {self.window} slots for keys {tuple(key.shape)} and "
                                 f"values {tuple(value.shape)} needs {need / 2**30:.3g} GiB, which cannot be "
                                 "allocated; expected a window the memory holds (the layer's own window)") from None
        new_pos = torch.arange(self._seen, self._seen + S_new, device=key.device)
        out = (torch.cat([self.keys, key], 2), torch.cat([self.values, value], 2), torch.cat([self.positions, new_pos]))
        keep = min(S_new, self.window)  # only the last `window` tokens of the chunk can ever be seen again
        slots = new_pos[-keep:] % self.window
        self.keys[:, :, slots] = key[:, :, -keep:]
        self.values[:, :, slots] = value[:, :, -keep:]
        self.positions[slots] = new_pos[-keep:]
        self._seen += S_new
        return out


def local_global_cache_bytes(seq_len: int, *, num_layers: int, num_kv_heads: int, head_dim: int, window: int,
                             local_per_global: int, bytes_per_element: float = 2) -> dict[str, float]:
    """KV-cache bytes of one sequence when ``local_per_global`` sliding-window layers alternate with one global layer.

    Layer i is global when (i + 1) % (local_per_global + 1) == 0 (Gemma 3: 5 local, then 1 global); a local layer
    keeps min(seq_len, window) tokens, a global one seq_len. ``local_per_global=0``: every layer global.

    Returns:
        {"all_global": bytes if every layer were global, "local_global": bytes with the pattern, "saving": their ratio}.

    Raises:
        TypeError / ValueError: a size not an int (>= 1; local_per_global >= 0); bytes_per_element not > 0.

    No tensors: ints in (bytes_per_element an int or float), a dict of float out.

    Source: Gemma Team 2025, "Gemma 3 Technical Report", section 2 (5 local layers per global one).
    """
    S, L, h, d, W = (check_int(n, v, minimum=1) for n, v in (("seq_len", seq_len), ("num_layers", num_layers),
                                                          ("num_kv_heads", num_kv_heads), ("head_dim", head_dim),
                                                          ("window", window)))
    k = check_int("local_per_global", local_per_global, minimum=0)
    e = check_number("bytes_per_element", bytes_per_element, positive=True)
    per_token = 2 * h * d * e
    n_global = L // (k + 1)  # the layers i with (i + 1) % (k + 1) == 0, counted without a loop over L
    try:
        full = L * S * per_token
        mixed = (n_global * S + (L - n_global) * min(S, W)) * per_token
    except OverflowError:
        full = mixed = math.inf
    if not math.isfinite(full) or not math.isfinite(mixed):
        raise ValueError(f"the cache sizes overflow a float: seq_len={S}, num_layers={L}, num_kv_heads={h}, "
                         f"head_dim={d}, bytes_per_element={e:g}; expected sizes whose product of bytes is finite")
    return {"all_global": float(full), "local_global": float(mixed), "saving": full / mixed}

