"""The KV cache: what autoregressive decoding keeps of past tokens, and what that costs (notebooks 05, 08, 10).

A decoder that generates token t+1 needs the keys and values of tokens 0..t of every layer. Keeping
them (instead of recomputing them each step) is the KV cache: each step projects only the newest
token and appends its key and value (Pope et al. 2022, "Efficiently Scaling Transformer Inference",
section 2; HuggingFace's ``transformers.DynamicCache`` does the same per layer).

- :class:`KVCacheProtocol`: the interface every cache here follows and
  :class:`attn_lib.mha.MultiHeadAttention` accepts as ``kv_cache=`` (``seq_len``, ``check``,
  ``update``, ``nbytes``, ``reset``).
- :class:`KVCache`: keys and values kept as they are; :class:`QuantizedKVCache`: kept as 8- or 4-bit
  codes with per-token scales (:mod:`attn_lib.quantization`). Both validate a new chunk with one
  shared check before changing anything.
- :func:`kv_cache_bytes`, :func:`kv_cache_memory_table`, :func:`format_memory_table`: the size of a
  full cache; :func:`decoding_cost`: the work saved.

Shapes use the legend of :mod:`attn_lib.attention`: keys (B, Hkv, S, E), values (B, Hkv, S, Ev).
tests/test_kv_cache.py checks cached decoding against the full forward pass.
"""

from __future__ import annotations

import math
from typing import Protocol, Sequence, runtime_checkable

import torch

from attn_lib._checks import (check_bool, check_choice, check_dtype, check_finite, check_heads as _check_heads,
                              check_int as _check_int, check_same_device, check_same_dtype, check_tensor,
                              shape_of as _shape)
from attn_lib.quantization import QuantizedTensor, quantize_kv

__all__ = [
    "KVCacheProtocol",
    "KVCache",
    "QuantizedKVCache",
    "bytes_per_element",
    "kv_cache_bytes",
    "kv_cache_memory_table",
    "format_memory_table",
    "decoding_cost",
]


@runtime_checkable
class KVCacheProtocol(Protocol):
    """What a KV cache must offer to be passed as ``kv_cache=`` (``isinstance`` works on it).

    - ``seq_len``: tokens cached so far (int).
    - ``check(key, value)``: raise TypeError/ValueError unless ``update`` would accept them; change nothing.
    - ``update(key, value)``: append key (B, Hkv, S_new, E) and value (B, Hkv, S_new, Ev); return all
      cached keys (B, Hkv, S, E) and values (B, Hkv, S, Ev), S = old seq_len + S_new.
    - ``nbytes()``: bytes stored. ``reset()``: empty it.

    Raises:
        nothing itself (a Protocol); implementations' ``check`` / ``update`` raise TypeError (not floating
        tensors, dtypes differ) and ValueError (not 4-D, NaN/inf, shapes or devices that disagree).

    Source: HuggingFace's ``transformers.Cache`` interface (``update`` returns the layer's keys and values),
    reduced to one layer.
    """

    @property
    def seq_len(self) -> int: ...

    def check(self, key: torch.Tensor, value: torch.Tensor) -> None: ...

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def nbytes(self) -> int: ...

    def reset(self) -> None: ...


def _check_chunk(cache: str, key, value, cached: tuple | None) -> None:
    """The one check both caches run before an update.

    ``cached`` is None while empty, else (key shape, value shape, dtype, device) of what is stored.
    Raises TypeError (not floating tensors, key/value or cache dtypes differ) or ValueError (not 4-D,
    NaN/inf, shapes that disagree, another device), each message starting with ``cache``.
    """
    for name, t in (("key", key), ("value", value)):
        check_tensor(f"{cache}.update: {name}", t, floating=True)
        if t.dim() != 4:
            raise ValueError(f"{cache}.update: {name} must be a (B, Hkv, S_new, head_dim) tensor, got shape {_shape(t)}")
    check_same_dtype(key=key, value=value)
    check_same_device(key=key, value=value)
    if cached is not None and key.device != cached[3]:  # before the values are read: a meta tensor has none
        raise ValueError(f"{cache}.update: new key and value are on {key.device}, but the cache is on {cached[3]}")
    for name, t in (("key", key), ("value", value)):
        check_finite(f"{cache}.update: {name}", t)
    if key.shape[:3] != value.shape[:3]:
        raise ValueError(f"{cache}.update: key {_shape(key)} and value {_shape(value)} must agree in (B, Hkv, S_new)")
    if cached is None:
        return
    k_shape, v_shape, dtype, device = cached
    if key.shape[:2] != k_shape[:2] or key.shape[3] != k_shape[3] or value.shape[3] != v_shape[3]:
        raise ValueError(
            f"{cache}.update: new key {_shape(key)} / value {_shape(value)} do not match the cached "
            f"keys {tuple(k_shape)} / values {tuple(v_shape)} in (B, Hkv, E); use a new cache per layer and per batch"
        )
    if key.dtype != dtype:
        raise TypeError(f"{cache}.update: new key and value have dtype {key.dtype}, but the cache holds {dtype}; "
                        f"convert them with .to({dtype}) (a cache never promotes silently)")
    if key.device != device:
        raise ValueError(f"{cache}.update: new key and value are on {key.device}, but the cache is on {device}")


class KVCache:
    """A growing cache of keys and values for one attention layer (autoregressive decoding).

    Start empty (``KVCache()``) and pass it as ``kv_cache=`` to :meth:`attn_lib.mha.MultiHeadAttention.forward`;
    each call appends the new tokens' keys and values (after projection, and after RoPE when the
    layer uses it) and attends over everything cached. Keys and values are stored with
    ``num_kv_heads`` heads, so grouped-query attention shrinks the cache by num_heads / num_kv_heads.
    Follows :class:`KVCacheProtocol`, like HuggingFace's ``DynamicCache`` for one layer.

    Attributes:
        keys: (B, Hkv, S, E), values: (B, Hkv, S, Ev) tensors of one floating dtype, or None while empty.

    Raises (``check`` / ``update``):
        TypeError: key/value not floating tensors; their dtypes differ, or differ from the cache's.
        ValueError: not 4-D; NaN or inf; key and value disagree in (B, Hkv, S_new); B, Hkv, E or Ev differ
            from the cached ones; another device than the cache's.
    """

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    @property
    def seq_len(self) -> int:
        """Number of cached positions S (0 when empty)."""
        return 0 if self.keys is None else self.keys.shape[-2]

    def __len__(self) -> int:
        return self.seq_len

    def nbytes(self) -> int:
        """Bytes held by the cached keys and values (B x Hkv x S x (E + Ev) x bytes per element)."""
        if self.keys is None:
            return 0
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()

    def reset(self) -> None:
        """Empty the cache (start a new sequence)."""
        self.keys = None
        self.values = None

    def check(self, key: torch.Tensor, value: torch.Tensor) -> None:
        """Raise unless :meth:`update` would accept ``key`` and ``value`` (changes nothing); see :meth:`update`."""
        cached = None if self.keys is None else (self.keys.shape, self.values.shape, self.keys.dtype, self.keys.device)
        _check_chunk("KVCache", key, value, cached)

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new keys and values and return everything cached.

        Args:
            key: (B, Hkv, S_new, E) floating keys of the new tokens.
            value: (B, Hkv, S_new, Ev) their values, same dtype and device.

        Returns:
            (keys, values): (B, Hkv, S + S_new, E) and (B, Hkv, S + S_new, Ev), in the cache's dtype.

        Raises:
            TypeError: not floating tensors (integer caches are refused); key and value dtypes differ, or
                differ from what is cached (no silent promotion).
            ValueError: not 4-D; NaN or inf; key and value disagree in (B, Hkv, S_new); (B, Hkv, E) or the
                device differ from what is already cached (the message names the shapes).
        """
        self.check(key, value)
        if self.keys is None:  # a copy: the caller changing its tensor afterwards must not change the cache
            self.keys, self.values = key.clone(), value.clone()
        else:
            self.keys = torch.cat([self.keys, key], dim=-2)  # (B, Hkv, S + S_new, E)
            self.values = torch.cat([self.values, value], dim=-2)
        return self.keys, self.values

    def __repr__(self) -> str:
        shape = None if self.keys is None else _shape(self.keys)
        return f"KVCache(seq_len={self.seq_len}, keys={shape}, nbytes={self.nbytes()})"


class QuantizedKVCache:
    """A KV cache that stores keys and values as 8- or 4-bit codes with per-token absmax scales.

    Follows :class:`KVCacheProtocol` like :class:`KVCache` (pass it as ``kv_cache=``): :meth:`update`
    appends the new keys and values and returns everything cached, dequantized to the input dtype
    (attention then runs as usual); :attr:`seq_len`; :meth:`nbytes` counts codes and scales.
    Per-token scales (:func:`attn_lib.quantization.quantize_kv` with ``per="token"``) mean every token
    is quantized once, when it arrives (KIVI, Liu et al. 2024, section 3, quantizes values per token too).

    Args:
        bits: 8 or 4. scale_dtype: floating dtype of the stored scales (float16), or its name.

    Raises:
        TypeError / ValueError: bits not 8 or 4; scale_dtype not a floating dtype.

    Shapes: ``update(key, value)`` takes (B, Hkv, S_new, E) and (B, Hkv, S_new, Ev) and returns the cached
    (B, Hkv, S, E) and (B, Hkv, S, Ev), dequantized to the input dtype; it raises as :class:`KVCache`'s.

    Source: Liu et al. 2024 (KIVI), section 3; absmax quantization as Dettmers et al. 2022 (LLM.int8()), section 2.
    """

    def __init__(self, bits: int = 8, *, scale_dtype: torch.dtype = torch.float16):
        self.bits = check_choice("bits", bits, (8, 4))
        self.scale_dtype = check_dtype("scale_dtype", scale_dtype)
        self._k: list[QuantizedTensor] = []
        self._v: list[QuantizedTensor] = []
        self._seq_len = 0

    @property
    def seq_len(self) -> int:
        """Number of tokens cached."""
        return self._seq_len

    def __len__(self) -> int:
        return self.seq_len

    def reset(self) -> None:
        """Empty the cache (start a new sequence)."""
        self._k, self._v, self._seq_len = [], [], 0

    def check(self, key: torch.Tensor, value: torch.Tensor) -> None:
        """Raise unless :meth:`update` would accept ``key`` and ``value`` (changes nothing): the check of :class:`KVCache`."""
        cached = None
        if self._k:
            k, v = self._k[0], self._v[0]
            cached = (k.shape, v.shape, k.dtype, k.data.device)
        _check_chunk("QuantizedKVCache", key, value, cached)

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append key (B, Hkv, S_new, head_dim) and value (B, Hkv, S_new, head_dim_v); return all
        cached keys and values (B, Hkv, S_total, ·), dequantized to the input dtype.

        Raises:
            TypeError / ValueError: as :meth:`KVCache.update`, and what
                :func:`attn_lib.quantization.quantize_kv` raises (values too small for the scales).
        """
        self.check(key, value)
        self._k.append(quantize_kv(key, self.bits, per="token", scale_dtype=self.scale_dtype))
        self._v.append(quantize_kv(value, self.bits, per="token", scale_dtype=self.scale_dtype))
        self._seq_len += key.shape[2]
        keys = torch.cat([q.dequantize() for q in self._k], dim=2)
        values = torch.cat([q.dequantize() for q in self._v], dim=2)
        return keys, values

    def nbytes(self) -> int:
        """Bytes stored: codes plus scales of keys and values."""
        return sum(q.nbytes() for q in self._k) + sum(q.nbytes() for q in self._v)

    def __repr__(self) -> str:
        return f"QuantizedKVCache(bits={self.bits}, seq_len={self.seq_len}, nbytes={self.nbytes()})"


# ---------------------------------------------------------------------------------------------
# How many bytes the KV cache takes, and the work it saves
# ---------------------------------------------------------------------------------------------

_NAMED_BYTES = {
    "fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2,
    "fp8": 1, "int8": 1, "int4": 0.5,
}


def bytes_per_element(dtype) -> float:
    """Bytes one stored element takes: a torch dtype (``torch.float16`` -> 2) or a name.

    Names: "fp32"/"float32" (4), "fp16"/"float16"/"bf16"/"bfloat16" (2), "fp8"/"int8" (1),
    "int4" (0.5: two values per byte).

    Raises:
        ValueError: an unknown name. TypeError: neither a torch.dtype nor a str.

    No tensors: a torch.dtype or a str in, a float out.

    Source: torch's ``dtype.itemsize`` for torch dtypes; int4 packs two values per byte (GPTQ/AWQ's storage).
    """
    if isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).element_size()
    if isinstance(dtype, str):
        key = dtype.lower()
        if key not in _NAMED_BYTES:
            raise ValueError(f"dtype must be a torch.dtype or one of {sorted(_NAMED_BYTES)}, got {dtype!r}")
        return _NAMED_BYTES[key]
    raise TypeError(f"dtype must be a torch.dtype or a str such as 'int8', got {type(dtype).__name__} {dtype!r}")


def kv_cache_bytes(num_layers: int, num_kv_heads: int, head_dim: int, seq_len: int, batch_size: int, dtype) -> int:
    """Bytes of a full KV cache: 2 × num_layers × num_kv_heads × head_dim × seq_len × batch_size × bytes per element.

    The 2 counts keys and values. Only the elements are counted: a quantized cache also stores its
    scales (one per token and head for per-token absmax, e.g. 2 bytes per head_dim values;
    :meth:`QuantizedKVCache.nbytes` counts them).

    Example: a 7B-class model (32 layers, 32 KV heads, head_dim 128) in fp16 keeps
    2·32·32·128·2 = 524288 bytes = 0.5 MiB per token; 4096 tokens take 2 GiB.

    Args:
        num_layers, num_kv_heads, head_dim, batch_size: ints >= 1.
        seq_len: int >= 0, tokens cached.
        dtype: a torch dtype or a name understood by :func:`bytes_per_element` ("fp16", "int8", "int4").

    Returns:
        int, bytes.

    Raises:
        TypeError: a count is not an int, dtype of the wrong type. ValueError: a count out of range, unknown dtype name.

    No tensors: ints and a dtype (or its name) in, an int out.

    Source: the KV-cache memory accounting of Pope et al. 2022, "Efficiently Scaling Transformer Inference".
    """
    _check_int("num_layers", num_layers, minimum=1)
    _check_int("num_kv_heads", num_kv_heads, minimum=1)
    _check_int("head_dim", head_dim, minimum=1)
    _check_int("seq_len", seq_len, minimum=0)
    _check_int("batch_size", batch_size, minimum=1)
    elements = 2 * num_layers * num_kv_heads * head_dim * seq_len * batch_size
    return math.ceil(elements * bytes_per_element(dtype))


def kv_cache_memory_table(
    *,
    num_layers: int = 32,
    num_heads: int = 32,
    head_dim: int = 128,
    variants: dict[str, int] | None = None,
    seq_lens: Sequence[int] = (4096, 32768),
    batch_sizes: Sequence[int] = (1, 8),
    dtypes: Sequence = ("fp16", "int8", "int4"),
) -> list[dict]:
    """KV-cache size for every combination of attention variant, dtype, context length and batch size.

    Defaults: a 7B-class decoder (32 layers, 32 query heads of head_dim 128, as LLaMA-2-7B / Mistral-7B)
    with variants MHA (32 KV heads), GQA (8 KV heads, groups of 4) and MQA (1 KV head).

    Returns:
        list of dicts with keys "variant", "num_kv_heads", "dtype", "seq_len", "batch_size",
        "bytes" (int, from :func:`kv_cache_bytes`) and "gib" (bytes / 2**30).

    Raises:
        ValueError: a variant's num_kv_heads does not divide num_heads (and what :func:`kv_cache_bytes` raises).

    No tensors: ints, dtype names (str) and torch dtypes in; a list of dicts (int, float, str) out.

    Source: the course's own: notebook 08; the configs of LLaMA-2-7B / Mistral-7B (transformers' ``LlamaConfig``).
    """
    if variants is None:
        variants = {"MHA": num_heads, "GQA": 8, "MQA": 1}
    rows = []
    for name, hkv in variants.items():
        _check_heads(num_heads, hkv)
        for dtype in dtypes:
            for seq_len in seq_lens:
                for batch in batch_sizes:
                    b = kv_cache_bytes(num_layers, hkv, head_dim, seq_len, batch, dtype)
                    rows.append(
                        {"variant": name, "num_kv_heads": hkv, "dtype": str(dtype), "seq_len": seq_len,
                         "batch_size": batch, "bytes": b, "gib": b / 2**30}
                    )
    return rows


def format_memory_table(rows: list[dict]) -> str:
    """A plain-text table of :func:`kv_cache_memory_table`'s rows: one line per variant and dtype,
    one column per (context length, batch size), sizes in GiB (2**30 bytes, 5 significant digits).

    No tensors: dicts of str, int and float in, a str out.

    Raises:
        nothing of its own (KeyError for a row without the keys of :func:`kv_cache_memory_table`).

    Source: the course's own: notebook 08.
    """
    cols = sorted({(r["seq_len"], r["batch_size"]) for r in rows})
    lines_keys = list(dict.fromkeys((r["variant"], r["num_kv_heads"], r["dtype"]) for r in rows))
    cell = {(r["variant"], r["dtype"], r["seq_len"], r["batch_size"]): r["gib"] for r in rows}
    head = f"{'variant':<14}{'dtype':<6}" + "".join(f"{f'{s // 1024}k×{b}':>11}" for s, b in cols)
    out = [head, "-" * len(head)]
    for variant, hkv, dtype in lines_keys:
        label = f"{variant} ({hkv} KV)"
        out.append(f"{label:<14}{dtype:<6}" + "".join(f"{cell[(variant, dtype, s, b)]:>11.5g}" for s, b in cols))
    return "\n".join(out)


def decoding_cost(prompt_len: int, max_new_tokens: int, *, use_cache: bool) -> dict[str, int]:
    """Work per layer of greedy decoding, counted in token positions, with and without a KV cache.

    Generating N tokens after a prompt of P takes N forward passes (the last new token is never fed
    back). Pass t (t = 0..N-1) sees n_t = P + t tokens.

    - Without a cache every pass recomputes everything: n_t key/value projections and
      n_t(n_t+1)/2 causal query-key scores.
    - With a cache, pass 0 processes the prompt (P projections, P(P+1)/2 scores) and every later pass
      only the newest token: 1 projection and n_t scores (one query against all cached keys).

    Returns:
        {"kv_projections": int, "attention_scores": int, "forward_tokens": int} where forward_tokens is
        the number of token positions pushed through the layer (queries).

    Raises:
        TypeError: not ints, use_cache not a bool. ValueError: prompt_len < 1 or max_new_tokens < 0.

    No tensors: ints and a bool in, a dict of int out.

    Source: the course's own: notebook 08 (the count behind HuggingFace's ``use_cache=True``).
    """
    _check_int("prompt_len", prompt_len, minimum=1)
    check_bool("use_cache", use_cache)
    _check_int("max_new_tokens", max_new_tokens, minimum=0)
    proj = scores = 0
    for t in range(max_new_tokens):
        n = prompt_len + t
        if use_cache and t > 0:
            proj += 1
            scores += n
        else:
            proj += n
            scores += n * (n + 1) // 2
    return {"kv_projections": proj, "attention_scores": scores, "forward_tokens": proj}
