"""Scaled dot-product attention, solved (notebook 03)."""

from __future__ import annotations

import math

import torch


def softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(s - max) / sum exp(s - max) along dim: the max keeps exp from overflowing."""
    m = scores.amax(dim=dim, keepdim=True)
    e = (scores - m).exp()
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, dropout_p=0.0, scale=None,
                                 enable_gqa=False):
    """softmax(Q·Kᵀ·scale + mask)·V; returns (output, weights)."""
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa:  # (..., Hkv, S, E) -> (..., H, S, E): key/value head h serves query heads h·G .. h·G + G - 1
        group = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(group, dim=-3), value.repeat_interleave(group, dim=-3)
    work = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    scores = query.to(work) @ key.to(work).transpose(-2, -1) * scale                    # (..., L, S)
    L, S = scores.shape[-2:]
    if is_causal:
        attn_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, -math.inf)
    elif attn_mask is not None:
        scores = scores + attn_mask.to(work)
    # a row with no key allowed: weights 0 and output 0 (attn_lib's rule), not softmax's 0/0 = NaN
    blocked = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = softmax(scores.masked_fill(blocked, 0.0), dim=-1).masked_fill(blocked, 0.0)
    if dropout_p > 0:  # drop each weight with probability p, scale the survivors by 1/(1 - p)
        weights = weights * (torch.rand_like(weights) >= dropout_p) / (1 - dropout_p)
    return (weights @ value.to(work)).to(query.dtype), weights.to(query.dtype)
