"""Serving-side attention: packed (varlen) batches, chunked prefill, split-KV decoding.

Shape legend (as :mod:`attn_lib.attention`): B batch, H query heads, Hkv key/value heads, L queries, S keys,
E head_dim of query and key, Ev head_dim of value; T tokens of a packed batch.

- **Continuous batching** packs the tokens of many sequences of different lengths into one row of T tokens
  (no padding); a **document mask** lets each token attend only to earlier tokens of its own sequence, so one
  attention call equals every sequence run alone (flash-attn's ``cu_seqlens``, FlexAttention's document mask).
- **Chunked prefill** feeds a long prompt in chunks through a KV cache: each chunk's queries attend to every
  cached key and, bottom-right causally, to their own chunk. The result equals the whole prompt at once.
- **Split-KV decoding** (FlashDecoding) cuts a long cache into chunks, attends to each separately (in parallel
  on a GPU) and merges the partial outputs with their log-sum-exps: notebook 09's merge,
  :func:`attn_lib.tiled.merge_partials`.

Source: Yu et al., "Orca" (OSDI 2022), section 4 (iteration-level scheduling); Agrawal et al., "Sarathi-Serve"
(2024), section 4 (chunked prefill); Dao et al., "Flash-Decoding for long-context inference" (2023).
"""

from __future__ import annotations

import torch

from attn_lib._checks import check_attn_mask, check_int, check_tensor
from attn_lib.kv_cache import KVCache
from attn_lib.tiled import merge_partials, tiled_attention

__all__ = ["document_mask", "chunked_prefill", "split_kv_attention"]


def _lengths(lengths) -> list[int]:
    values = lengths.tolist() if isinstance(lengths, torch.Tensor) else lengths
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"lengths must be a list, tuple or 1-D tensor of ints, got {type(lengths).__name__}")
    if not values:
        raise ValueError("lengths is empty: give at least one sequence length")
    return [check_int(f"lengths[{i}]", n, minimum=1) for i, n in enumerate(values)]


def document_mask(lengths, *, causal: bool = True) -> torch.Tensor:
    """The (T, T) bool mask of a packed batch: token i may attend token j iff both are in the same sequence
    (and j <= i when ``causal``). True = may attend. T = sum(lengths).

    Args:
        lengths: the sequences' lengths, ints >= 1 (list, tuple or 1-D int64 tensor).
        causal: also mask later tokens (bool).

    Returns:
        (T, T) bool tensor, block diagonal.

    Raises:
        TypeError: lengths not a list/tuple/tensor of ints, causal not a bool. ValueError: empty, or a length < 1.

    Source: flash-attn's ``flash_attn_varlen_func`` (``cu_seqlens``) and FlexAttention's document masking
    (Dong et al., "Flex Attention", 2024, section 3); the course's one mask convention.
    """
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    ns = _lengths(lengths)
    doc = torch.repeat_interleave(torch.arange(len(ns)), torch.tensor(ns))
    mask = doc[:, None] == doc[None, :]
    if causal:
        mask &= torch.ones(len(doc), len(doc), dtype=torch.bool).tril()
    return mask


def chunked_prefill(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, chunk_size: int, *,
                    scale: float | None = None) -> tuple[torch.Tensor, KVCache]:
    """Causal attention over a prompt fed ``chunk_size`` tokens at a time through a :class:`KVCache`.

    Args:
        query: (B, H, L, E); key: (B, H, L, E); value: (B, H, L, Ev), floating, the whole prompt's projections.
        chunk_size: tokens per chunk (int >= 1); the last chunk may be shorter.
        scale: default 1/sqrt(E).

    Returns:
        ``(output, cache)``: (B, H, L, Ev) in query's dtype, equal to causal attention over the whole prompt,
        and the cache holding all L keys and values.

    Raises:
        TypeError: non-floating tensors, chunk_size not an int. ValueError: shapes that differ, chunk_size < 1.

    Source: Agrawal et al., "Sarathi-Serve" (2024), section 4.2 (chunked prefills); bottom-right causal alignment
    as flash-attn's causal=True for L < S.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, t, floating=True, ndim=4)
    if key.shape != query.shape or value.shape[:-1] != query.shape[:-1]:
        raise ValueError(f"query and key must be (B, H, L, E) and value (B, H, L, Ev) with the same B, H, L: got "
                         f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    chunk_size = check_int("chunk_size", chunk_size, minimum=1)
    cache, outs = KVCache(), []
    for i in range(0, query.shape[-2], chunk_size):
        k, v = cache.update(key[..., i:i + chunk_size, :], value[..., i:i + chunk_size, :])
        outs.append(tiled_attention(query[..., i:i + chunk_size, :], k, v, is_causal=True,
                                    causal_align="bottom_right", scale=scale))
    return torch.cat(outs, dim=-2), cache


def split_kv_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, num_splits: int, *,
                       attn_mask: torch.Tensor | None = None, scale: float | None = None,
                       return_lse: bool = False):
    """Attention with the keys cut into ``num_splits`` chunks, each attended separately, then merged.

    Each chunk gives a partial output and log-sum-exp (``tiled_attention(..., return_lse=True)``);
    :func:`attn_lib.tiled.merge_partials` weighs them by ``exp(lse_i - lse)``. On a GPU the chunks run in
    parallel, which is what keeps a decoding step (L = 1) busy on a long cache.

    Args:
        query: (..., H, L, E); key: (..., H, S, E); value: (..., H, S, Ev); floating.
        num_splits: 1 <= num_splits <= S (int); chunks as ``torch.tensor_split`` (sizes differ by at most 1).
        attn_mask: None or a bool mask broadcastable to (..., H, L, S), True = may attend.
        scale: default 1/sqrt(E). return_lse: also return the merged (..., H, L) log-sum-exp.

    Returns:
        (..., H, L, Ev) in query's dtype, or ``(output, lse)``.

    Raises:
        TypeError: non-floating tensors, num_splits not an int. ValueError: num_splits < 1 or > S, shapes
            that do not fit (as :func:`attn_lib.tiled.tiled_attention`).

    Source: Dao, Haziza, Massa, Sizov, "Flash-Decoding for long-context inference" (2023); the merge of
    Milakov & Gimelshein (2018), section 3.
    """
    check_tensor("key", key, floating=True)
    if key.ndim < 2:
        raise ValueError(f"key must be (..., H, S, E), got {key.ndim} dims")
    S = key.shape[-2]
    num_splits = check_int("num_splits", num_splits, minimum=1, maximum=max(S, 1))
    cuts = torch.arange(S).tensor_split(num_splits)
    check_tensor("query", query, floating=True)
    mask = check_attn_mask(attn_mask, (*query.shape[:-1], S), allow_float=False)
    if mask is not None:
        mask = mask.expand(*query.shape[:-1], S)
    outs, lses = [], []
    for idx in cuts:
        j0, j1 = int(idx[0]), int(idx[-1]) + 1
        o, s = tiled_attention(query, key[..., j0:j1, :], value[..., j0:j1, :], scale=scale, return_lse=True,
                               attn_mask=None if mask is None else mask[..., j0:j1])
        outs.append(o)
        lses.append(s)
    out, lse = merge_partials(outs, lses)
    return (out, lse) if return_lse else out
