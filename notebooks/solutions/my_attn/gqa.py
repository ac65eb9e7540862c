"""Grouped-query attention, solved (notebook 08)."""

from __future__ import annotations

import math

import torch


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    if n_rep == 1:
        return x
    *lead, hkv, s, d = x.shape
    # (..., Hkv, S, D) -> (..., Hkv, 1, S, D) -> (..., Hkv, n_rep, S, D): copies of head h side by side
    x = x[..., :, None, :, :].expand(*lead, hkv, n_rep, s, d)
    return x.reshape(*lead, hkv * n_rep, s, d)                                          # (..., Hkv·n_rep, S, D)


def grouped_query_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None):
    *lead, hq, L, E = query.shape
    hkv, S, Ev = key.shape[-3], key.shape[-2], value.shape[-1]
    G = hq // hkv
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    q = query.reshape(*lead, hkv, G * L, E)                                              # (..., Hkv, G·L, E)
    scores = q @ key.transpose(-2, -1) * scale                                           # (..., Hkv, G·L, S)
    scores = scores.reshape(*lead, hkv, G, L, S)                                         # (..., Hkv, G, L, S)
    if is_causal:
        attn_mask = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()       # top-left
    if attn_mask is not None:
        # (..., Hq, L, S) -> (..., Hkv, G, L, S): query head h·G + g is row g of group h
        full = torch.broadcast_shapes(attn_mask.shape, (*lead, hq, L, S))
        mask = attn_mask.expand(full).reshape(*full[:-3], hkv, G, L, S)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, -math.inf)
        else:
            scores = scores + mask
    m = scores.amax(-1, keepdim=True)
    m = torch.where(m == -math.inf, torch.zeros_like(m), m)                              # a fully masked row
    e = (scores - m).exp()
    total = e.sum(-1, keepdim=True)
    weights = e / torch.where(total == 0, torch.ones_like(total), total)                 # 0 where nothing visible
    out = weights.reshape(*weights.shape[:-4], hkv, G * L, S) @ value                    # (..., Hkv, G·L, Ev)
    return (out.reshape(*out.shape[:-3], hq, L, Ev),
            weights.reshape(*weights.shape[:-4], hq, L, S))
