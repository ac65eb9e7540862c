"""Tiled attention with the online softmax, solved (notebook 09)."""

from __future__ import annotations

import math

import torch


def _safe(m):
    """-inf (a row with nothing visible yet) -> 0, so exp(-inf - 0) = 0 instead of exp(NaN)."""
    return torch.where(m == -math.inf, torch.zeros_like(m), m)


def online_softmax_update(m_old, l_old, acc_old, scores, values):
    m_new = torch.maximum(m_old, scores.amax(dim=-1))                                   # (R,)
    ref = _safe(m_new)
    alpha = torch.exp(m_old - ref)                                                      # (R,) at most 1
    p = torch.exp(scores - ref[:, None])                                                # (R, Bk)
    return m_new, alpha * l_old + p.sum(-1), alpha[:, None] * acc_old + p @ values


def merge_states(m_a, l_a, acc_a, m_b, l_b, acc_b):
    m = torch.maximum(m_a, m_b)                                                         # (R,)
    a, b = torch.exp(m_a - _safe(m)), torch.exp(m_b - _safe(m))
    return m, a * l_a + b * l_b, a[:, None] * acc_a + b[:, None] * acc_b


def tiled_attention(query, key, value, *, attn_mask=None, is_causal=False, causal_align="top_left", scale=None,
                    enable_gqa=False, alibi_slopes=None, return_lse=False, block_q=256, block_k=512,
                    window_size=(-1, -1), softcap=None, sinks=None, compile_tile=False):
    for name, v in (("alibi_slopes", alibi_slopes), ("softcap", softcap), ("sinks", sinks)):
        if v is not None:
            raise ValueError(f"my tiled_attention has no {name}; got {v!r}")
    if tuple(window_size) != (-1, -1) or compile_tile:
        raise ValueError("my tiled_attention has no window_size nor compile_tile")
    *lead, H, L, E = query.shape
    Hkv, S, Ev = key.shape[-3], key.shape[-2], value.shape[-1]
    G = H // Hkv if enable_gqa else 1
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    mask = None
    if attn_mask is not None:  # (..., H, L, S) -> (..., Hkv, G, L, S), a view: only a tile of it is copied
        full = torch.broadcast_shapes(attn_mask.shape, (*lead, H, L, S))
        mask = attn_mask.expand(full).reshape(*full[:-3], Hkv, G, L, S)
    q = query.reshape(*lead, Hkv, G, L, E)                                               # (..., Hkv, G, L, E)
    shift = S - L if causal_align == "bottom_right" else 0
    out = torch.zeros(*lead, Hkv, G, L, Ev, dtype=query.dtype, device=query.device)
    lse = torch.zeros(*lead, Hkv, G, L, dtype=query.dtype, device=query.device)
    for i0 in range(0, L, block_q):
        i1 = min(i0 + block_q, L)
        q_i = q[..., i0:i1, :] * scale                                                   # (..., Hkv, G, Bq, E)
        m = torch.full(q_i.shape[:-1], -math.inf, dtype=query.dtype, device=query.device)  # (..., Hkv, G, Bq)
        l = torch.zeros_like(m)
        acc = torch.zeros(*q_i.shape[:-1], Ev, dtype=query.dtype, device=query.device)
        for j0 in range(0, S, block_k):
            j1 = min(j0 + block_k, S)
            k_j = key[..., None, j0:j1, :]                                               # (..., Hkv, 1, Bk, E)
            s = q_i @ k_j.transpose(-2, -1)                                              # (..., Hkv, G, Bq, Bk)
            if is_causal:
                rows = torch.arange(i0, i1, device=query.device)[:, None] + shift
                s = s.masked_fill(torch.arange(j0, j1, device=query.device)[None, :] > rows, -math.inf)
            if mask is not None:
                s = s.masked_fill(~mask[..., i0:i1, j0:j1], -math.inf)
            m_new = torch.maximum(m, s.amax(-1))
            alpha = torch.exp(m - _safe(m_new))
            p = torch.exp(s - _safe(m_new)[..., None])
            l = alpha * l + p.sum(-1)
            acc = alpha[..., None] * acc + p @ value[..., None, j0:j1, :]               # (..., Hkv, G, Bq, Ev)
            m = m_new
        empty = l == 0
        out[..., i0:i1, :] = acc / torch.where(empty, torch.ones_like(l), l)[..., None]
        lse[..., i0:i1] = torch.where(empty, torch.full_like(m, -math.inf), m + torch.log(l))
    out, lse = out.reshape(*lead, H, L, Ev), lse.reshape(*lead, H, L)
    return (out, lse) if return_lse else out
