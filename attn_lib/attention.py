"""Scaled dot-product attention from scratch (notebook 03), returning the weights too.

The one equation of the Transformer (Vaswani et al. 2017, "Attention Is All You Need", section 3.2.1)::

    Attention(Q, K, V) = softmax(Q Kᵀ / sqrt(d_k)) V

Shape legend (attn_lib's letters; every docstring of attn_lib uses them; PyTorch's SDPA docs use H for the
key/value heads too, attn_lib's H is always the query heads and Hkv the key/value heads):

====  ==========================================================================
B     batch size
H     number of query heads (num_heads)
Hkv   number of key/value heads (num_kv_heads; Hkv divides H, Hkv = H is MHA, 1 is MQA)
L     target length: the number of queries
S     source length: the number of keys and values (cached ones included)
E     embedding dimension of a query and a key (head_dim, d_k)
Ev    embedding dimension of a value (d_v; usually E)
====  ==========================================================================

``...`` stands for any leading batch dims, e.g. (B, H).

:func:`scaled_dot_product_attention` has the signature and the semantics of
``torch.nn.functional.scaled_dot_product_attention`` (PyTorch >= 2.5), which tests/test_attention.py
checks on float64 for random shapes, masks, scales and grouped-query attention. Unlike torch's
function it also returns the attention weights, which the course plots.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attn_lib._checks import (all_finite, check_attn_mask, check_bool, check_number, check_qkv, check_scale,
                              scores_overflow_error, shape_of as _shape)
from attn_lib.masks import causal_mask

__all__ = ["scaled_dot_product_attention"]  # and _sdpa, the unchecked core other modules call


def _validate(query, key, value, attn_mask, is_causal, dropout_p, scale, enable_gqa) -> None:
    check_qkv(query, key, value, enable_gqa=enable_gqa)
    check_bool("is_causal", is_causal)
    if attn_mask is not None and is_causal:
        raise ValueError("pass either attn_mask or is_causal=True, not both (torch's function refuses both too)")
    check_number("dropout_p", dropout_p, minimum=0.0, maximum=1.0)
    check_scale(scale, query.shape[-1])
    if attn_mask is not None:
        # shape is checked once the batch dims are known (below); type, NaN and +inf here
        check_attn_mask(attn_mask, attn_mask.shape if isinstance(attn_mask, torch.Tensor) else ())


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, returning the output and the attention weights.

    ``softmax(query @ keyᵀ * scale + mask) @ value`` (Vaswani et al. 2017, section 3.2.1), with the
    semantics of ``torch.nn.functional.scaled_dot_product_attention``.

    Args:
        query: (..., L, E) float tensor: L queries of dimension E (E = d_k = head_dim).
        key: (..., S, E) float tensor, same dtype: S keys.
        value: (..., S, Ev) float tensor, same dtype: one value per key.
            The leading dims ``...`` (e.g. (B, H)) of query and key/value broadcast against each other.
        attn_mask: optional, broadcastable to (..., L, S).
            bool: True = this query may attend to this key (torch's and HuggingFace's convention);
            float: added to the scores before the softmax (0 = keep, -inf or a large negative = block).
        is_causal: apply a causal mask aligned top-left like torch's: query i sees keys 0..i.
            When L != S and you want the *last* query to see every key (KV cache), pass
            ``attn_mask=attn_lib.masks.causal_mask(L, S, align="bottom_right")`` instead.
        dropout_p: probability of zeroing each attention weight (the kept ones are scaled by
            1/(1-p)); applied whenever > 0, like torch's function -- pass 0.0 in evaluation.
        scale: multiplier of the scores; default ``1/sqrt(E)``.
        enable_gqa: grouped-query attention: key/value may have fewer heads Hkv (dim -3) than
            query Hq; query head j uses key/value head ``j // (Hq // Hkv)`` (``repeat_interleave``).

    Returns:
        (output, attn_weights):
        output (..., L, Ev) in the input dtype;
        attn_weights (..., L, S) in the input dtype, after dropout (what was multiplied with value).
        Each row of the weights sums to 1 (without dropout) -- except a query row whose keys are all
        masked: its weights and its output are 0, never NaN (what torch's function does today).

    Numerics: the softmax is computed in float32 for float16/bfloat16 inputs (float64 stays float64),
    with each row's maximum subtracted first, so scores of +-1e4 and half inputs stay finite.

    Raises:
        TypeError: an input is not a tensor or not floating point; query/key/value dtypes differ;
            attn_mask is neither bool nor floating; is_causal not a bool.
        ValueError: query, key or value contains NaN or ±inf; a float attn_mask contains NaN or +inf
            (-inf = blocked is fine); finite inputs whose scores overflow (the message gives their scale);
            the tensors are on different devices; E = 0 or S = 0;
            query and key differ in E; key and value differ in S or batch dims; batch dims
            or the mask cannot broadcast (the message names the shapes); both attn_mask and
            is_causal; Hq not a multiple of Hkv with enable_gqa; dropout_p outside [0, 1].
    """
    _validate(query, key, value, attn_mask, is_causal, dropout_p, scale, enable_gqa)
    L, S = query.shape[-2], key.shape[-2]
    kv_batch = (*key.shape[:-3], query.shape[-3]) if enable_gqa else key.shape[:-2]  # key/value's heads after repeat
    try:
        batch = torch.broadcast_shapes(query.shape[:-2], kv_batch)
    except RuntimeError:
        hint = " (key/value have fewer heads than query: pass enable_gqa=True)" if (
            query.dim() >= 3 and key.dim() >= 3 and query.shape[-3] != key.shape[-3]
        ) else ""
        raise ValueError(
            f"the batch dims of query {_shape(query)} and key/value {_shape(key)} cannot broadcast{hint}"
        ) from None
    scores_shape = (*batch, L, S)
    if is_causal:  # top-left causal like torch's: query i may attend to keys j <= i
        attn_mask = causal_mask(L, S, device=query.device)
    if attn_mask is not None:
        try:
            full = torch.broadcast_shapes(attn_mask.shape, scores_shape)
        except RuntimeError:
            full = None
        if full != torch.Size(scores_shape):
            raise ValueError(
                f"attn_mask of shape {_shape(attn_mask)} cannot broadcast to the scores' shape {scores_shape} "
                f"(..., L={L}, S={S}) of query {_shape(query)} and key {_shape(key)}"
            )
        attn_mask = attn_mask.to(query.device)
    return _sdpa(query, key, value, attn_mask, dropout_p=dropout_p, scale=scale, enable_gqa=enable_gqa)


def _sdpa(query, key, value, attn_mask=None, *, dropout_p: float = 0.0, scale: float | None = None,
          enable_gqa: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The unchecked core of :func:`scaled_dot_product_attention`: softmax(q kᵀ · scale + mask) v and the weights.

    For callers that have checked their own arguments (``mha``, ``gqa``, ``hf``, ``tiled.naive_attention``):
    query (..., L, E), key (..., Hkv or H, S, E), value (..., S, Ev) of one floating dtype and device;
    attn_mask None, bool (True = may attend) or float (added), broadcastable to (..., L, S) and on that device.
    Only the result is checked: scores that are not finite raise (NaN inputs, or an overflow), never a
    silent NaN. Returns (output (..., L, Ev), weights (..., L, S)) in query's dtype.
    """
    if enable_gqa:
        group = query.shape[-3] // key.shape[-3]
        # (..., Hkv, S, E) -> (..., Hq, S, E): kv head h serves query heads h*group .. h*group+group-1
        key = key.repeat_interleave(group, dim=-3)
        value = value.repeat_interleave(group, dim=-3)

    # Softmax in float32 at least: float16's max is 65504 and its exp underflows early.
    compute = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)

    # scores = Q Kᵀ · scale                                      (..., L, S)
    scores = torch.matmul(query.to(compute), key.to(compute).transpose(-2, -1)) * scale
    if not all_finite(scores):
        # finite inputs whose products overflow: the softmax would give NaN or silent zeros
        for name, t in (("query", query), ("key", key)):
            if bool(torch.isnan(t).any()):
                raise ValueError(f"{name} contains NaN (computed from weights that hold NaN or inf?); expected "
                                 f"finite values, shape {_shape(t)}")
        raise scores_overflow_error(query, key, scale, compute)

    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.to(compute)

    # numerically safe softmax over the keys (dim -1):
    # weights = exp(s - max) / sum exp(s - max); a row of only -inf (all masked) gives 0, not 0/0 = NaN
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    exp = torch.exp(scores - row_max)
    denom = exp.sum(dim=-1, keepdim=True)
    weights = torch.where(denom > 0, exp / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(exp))

    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)

    # output = weights · V                                       (..., L, Ev)
    output = torch.matmul(weights, value.to(compute))
    return output.to(query.dtype), weights.to(query.dtype)
