"""Multi-query and grouped-query attention, what the KV cache costs, and how to shrink it (notebook 08).

Three ways to cut the memory a decoder keeps for its past tokens:

- **Fewer key/value heads.** Multi-query attention (MQA; Shazeer 2019, "Fast Transformer Decoding:
  One Write-Head is All You Need") keeps one key/value head for all query heads. Grouped-query
  attention (GQA; Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models
  from Multi-Head Checkpoints") splits the ``num_heads`` query heads into ``num_kv_heads`` groups of
  consecutive heads; query head j reads key/value head ``j // (num_heads // num_kv_heads)``.
  ``num_kv_heads == num_heads`` is ordinary multi-head attention (MHA), ``num_kv_heads == 1`` is MQA.
  This is the convention of ``torch.nn.functional.scaled_dot_product_attention(enable_gqa=True)``
  and of HuggingFace's ``repeat_kv`` (``transformers.models.llama.modeling_llama``).
- **Fewer bytes per element.** Store the cached keys and values as 8- or 4-bit integers with one
  absmax scale per token (or per channel) and dequantize them when attending.
- **Converting a trained model** instead of training a new one: :func:`to_gqa` mean-pools the key
  and value projection heads of each group (GQA paper, section 2.1; the paper then "uptrains" for
  about 5% of the pre-training steps, which this course does not do, so it measures the drop).

Every function here is checked in tests/test_gqa.py against torch's or HuggingFace's own code.
"""

from __future__ import annotations

import copy
import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch
import torch.nn as nn
from attn_lib._checks import check_int as _check_int

__all__ = [
    "kv_head_for_query_head",
    "query_groups",
    "describe_grouping",
    "repeat_kv",
    "grouped_query_attention",
    "bytes_per_element",
    "kv_cache_bytes",
    "kv_cache_memory_table",
    "format_memory_table",
    "decoding_cost",
    "QuantizedTensor",
    "quantize_absmax",
    "quantize_kv",
    "fake_quantize_kv",
    "QuantizedKVCache",
    "relative_error",
    "mean_pool_kv_heads",
    "to_gqa",
    "GQABertSelfAttention",
    "bert_to_gqa",
    "bert_kv_transform",
    "bert_qkv",
    "mean_pooled_embeddings",
    "plot_groups",
]


# ---------------------------------------------------------------------------------------------
# Which query head reads which key/value head
# ---------------------------------------------------------------------------------------------




def _check_heads(num_heads, num_kv_heads) -> int:
    """Validate the head counts; return the group size num_heads // num_kv_heads."""
    _check_int("num_heads", num_heads, minimum=1)
    _check_int("num_kv_heads", num_kv_heads, minimum=1)
    if num_heads % num_kv_heads:
        divisors = [d for d in range(1, num_heads + 1) if num_heads % d == 0]
        raise ValueError(
            f"num_kv_heads must divide num_heads={num_heads}, got num_kv_heads={num_kv_heads}; "
            f"possible values: {divisors}"
        )
    return num_heads // num_kv_heads


def kv_head_for_query_head(num_heads: int, num_kv_heads: int) -> list[int]:
    """The key/value head each query head reads: ``[j // (num_heads // num_kv_heads) for j in range(num_heads)]``.

    Consecutive query heads share a key/value head ("repeat in place", not "tile the set"):
    num_heads 8, num_kv_heads 2 -> ``[0, 0, 0, 0, 1, 1, 1, 1]``, not ``[0, 1, 0, 1, ...]``.
    Same as ``torch.repeat_interleave`` (torch's ``enable_gqa=True``) and HuggingFace's ``repeat_kv``.

    Raises:
        TypeError: a count is not an int. ValueError: a count < 1, or num_kv_heads does not divide num_heads.
    """
    group = _check_heads(num_heads, num_kv_heads)
    return [j // group for j in range(num_heads)]


def query_groups(num_heads: int, num_kv_heads: int) -> list[list[int]]:
    """The query heads of each group: entry h lists the query heads that share key/value head h.

    Example: ``query_groups(32, 8)`` -> ``[[0, 1, 2, 3], [4, 5, 6, 7], ..., [28, 29, 30, 31]]``
    (32 query heads in 8 groups of 4).

    Raises:
        TypeError / ValueError: as :func:`kv_head_for_query_head`.
    """
    owner = kv_head_for_query_head(num_heads, num_kv_heads)
    groups: list[list[int]] = [[] for _ in range(num_kv_heads)]
    for j, h in enumerate(owner):
        groups[h].append(j)
    return groups


def describe_grouping(num_heads: int, num_kv_heads: int) -> str:
    """One line naming the variant, its groups and its KV-cache size relative to MHA.

    Example: ``describe_grouping(32, 8)`` -> "GQA: 32 query heads in 8 groups of 4; the KV cache is 8/32 = 25% of MHA's".

    Raises:
        TypeError / ValueError: as :func:`kv_head_for_query_head`.
    """
    G = _check_heads(num_heads, num_kv_heads)
    name = "MHA" if num_kv_heads == num_heads else "MQA" if num_kv_heads == 1 else "GQA"
    share = f"{num_kv_heads}/{num_heads} = {100 * num_kv_heads / num_heads:.4g}%"
    groups = f"{num_kv_heads} group{'s' if num_kv_heads > 1 else ''} of {G}"
    return f"{name}: {num_heads} query heads in {groups}; the KV cache is {share} of MHA's"


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Repeat each key/value head ``n_rep`` times in place: (..., Hkv, S, D) -> (..., Hkv·n_rep, S, D).

    Head h of the input becomes heads h·n_rep .. h·n_rep + n_rep - 1 of the output, so query head j
    meets key/value head j // n_rep. Equal to ``x.repeat_interleave(n_rep, dim=-3)`` and to HuggingFace's
    ``transformers.models.llama.modeling_llama.repeat_kv`` (which it is written like: an ``expand``,
    then one copy by ``reshape``).

    Args:
        x: (..., Hkv, S, D) tensor with at least 3 dims, e.g. keys (B, Hkv, S, head_dim).
        n_rep: int >= 1, the group size num_heads // num_kv_heads.

    Raises:
        TypeError: x is not a tensor, n_rep not an int. ValueError: x has < 3 dims, n_rep < 1.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor of shape (..., Hkv, S, D), got {type(x).__name__}")
    if x.dim() < 3:
        raise ValueError(f"x must have shape (..., Hkv, S, D) with at least 3 dims, got shape {tuple(x.shape)}")
    _check_int("n_rep", n_rep, minimum=1)
    if n_rep == 1:
        return x
    *lead, hkv, s, d = x.shape
    # (..., Hkv, S, D) -> (..., Hkv, n_rep, S, D) (a view) -> (..., Hkv·n_rep, S, D) (a copy)
    return x.unsqueeze(-3).expand(*lead, hkv, n_rep, s, d).reshape(*lead, hkv * n_rep, s, d)


def grouped_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped-query attention without copying the keys and values.

    Instead of repeating each key/value head (what :func:`repeat_kv` and ``enable_gqa`` do, which
    writes num_heads copies), the G = Hq / Hkv query heads of a group are stacked as extra query
    rows of their one key/value head: (B, Hkv·G, L, E) -> (B, Hkv, G·L, E). Each key/value head is
    then read once per step, which is where MQA/GQA's decoding speed-up comes from: one decoding
    step is limited by how many bytes of cache it reads, not by arithmetic.

    Same semantics as ``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``
    (is_causal is aligned top-left like torch's; for a KV cache pass
    ``attn_mask=attn_lib.masks.causal_mask(L, S, align="bottom_right")``).

    Args:
        query: (B, Hq, L, E) float tensor (any leading dims before Hq).
        key: (B, Hkv, S, E), same dtype; Hkv divides Hq.
        value: (B, Hkv, S, Ev).
        attn_mask: bool (True = may attend) or float (added), broadcastable to (B, Hq, L, S).
        is_causal: top-left causal mask (query i sees keys 0..i).
        scale: score multiplier, default 1/sqrt(E).

    Returns:
        (output (B, Hq, L, Ev), attn_weights (B, Hq, L, S)).

    Raises:
        TypeError / ValueError: bad tensors (see :func:`attn_lib.attention.scaled_dot_product_attention`),
        fewer than 3 dims, Hkv not dividing Hq, a mask that does not broadcast.
    """
    from attn_lib.attention import scaled_dot_product_attention

    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 3:
            raise ValueError(f"{name} must have shape (..., heads, seq, dim), got shape {tuple(t.shape)}")
    hq, L = query.shape[-3], query.shape[-2]
    hkv, S = key.shape[-3], key.shape[-2]
    if value.shape[-3] != hkv:
        raise ValueError(f"key and value must have the same number of heads, got key {tuple(key.shape)}, value {tuple(value.shape)}")
    if hkv == 0 or hq % hkv:
        raise ValueError(
            f"the number of key/value heads Hkv={hkv} (key shape {tuple(key.shape)}) must divide the number "
            f"of query heads Hq={hq} (query shape {tuple(query.shape)})"
        )
    if attn_mask is not None and is_causal:
        raise ValueError("pass either attn_mask or is_causal=True, not both")
    G = hq // hkv
    lead = query.shape[:-3]
    if is_causal:
        attn_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor):
            raise TypeError(f"attn_mask must be a torch.Tensor or None, got {type(attn_mask).__name__}")
        full = (*lead, hq, L, S)
        try:
            ok = torch.broadcast_shapes(attn_mask.shape, full) == torch.Size(full)
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} cannot broadcast to (..., Hq, L, S) = {full}")
        # (..., Hq, L, S) -> (..., Hkv, G·L, S): the mask rows follow the stacked query rows
        attn_mask = attn_mask.expand(full).reshape(*lead, hkv, G * L, S)
    # (..., Hkv·G, L, E) -> (..., Hkv, G·L, E): a view, no copy
    q = query.reshape(*lead, hkv, G * L, query.shape[-1])
    out, weights = scaled_dot_product_attention(q, key, value, attn_mask, scale=scale)
    # (..., Hkv, G·L, ·) -> (..., Hq, L, ·)
    return out.reshape(*lead, hq, L, value.shape[-1]), weights.reshape(*lead, hq, L, S)


# ---------------------------------------------------------------------------------------------
# How many bytes the KV cache takes
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
    one column per (context length, batch size), sizes in GiB (2**30 bytes, 5 significant digits)."""
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
        TypeError: not ints. ValueError: prompt_len < 1 or max_new_tokens < 0.
    """
    _check_int("prompt_len", prompt_len, minimum=1)
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


# ---------------------------------------------------------------------------------------------
# KV-cache quantization: absmax, 8 or 4 bits
# ---------------------------------------------------------------------------------------------

_QMAX = {8: 127, 4: 7}


def _pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int8 values in [-8, 7] (..., D) -> uint8 (..., ceil(D/2)), two values per byte (low nibble first)."""
    u = (q.to(torch.int16) + 8).to(torch.uint8)  # [-8, 7] -> [0, 15]
    if u.shape[-1] % 2:
        u = torch.nn.functional.pad(u, (0, 1), value=8)  # pad with the code of 0
    return u[..., 0::2] | (u[..., 1::2] << 4)


def _unpack_int4(packed: torch.Tensor, last_dim: int) -> torch.Tensor:
    lo = packed & 0x0F
    hi = packed >> 4
    u = torch.stack((lo, hi), dim=-1).flatten(-2)[..., :last_dim]  # (..., 2·ceil(D/2)) -> (..., D)
    return u.to(torch.int8) - 8


@dataclass
class QuantizedTensor:
    """A tensor stored as ``bits``-bit integers with one absmax scale per slice along ``dim``.

    Attributes:
        data: int8 codes (bits=8), or uint8 with two 4-bit codes per byte (bits=4, packed along the last dim).
        scale: the scales, the original shape with ``dim`` reduced to size 1, dtype ``scale_dtype``.
        bits: 8 or 4.
        dim: the dim whose entries share a scale (the absmax is taken over it), negative index.
        shape: the original shape. dtype: the original dtype (what :meth:`dequantize` returns).
    """

    data: torch.Tensor
    scale: torch.Tensor
    bits: int
    dim: int
    shape: torch.Size
    dtype: torch.dtype

    def codes(self) -> torch.Tensor:
        """The integer codes as int8, in the original shape; in [-127, 127] (8 bits) or [-7, 7] (4 bits)."""
        if self.bits == 4:
            return _unpack_int4(self.data, self.shape[-1])
        return self.data

    def dequantize(self) -> torch.Tensor:
        """x̂ = code × scale, in the original dtype and shape."""
        work = torch.float64 if self.dtype == torch.float64 else torch.float32
        return (self.codes().to(work) * self.scale.to(work)).to(self.dtype)

    def nbytes(self) -> int:
        """Bytes of the stored codes plus the scales."""
        return self.data.numel() * self.data.element_size() + self.scale.numel() * self.scale.element_size()


def quantize_absmax(x: torch.Tensor, bits: int = 8, *, dim: int = -1, scale_dtype: torch.dtype = torch.float16) -> QuantizedTensor:
    """Symmetric absmax quantization to ``bits``-bit integers, one scale per slice along ``dim``.

    scale = max|x| / qmax over ``dim`` (qmax = 2^(bits-1) - 1: 127 for 8 bits, 7 for 4 bits), rounded
    up to ``scale_dtype``; code = round(x / scale), in [-qmax, qmax]; x̂ = code × scale.
    Each element's error |x - x̂| is at most scale / 2 (round to nearest; the scale is rounded up so
    nothing clips), so the error of a slice
    is set by its largest value: one outlier coarsens everything that shares its scale. A slice of
    zeros gets scale 1 and codes 0 (exact).

    Args:
        x: floating tensor of any shape.
        bits: 8 or 4. 4-bit codes are packed two per byte along the last dim.
        dim: the dim reduced for the absmax; entries along it share one scale.
        scale_dtype: dtype of the stored scales (float16 by default, like most KV-cache quantizers).

    Raises:
        TypeError: x is not a floating tensor. ValueError: bits not 8 or 4; dim out of range;
            x contains NaN or inf (they would poison the scale); a scale overflows ``scale_dtype``.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating torch.Tensor, got {type(x).__name__}{'' if not isinstance(x, torch.Tensor) else ' of dtype ' + str(x.dtype)}")
    if bits not in _QMAX:
        raise ValueError(f"bits must be 8 or 4, got {bits!r}")
    if x.dim() == 0 or not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim must be a valid dim of x (shape {tuple(x.shape)}), got dim={dim}")
    if not torch.isfinite(x).all():
        raise ValueError("x contains NaN or inf; absmax quantization needs finite values")
    dim = dim - x.dim() if dim >= 0 else dim
    qmax = _QMAX[bits]
    work = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    exact = work.abs().amax(dim=dim, keepdim=True) / qmax
    scale = exact.to(scale_dtype)
    # round the stored scale *up* (to the next representable value) so that |x| / scale <= qmax: no value clips
    low = scale.to(work.dtype) < exact
    scale = torch.where(low, torch.nextafter(scale, torch.full_like(scale, float("inf"))), scale)
    if not torch.isfinite(scale).all():
        raise ValueError(
            f"max|x| = {work.abs().max().item():.4g} overflows {scale_dtype} scales; pass scale_dtype=torch.float32"
        )
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # all-zero slice: scale 1, codes 0
    codes = torch.round(work / scale.to(work.dtype)).clamp(-qmax, qmax).to(torch.int8)
    data = _pack_int4(codes) if bits == 4 else codes
    return QuantizedTensor(data=data, scale=scale, bits=bits, dim=dim, shape=x.shape, dtype=x.dtype)


_PER = {"token": -1, "channel": -2}


def quantize_kv(x: torch.Tensor, bits: int = 8, *, per: str = "token", scale_dtype: torch.dtype = torch.float16) -> QuantizedTensor:
    """Quantize cached keys or values (..., S, D) with absmax scales per token or per channel.

    - ``per="token"``: one scale per token and head (absmax over the D = head_dim channels of that
      token). A new token is quantized on its own, so a growing cache never re-quantizes the past;
      this is what :class:`QuantizedKVCache` uses.
    - ``per="channel"``: one scale per channel and head (absmax over the S tokens). Keys have a few
      channels with large values in every token (Liu et al. 2024, "KIVI"), so per-channel
      scales suit keys better; but the scale depends on all tokens, so streaming needs groups of
      tokens (KIVI keeps the newest tokens in full precision until a group is full).

    Args:
        x: (..., S, D) floating tensor, e.g. (B, Hkv, S, head_dim).
        bits: 8 or 4. per: "token" or "channel". scale_dtype: dtype of the scales.

    Raises:
        ValueError: ``per`` unknown, x with fewer than 2 dims (and what :func:`quantize_absmax` raises).
    """
    if per not in _PER:
        raise ValueError(f"per must be 'token' or 'channel', got {per!r}")
    if isinstance(x, torch.Tensor) and x.dim() < 2:
        raise ValueError(f"x must have shape (..., S, D), got shape {tuple(x.shape)}")
    return quantize_absmax(x, bits, dim=_PER[per], scale_dtype=scale_dtype)


def fake_quantize_kv(x: torch.Tensor, bits: int = 8, *, per: str = "token") -> torch.Tensor:
    """``quantize_kv(x, bits, per=per).dequantize()``: what attention sees when reading a quantized cache."""
    return quantize_kv(x, bits, per=per).dequantize()


def relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    """‖approx - exact‖ / ‖exact‖ (Frobenius norms, in float64), e.g. of an attention output."""
    exact64 = exact.detach().to(torch.float64)
    return float((approx.detach().to(torch.float64) - exact64).norm() / exact64.norm().clamp_min(1e-300))


class QuantizedKVCache:
    """A KV cache that stores keys and values as 8- or 4-bit codes with per-token absmax scales.

    Same interface as :class:`attn_lib.mha.KVCache` (pass it as ``kv_cache=``): :meth:`update`
    appends the new keys and values and returns everything cached, dequantized to the input dtype
    (attention then runs as usual); :attr:`seq_len`; :meth:`nbytes` counts codes and scales.
    Per-token scales mean every token is quantized once, when it arrives.

    Args:
        bits: 8 or 4. scale_dtype: dtype of the stored scales (float16).
    """

    def __init__(self, bits: int = 8, *, scale_dtype: torch.dtype = torch.float16):
        if bits not in _QMAX:
            raise ValueError(f"bits must be 8 or 4, got {bits!r}")
        self.bits = bits
        self.scale_dtype = scale_dtype
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
        """Raise ValueError unless :meth:`update` would accept ``key`` and ``value`` (changes nothing).

        MultiHeadAttention calls it before building its mask, like :meth:`attn_lib.mha.KVCache.check`.
        """
        for name, t in (("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() != 4:
                got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"QuantizedKVCache.update: {name} must be a floating (B, Hkv, S_new, head_dim) tensor, got {got}")
        if key.shape[:3] != value.shape[:3]:
            raise ValueError(f"QuantizedKVCache.update: key {tuple(key.shape)} and value {tuple(value.shape)} must agree in (B, Hkv, S_new)")
        if self._k:
            k, v = self._k[0].shape, self._v[0].shape
            if key.shape[:2] != k[:2] or key.shape[3] != k[3] or value.shape[3] != v[3]:
                raise ValueError(
                    f"QuantizedKVCache.update: new key {tuple(key.shape)} / value {tuple(value.shape)} do not match "
                    f"the cached keys {tuple(k)} / values {tuple(v)} in (B, Hkv, head_dim)"
                )

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append key (B, Hkv, S_new, head_dim) and value (B, Hkv, S_new, head_dim_v); return all
        cached keys and values (B, Hkv, S_total, ·), dequantized to the input dtype.

        Raises:
            ValueError: not 4-dim floating tensors, or shapes that do not match the cache.
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
# Converting a trained multi-head layer to GQA (GQA paper, section 2.1)
# ---------------------------------------------------------------------------------------------


def mean_pool_kv_heads(weight: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """Average the projection heads of each group: (num_heads·D, ...) -> (num_kv_heads·D, ...).

    ``weight`` is a key or value projection's ``nn.Linear.weight`` (num_heads·head_dim, d_in) or its
    bias (num_heads·head_dim,), rows ordered head by head (head h = rows h·D .. h·D + D - 1).
    KV head g of the result is the mean of heads g·G .. g·G + G - 1 (G = num_heads // num_kv_heads),
    the consecutive heads whose queries will share it (Ainslie et al. 2023, section 2.1; in their
    ablation, mean-pooling beat keeping the first head of each group or a random initialisation).

    Raises:
        TypeError / ValueError: not a tensor, num_kv_heads not dividing num_heads, rows not a multiple of num_heads.
    """
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    G = _check_heads(num_heads, num_kv_heads)
    rows = weight.shape[0] if weight.dim() else 0
    if rows == 0 or rows % num_heads:
        raise ValueError(f"weight's first dim ({rows}, shape {tuple(weight.shape)}) must be num_heads={num_heads} × head_dim")
    D = rows // num_heads
    rest = weight.shape[1:]
    # (Hq·D, ...) -> (Hkv, G, D, ...) -> mean over G -> (Hkv·D, ...)
    return weight.reshape(num_kv_heads, G, D, *rest).mean(dim=1).reshape(num_kv_heads * D, *rest)


def _mha_heads(mha) -> tuple[int, int, int]:
    num_heads = getattr(mha, "num_heads")
    head_dim = getattr(mha, "head_dim", None) or mha.q_proj.out_features // num_heads
    num_kv_heads = getattr(mha, "num_kv_heads", None) or mha.k_proj.out_features // head_dim
    return num_heads, num_kv_heads, head_dim


def to_gqa(mha, num_kv_heads: int):
    """A new :class:`attn_lib.mha.MultiHeadAttention` with ``num_kv_heads`` key/value heads, made from
    a trained one by mean-pooling its key and value projection heads within each group.

    The query and output projections are copied unchanged; key head g (and value head g) of the new
    layer is the mean of the old heads g·G .. g·G + G - 1 (weights and biases), G = num_heads //
    num_kv_heads (Ainslie et al. 2023, "GQA", section 2.1). No retraining: the paper uptrains
    afterwards; this function gives the starting point, and notebook 08 measures how far it is.
    ``num_kv_heads`` equal to the layer's gives an identical copy; from an already grouped layer,
    its current num_kv_heads must be a multiple of the new one.

    Args:
        mha: a MultiHeadAttention (attributes num_heads, num_kv_heads, head_dim; q/k/v/out_proj).
        num_kv_heads: int dividing the layer's num_kv_heads.

    Raises:
        TypeError: mha is not a MultiHeadAttention. ValueError: num_kv_heads does not divide.
    """
    from attn_lib.mha import MultiHeadAttention

    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be an attn_lib.mha.MultiHeadAttention, got {type(mha).__name__}")
    num_heads, old_kv, head_dim = _mha_heads(mha)
    _check_int("num_kv_heads", num_kv_heads, minimum=1)
    if old_kv % num_kv_heads:
        raise ValueError(
            f"num_kv_heads={num_kv_heads} must divide the layer's current num_kv_heads={old_kv} "
            f"(num_heads={num_heads})"
        )
    new = copy.deepcopy(mha)
    if num_kv_heads == old_kv:
        return new
    # rebuild k_proj / v_proj with fewer output rows, holding the group means
    for name in ("k_proj", "v_proj"):
        old: nn.Linear = getattr(mha, name)
        lin = nn.Linear(old.in_features, num_kv_heads * head_dim, bias=old.bias is not None,
                        device=old.weight.device, dtype=old.weight.dtype)
        with torch.no_grad():
            lin.weight.copy_(mean_pool_kv_heads(old.weight, old_kv, num_kv_heads))
            if old.bias is not None:
                lin.bias.copy_(mean_pool_kv_heads(old.bias, old_kv, num_kv_heads))
        setattr(new, name, lin)
    new.num_kv_heads = num_kv_heads
    return new


class GQABertSelfAttention(nn.Module):
    """A drop-in replacement of HuggingFace's ``BertSelfAttention`` with fewer key/value heads.

    Made by :meth:`from_hf`: the query projection is copied, the key and value projections are
    mean-pooled per group (:func:`mean_pool_kv_heads`), so its ``key``/``value`` layers really output
    num_kv_heads·head_dim features (the KV cache a decoder would keep). Attention is BERT's eager
    attention with each key/value head repeated for its group (:func:`repeat_kv`).

    forward(hidden_states (B, L, d_model), attention_mask=None (additive float (B, 1, L, S), or bool True = attend),
    **kwargs) -> (attn_output (B, L, d_model), attn_weights (B, H, L, S)), like BertSelfAttention's.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int):
        super().__init__()
        self.group = _check_heads(num_heads, num_kv_heads)
        self.num_attention_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.attention_head_size = d_model // num_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, num_kv_heads * self.attention_head_size)
        self.value = nn.Linear(d_model, num_kv_heads * self.attention_head_size)
        self.kv_transform = None  # optional function applied to keys and values (B, Hkv, S, D), e.g. quantization

    @classmethod
    def from_hf(cls, module: nn.Module, num_kv_heads: int) -> "GQABertSelfAttention":
        """Convert a ``transformers`` BertSelfAttention (12 heads in MiniLM) by mean-pooling its key/value heads."""
        for attr in ("query", "key", "value", "num_attention_heads", "attention_head_size"):
            if not hasattr(module, attr):
                raise TypeError(f"module must be a HuggingFace BertSelfAttention (missing .{attr}), got {type(module).__name__}")
        H, D = module.num_attention_heads, module.attention_head_size
        new = cls(module.query.in_features, H, num_kv_heads).to(module.query.weight.dtype)
        with torch.no_grad():
            new.query.load_state_dict(module.query.state_dict())
            for name in ("key", "value"):
                old = getattr(module, name)
                getattr(new, name).weight.copy_(mean_pool_kv_heads(old.weight, H, num_kv_heads))
                getattr(new, name).bias.copy_(mean_pool_kv_heads(old.bias, H, num_kv_heads))
        new.train(module.training)
        return new

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        B, L, _ = hidden_states.shape
        D = self.attention_head_size
        # (B, L, H·D) -> (B, H, L, D); keys and values with Hkv heads
        q = self.query(hidden_states).view(B, L, -1, D).transpose(1, 2)
        k = self.key(hidden_states).view(B, L, -1, D).transpose(1, 2)
        v = self.value(hidden_states).view(B, L, -1, D).transpose(1, 2)
        if self.kv_transform is not None:
            k, v = self.kv_transform(k), self.kv_transform(v)
        k, v = repeat_kv(k, self.group), repeat_kv(v, self.group)  # (B, Hkv, L, D) -> (B, H, L, D)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(D)  # (B, H, L, S)
        if attention_mask is not None:
            if attention_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attention_mask, float("-inf"))
            else:
                scores = scores + attention_mask
        weights = scores.softmax(dim=-1)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(B, L, -1)  # (B, L, H·D)
        return out, weights


def bert_to_gqa(model: nn.Module, num_kv_heads: int) -> nn.Module:
    """A copy of a HuggingFace BERT (e.g. MiniLM from :func:`attn_lib.load_pretrained`) whose every
    self-attention layer is a :class:`GQABertSelfAttention` with ``num_kv_heads`` mean-pooled key/value heads.

    The original model is left unchanged. ``num_kv_heads`` must divide the model's num_attention_heads
    (MiniLM: 12 -> 12, 6, 4, 3, 2, 1).

    Raises:
        TypeError: not a BERT-like model (no ``encoder.layer[i].attention.self``). ValueError: bad num_kv_heads.
    """
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    if layers is None:
        raise TypeError(f"model must be a HuggingFace BertModel (with .encoder.layer), got {type(model).__name__}")
    new = copy.deepcopy(model)
    for layer in new.encoder.layer:
        layer.attention.self = GQABertSelfAttention.from_hf(layer.attention.self, num_kv_heads)
    return new


@contextmanager
def bert_kv_transform(model: nn.Module, transform):
    """Within the ``with`` block, every self-attention layer of a HuggingFace BERT applies
    ``transform`` to its keys and values (B, Hkv, S, D) before attending, e.g.
    ``lambda x: fake_quantize_kv(x, 4)`` to see what a 4-bit KV cache does to the model.

    Works on the original ``BertSelfAttention`` (through forward hooks on its ``key``/``value``
    linears) and on :class:`GQABertSelfAttention`. Hooks are removed on exit.
    """
    handles = []
    touched = []
    try:
        for layer in model.encoder.layer:
            sa = layer.attention.self
            if isinstance(sa, GQABertSelfAttention):
                touched.append((sa, sa.kv_transform))
                sa.kv_transform = transform
                continue
            D = sa.attention_head_size

            def hook(mod, args, out, D=D):
                B, L, F = out.shape
                heads = out.view(B, L, F // D, D).transpose(1, 2)  # (B, L, H·D) -> (B, H, L, D)
                return transform(heads).transpose(1, 2).reshape(B, L, F)

            handles += [sa.key.register_forward_hook(hook), sa.value.register_forward_hook(hook)]
        yield model
    finally:
        for h in handles:
            h.remove()
        for sa, old in touched:
            sa.kv_transform = old


@torch.no_grad()
def bert_qkv(tokenizer, model: nn.Module, text: str) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The queries, keys and values every self-attention layer of a HuggingFace BERT computes for ``text``.

    Read with forward hooks on each layer's ``query``/``key``/``value`` linears (the keys and values
    are what a KV cache would store). ``softmax(q kᵀ / sqrt(head_dim))`` of layer i equals the model's
    ``outputs.attentions[i]`` (tests/test_gqa.py).

    Returns:
        one (q, k, v) per layer, each (1, H, L, head_dim) float32, L = the number of tokens incl. [CLS]/[SEP].
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    captured: dict[tuple[int, str], torch.Tensor] = {}
    handles = []
    for i, layer in enumerate(model.encoder.layer):
        sa = layer.attention.self
        D = sa.attention_head_size
        for name in ("query", "key", "value"):
            def hook(mod, args, out, i=i, name=name, D=D):
                B, L, F = out.shape
                captured[(i, name)] = out.view(B, L, F // D, D).transpose(1, 2).clone()  # (B, H, L, D)
            handles.append(getattr(sa, name).register_forward_hook(hook))
    try:
        model(**tokenizer(text, return_tensors="pt"))
    finally:
        for h in handles:
            h.remove()
    return [tuple(captured[(i, n)] for n in ("query", "key", "value")) for i in range(len(model.encoder.layer))]


@torch.no_grad()
def mean_pooled_embeddings(tokenizer, model: nn.Module, sentences: Iterable[str], *, one_by_one: bool = False) -> torch.Tensor:
    """Sentence embeddings as all-MiniLM-L6-v2 defines them: the mean of the last hidden states over
    the real tokens (attention_mask), L2-normalised (sentence-transformers' Pooling + Normalize).

    Args:
        tokenizer, model: e.g. from :func:`attn_lib.load_pretrained`.
        sentences: the texts.
        one_by_one: run each sentence alone (no padding), so that a transform whose scales span
            the tokens (per-channel quantization) never sees padding tokens.

    Returns:
        (N, d_model) float32, rows of norm 1.
    """
    sentences = list(sentences)
    if not sentences or not all(isinstance(s, str) for s in sentences):
        raise ValueError("sentences must be a non-empty list of str")
    batches = [[s] for s in sentences] if one_by_one else [sentences]
    out = []
    for batch in batches:
        enc = tokenizer(batch, return_tensors="pt", padding=True)
        hidden = model(**enc).last_hidden_state  # (B, L, d_model)
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
        emb = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
        out.append(torch.nn.functional.normalize(emb, dim=-1))
    return torch.cat(out)


# ---------------------------------------------------------------------------------------------
# Figure: which query heads share which key/value head
# ---------------------------------------------------------------------------------------------


def plot_groups(num_heads: int, num_kv_heads: int, *, ax=None):
    """Draw query heads (top row) connected to the key/value head they read (bottom row), coloured by group.

    Returns:
        the matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    owner = kv_head_for_query_head(num_heads, num_kv_heads)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, num_heads * 0.28), 2.4))
    cmap = plt.get_cmap("viridis")
    colour = [cmap(h / max(1, num_kv_heads - 1) * 0.9) for h in range(num_kv_heads)]
    kv_x = [(h + 0.5) * num_heads / num_kv_heads - 0.5 for h in range(num_kv_heads)]
    for j, h in enumerate(owner):
        ax.plot([j, kv_x[h]], [1, 0], color=colour[h], lw=1, alpha=0.8)
    ax.scatter(range(num_heads), [1] * num_heads, c=[colour[h] for h in owner], s=60, marker="s", zorder=3)
    ax.scatter(kv_x, [0] * num_kv_heads, c=colour, s=120, marker="o", zorder=3, edgecolors="black")
    ax.set_yticks([0, 1], [f"{num_kv_heads} KV head{'s' if num_kv_heads > 1 else ''}", f"{num_heads} query heads"])
    ax.set_xticks([])
    ax.set_ylim(-0.4, 1.4)
    name = "MHA" if num_kv_heads == num_heads else "MQA" if num_kv_heads == 1 else "GQA"
    G = num_heads // num_kv_heads
    ax.set_title(f"{name}: {num_heads} query heads, {num_kv_heads} KV head{'s' if num_kv_heads > 1 else ''} (groups of {G})")
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    return ax
