"""The FlashAttention-2 forward kernel in Triton, solved (notebook 09)."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from my_attn._triton import launch


@triton.jit
def _flash_fwd_kernel(Q, K, V, O, LSE, L, S, scale,
                      stride_b, stride_h, stride_l, stride_kb, stride_kh, stride_ks,
                      H: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      IS_CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)                      # which block of query rows
    bh = tl.program_id(1)                           # which (batch, head)
    b, h = bh // H, bh % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)             # (BLOCK_M,)
    dims = tl.arange(0, D)                                        # (D,)
    q = tl.load(Q + b * stride_b + h * stride_h + rows[:, None] * stride_l + dims[None, :],
                mask=rows[:, None] < L, other=0.0)                # (BLOCK_M, D), loaded once
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    end = S
    if IS_CAUSAL:
        end = tl.minimum(S, (start_m + 1) * BLOCK_M)              # key blocks after the diagonal: skipped
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)                    # (BLOCK_N,)
        kv_off = b * stride_kb + h * stride_kh + cols[:, None] * stride_ks + dims[None, :]
        k = tl.load(K + kv_off, mask=cols[:, None] < S, other=0.0)   # (BLOCK_N, D)
        v = tl.load(V + kv_off, mask=cols[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale    # (BLOCK_M, BLOCK_N)
        visible = cols[None, :] < S
        if IS_CAUSAL:
            visible = visible & (cols[None, :] <= rows[:, None])
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        ref = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - ref)
        p = tl.exp(s - ref[:, None])
        l = alpha * l + tl.sum(p, 1)
        acc = alpha[:, None] * acc + tl.dot(p, v, input_precision="ieee")
        m = m_new
    empty = l == 0.0
    l_safe = tl.where(empty, 1.0, l)
    out = acc / l_safe[:, None]
    lse = tl.where(empty, float("-inf"), m + tl.log(l_safe))
    ok = rows < L
    tl.store(O + b * stride_b + h * stride_h + rows[:, None] * stride_l + dims[None, :], out, mask=ok[:, None])
    tl.store(LSE + bh * L + rows, lse, mask=ok)


def flash_forward(query, key, value, *, is_causal=False, scale=None, block_m=16, block_n=16):
    B, H, L, D = query.shape
    S = key.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    q, k, v = query.contiguous(), key.contiguous(), value.contiguous()
    out = torch.empty_like(q)                                     # (B, H, L, D)
    lse = torch.empty(B, H, L, dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(L, block_m), B * H)
    launch(_flash_fwd_kernel, grid, q, k, v, out, lse, L, S, scale,
           q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
           H=H, D=D, BLOCK_M=block_m, BLOCK_N=block_n, IS_CAUSAL=is_causal)
    return out, lse
