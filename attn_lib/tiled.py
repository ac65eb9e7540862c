"""Tiled attention with an online softmax: FlashAttention-2's algorithm in plain PyTorch.

Naive attention builds the whole (L, S) score matrix, takes its softmax and multiplies by V.
The tiled version walks over blocks of ``block_q`` query rows (outer loop) and, for each,
over blocks of ``block_k`` keys (inner loop). Per query row it keeps three running values in
float32 (float64 for float64 inputs):

- ``m``: the largest score seen so far (the running max),
- ``l``: the sum of ``exp(score - m)`` over the keys seen so far (the running sum),
- ``acc``: the sum of ``exp(score - m) * value`` over the keys seen so far (the accumulator).

When a new block of keys raises the max from ``m_old`` to ``m_new``, everything accumulated so
far was computed relative to ``m_old``; multiplying ``l`` and ``acc`` by ``exp(m_old - m_new)``
moves it to the new reference, so after the last block ``acc / l`` is *exactly* the softmax-
weighted average of the values: no score matrix larger than one (block_q, block_k) tile exists.

Sources: Dao et al., "FlashAttention" (2022), Algorithm 1 and section 3.1 (tiling, online
softmax); Dao, "FlashAttention-2" (2023), Algorithm 1 (query blocks in the outer loop, a single
rescale at the end) and Algorithm 2 (the backward pass recomputing the probabilities from the
saved log-sum-exp); Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018).

The functions below the main one (:func:`online_softmax_update`, :func:`online_softmax_trace`,
:func:`causal_tiles`, :func:`plot_online_softmax_step`, :func:`measure_peak_memory`) are the small
pieces notebook 09 explains and its widget and exercises use.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass

import torch

__all__ = [
    "tiled_attention",
    "naive_attention",
    "online_softmax_update",
    "OnlineSoftmaxStep",
    "online_softmax_trace",
    "causal_tiles",
    "plot_online_softmax_step",
    "measure_peak_memory",
]


# ----------------------------------------------------------------------------------------------
# argument checks (shared with attn_lib.flash)
# ----------------------------------------------------------------------------------------------
def _check_qkv(query, key, value, *, same_head_dim_v: bool = False) -> None:
    """Raise TypeError/ValueError with a clear message for bad query/key/value."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape (..., seq_len, head_dim), got shape {tuple(t.shape)}")
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(f"query, key and value must share one dtype, got {query.dtype}, {key.dtype}, {value.dtype}")
    if not (query.device == key.device == value.device):
        raise ValueError(f"query, key and value must be on one device, got {query.device}, {key.device}, {value.device}")
    if not (query.shape[:-2] == key.shape[:-2] == value.shape[:-2]):
        raise ValueError(
            "query, key and value must have the same leading (batch, head) dims, got "
            f"{tuple(query.shape[:-2])}, {tuple(key.shape[:-2])}, {tuple(value.shape[:-2])}"
        )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query and key must have the same head_dim, got {query.shape[-1]} and {key.shape[-1]}")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key and value must have the same seq_len S, got {key.shape[-2]} and {value.shape[-2]}")
    if query.shape[-1] == 0:
        raise ValueError("head_dim must be at least 1, got 0")
    if same_head_dim_v and value.shape[-1] != query.shape[-1]:
        raise ValueError(
            f"value's head_dim must equal query's here, got {value.shape[-1]} and {query.shape[-1]}"
        )


def _check_scale(scale, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__} {scale!r}")
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    return float(scale)


def _check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return value


def _check_block(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return value


# Tests set this to True: outputs are then allocated filled with NaN instead of left uninitialised,
# so an element the algorithm forgets to write shows up as NaN.
_POISON_OUTPUTS = False


def _new_output(*shape, dtype, device) -> torch.Tensor:
    if _POISON_OUTPUTS:
        return torch.full(shape, math.nan, dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for the running statistics, float64 when the inputs are float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


# ----------------------------------------------------------------------------------------------
# the forward pass: FlashAttention-2, Algorithm 1
# ----------------------------------------------------------------------------------------------
def _tiled_forward(q, k, v, mask, scale: float, is_causal: bool, block_q: int, block_k: int):
    """q (N, L, E), k (N, S, E), v (N, S, Ev), mask None or bool (..., L, S) -> out (N, L, Ev), lse (N, L).

    ``out`` has q's dtype; ``lse`` (natural log) has the accumulation dtype (float32, or float64).
    """
    N, L, E = q.shape
    S, Ev = k.shape[1], v.shape[2]
    acc_t = _acc_dtype(q.dtype)
    out = _new_output(N, L, Ev, dtype=q.dtype, device=q.device)
    lse = _new_output(N, L, dtype=acc_t, device=q.device)
    for i0 in range(0, L, block_q):  # outer loop: one block of query rows
        i1 = min(i0 + block_q, L)  # ragged tail: the last block may be shorter
        q_i = q[:, i0:i1].to(acc_t) * scale  # (N, Bq, E), scale folded into q once
        m_i = torch.full((N, i1 - i0), -math.inf, dtype=acc_t, device=q.device)  # running max
        l_i = torch.zeros(N, i1 - i0, dtype=acc_t, device=q.device)  # running sum
        acc = torch.zeros(N, i1 - i0, Ev, dtype=acc_t, device=q.device)  # running output (unnormalised)
        # Causal (top-left aligned, like torch): row r sees keys c <= r. Key blocks starting at or
        # after i1 lie entirely above the diagonal: they are skipped, never computed.
        kv_end = min(S, i1) if is_causal else S
        for j0 in range(0, kv_end, block_k):  # inner loop: one block of keys and values
            j1 = min(j0 + block_k, S)
            s = q_i @ k[:, j0:j1].to(acc_t).transpose(1, 2)  # (N, Bq, Bk) scores of this tile
            if is_causal and j1 - 1 > i0:  # the tile crosses the diagonal: mask keys after the query
                rows = torch.arange(i0, i1, device=q.device)[:, None]
                cols = torch.arange(j0, j1, device=q.device)[None, :]
                s = s.masked_fill(cols > rows, -math.inf)
            if mask is not None:
                s = s.masked_fill(~_mask_tile(mask, i0, i1, j0, j1), -math.inf)
            m_new = torch.maximum(m_i, s.amax(dim=-1))  # m_new = max(m_old, rowmax(S_ij))
            # A row that has seen only masked keys keeps m = -inf; use 0 as its reference so that
            # exp(-inf - 0) = 0 instead of exp(-inf - (-inf)) = NaN.
            m_ref = torch.where(m_new == -math.inf, 0.0, m_new)
            alpha = torch.exp(m_i - m_ref)  # exp(m_old - m_new): moves old sums to the new max
            p = s.sub_(m_ref[..., None]).exp_()  # P_ij = exp(S_ij - m_new), (N, Bq, Bk), in place over s
            l_i = alpha * l_i + p.sum(dim=-1)  # l_new = exp(m_old - m_new) l_old + rowsum(P_ij)
            acc = torch.baddbmm(acc * alpha[..., None], p, v[:, j0:j1].to(acc_t))  # acc_new = alpha acc_old + P_ij V_j
            m_i = m_new
        # Final rescale, once per query block (FlashAttention-2): O_i = acc / l. A row with no
        # visible key (l = 0) gets output 0 and log-sum-exp -inf, never NaN.
        empty = l_i == 0
        l_safe = torch.where(empty, 1.0, l_i)
        out[:, i0:i1] = (acc / l_safe[..., None]).to(q.dtype)
        lse[:, i0:i1] = torch.where(empty, -math.inf, m_i + torch.log(l_safe))  # logsumexp_j S_ij
    return out, lse


# ----------------------------------------------------------------------------------------------
# the backward pass: FlashAttention-2, Algorithm 2 (recompute P from the log-sum-exp)
# ----------------------------------------------------------------------------------------------
def _tiled_backward(q, k, v, mask, out, lse, d_out, d_lse, scale: float, is_causal: bool, block_q: int, block_k: int):
    """Gradients of tiled attention, recomputing each probability tile from the saved log-sum-exp.

    All tensors are 3-D (N, L or S, dim); ``d_lse`` may be None. Returns (dq, dk, dv) in the
    inputs' dtypes. Memory stays O(N (L + S) dim): no (L, S) matrix is ever stored.

    With P = softmax(S) and O = P V: dV = P^T dO, dP = dO V^T, dS = P * (dP - D) with
    D = rowsum(dO * O) (FlashAttention-2, eq. in section 2.3.2), dQ = scale dS K, dK = scale dS^T Q.
    A gradient flowing into the log-sum-exp adds d_lse * P to dS, since d lse / d S = P.
    """
    N, L, E = q.shape
    S = k.shape[1]
    acc_t = _acc_dtype(q.dtype)
    d_out = d_out.to(acc_t)
    delta = (d_out * out.to(acc_t)).sum(dim=-1)  # D_i = rowsum(dO_i * O_i), (N, L)
    if d_lse is not None:
        delta = delta - d_lse.to(acc_t)
    lse_ref = torch.where(lse == -math.inf, 0.0, lse.to(acc_t))  # fully masked rows: P = exp(-inf) = 0
    dq = torch.zeros(N, L, E, dtype=acc_t, device=q.device)
    dk = _new_output(N, S, E, dtype=acc_t, device=q.device)
    dv = _new_output(N, S, v.shape[2], dtype=acc_t, device=q.device)
    for j0 in range(0, S, block_k):  # outer loop over key blocks: dK_j and dV_j stay on chip
        j1 = min(j0 + block_k, S)
        k_j, v_j = k[:, j0:j1].to(acc_t), v[:, j0:j1].to(acc_t)
        dk_j = torch.zeros(N, j1 - j0, E, dtype=acc_t, device=q.device)
        dv_j = torch.zeros(N, j1 - j0, v.shape[2], dtype=acc_t, device=q.device)
        # causal: query rows before j0 see none of these keys; their blocks are skipped
        i_start = (j0 // block_q) * block_q if is_causal else 0
        for i0 in range(i_start, L, block_q):
            i1 = min(i0 + block_q, L)
            q_i = q[:, i0:i1].to(acc_t)
            s = (q_i @ k_j.transpose(1, 2)) * scale  # recompute S_ij
            if is_causal and j1 - 1 > i0:
                rows = torch.arange(i0, i1, device=q.device)[:, None]
                cols = torch.arange(j0, j1, device=q.device)[None, :]
                s = s.masked_fill(cols > rows, -math.inf)
            if mask is not None:
                s = s.masked_fill(~_mask_tile(mask, i0, i1, j0, j1), -math.inf)
            p = torch.exp(s - lse_ref[:, i0:i1, None])  # P_ij = exp(S_ij - lse_i), exact probabilities
            do_i = d_out[:, i0:i1]
            dv_j += p.transpose(1, 2) @ do_i  # dV_j += P_ij^T dO_i
            dp = do_i @ v_j.transpose(1, 2)  # dP_ij = dO_i V_j^T
            ds = p * (dp - delta[:, i0:i1, None])  # dS_ij = P_ij * (dP_ij - D_i)
            dq[:, i0:i1] += scale * (ds @ k_j)  # dQ_i += scale dS_ij K_j
            dk_j += scale * (ds.transpose(1, 2) @ q_i)  # dK_j += scale dS_ij^T Q_i
        dk[:, j0:j1] = dk_j
        dv[:, j0:j1] = dv_j
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class _TiledAttentionFunction(torch.autograd.Function):
    """Autograd wrapper: forward saves only (q, k, v, out, lse); backward recomputes."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, is_causal, block_q, block_k):
        out, lse = _tiled_forward(q, k, v, mask, scale, is_causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask = mask
        ctx.args = (scale, is_causal, block_q, block_k)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, out, lse = ctx.saved_tensors
        if d_out is None:
            d_out = torch.zeros_like(out)
        dq, dk, dv = _tiled_backward(q, k, v, ctx.mask, out, lse, d_out, d_lse, *ctx.args)
        return dq, dk, dv, None, None, None, None, None


def _mask_tile(mask, i0: int, i1: int, j0: int, j1: int):
    """The (N, i1 - i0, j1 - j0) tile of a broadcast (..., L, S) mask (copies one tile at most)."""
    return mask[..., i0:i1, j0:j1].reshape(-1, i1 - i0, j1 - j0)


def _expand_mask(attn_mask, lead: tuple, L: int, S: int, device):
    """Check a bool mask and broadcast it to (..., L, S) (a view: no (L, S) copy per head is made)."""
    if attn_mask is None:
        return None
    if not isinstance(attn_mask, torch.Tensor):
        raise TypeError(f"attn_mask must be a bool torch.Tensor or None, got {type(attn_mask).__name__}")
    if attn_mask.dtype != torch.bool:
        raise TypeError(f"attn_mask must be a bool tensor (True = may attend), got dtype {attn_mask.dtype}")
    try:
        mask = attn_mask.to(device).expand(*lead, L, S)
    except RuntimeError:
        raise ValueError(
            f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to (..., L, S) = {(*lead, L, S)}"
        ) from None
    return mask


def tiled_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = 128,
    block_k: int = 128,
    return_lse: bool = False,
    attn_mask: torch.Tensor | None = None,
):
    """Scaled dot-product attention computed tile by tile with an online softmax (FlashAttention-2).

    Same result as ``torch.nn.functional.scaled_dot_product_attention(query, key, value,
    is_causal=is_causal, scale=scale)``, but no (L, S) matrix is materialised: only one
    (block_q, block_k) tile of scores exists at a time, and the extra memory is O(L * head_dim).

    Args:
        query: (..., L, E), e.g. (B, H, L, E). Any floating dtype; the running max, running sum and
            accumulator are float32 (float64 when the inputs are float64).
        key: (..., S, E), same leading dims (B, H) as ``query``.
        value: (..., S, Ev).
        is_causal: mask key positions after the query position, aligned top-left like torch
            (row r sees keys 0..r, also when L != S). Key blocks fully above the diagonal are skipped.
        scale: multiplies the logits; default 1/sqrt(E).
        block_q: query rows per tile (the outer loop). The last tile may be shorter.
        block_k: keys per tile (the inner loop). The last tile may be shorter.
        return_lse: also return the log-sum-exp of each row's logits (natural log).
        attn_mask: optional bool mask broadcastable to (..., L, S), True = may attend (attn_lib's
            convention). A row whose keys are all masked gets output 0 and log-sum-exp -inf (no NaN).

    Returns:
        ``output`` (..., L, Ev) in the inputs' dtype, or ``(output, lse)`` when ``return_lse``; lse
        is (..., L), float32 (float64 for float64 inputs), ``lse[r] = log(sum_c exp(scale q_r . k_c))``.

    Gradients: differentiable in query, key and value (also through ``lse``). The backward pass
    saves only the inputs, the output and the log-sum-exp and recomputes each probability tile
    as exp(S_ij - lse_i) (FlashAttention-2, Algorithm 2).

    Raises:
        TypeError: non-tensor or non-floating inputs, mixed dtypes, non-bool mask, bad flag types.
        ValueError: mismatched shapes or devices, non-positive block sizes or scale.

    Source: Dao (2023), "FlashAttention-2", Algorithms 1 and 2.
    """
    _check_qkv(query, key, value)
    _check_flag("is_causal", is_causal)
    _check_flag("return_lse", return_lse)
    _check_block("block_q", block_q)
    _check_block("block_k", block_k)
    scale = _check_scale(scale, query.shape[-1])
    lead, L, E = tuple(query.shape[:-2]), query.shape[-2], query.shape[-1]
    S, Ev = key.shape[-2], value.shape[-1]
    mask = _expand_mask(attn_mask, lead, L, S, query.device)
    # (..., L, E) -> (N, L, E) with N = prod(leading dims); reshape copies only when it must
    n = math.prod(lead)
    q, k, v = query.reshape(n, L, E), key.reshape(n, S, E), value.reshape(n, S, Ev)
    args = (mask, scale, is_causal, block_q, block_k)
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        out, lse = _TiledAttentionFunction.apply(q, k, v, *args)
    else:
        out, lse = _tiled_forward(q, k, v, *args)
    out, lse = out.reshape(*lead, L, Ev), lse.reshape(*lead, L)
    return (out, lse) if return_lse else out


def naive_attention(query, key, value, *, is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """The textbook version: materialise the full (..., L, S) score matrix, softmax, multiply by V.

    query (..., L, E), key (..., S, E), value (..., S, Ev) -> output (..., L, Ev). Causal is
    top-left aligned (like torch). Used as the memory/time baseline in notebook 09 and the benchmark.
    """
    _check_qkv(query, key, value)
    scale = _check_scale(scale, query.shape[-1])
    scores = (query @ key.transpose(-2, -1)) * scale  # (..., L, S): the matrix tiling avoids
    if is_causal:
        L, S = scores.shape[-2:]
        keep = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~keep, -math.inf)
    return torch.softmax(scores, dim=-1) @ value


# ----------------------------------------------------------------------------------------------
# small pieces for notebook 09: one update step, a trace for the widget, causal tiles, memory
# ----------------------------------------------------------------------------------------------
def online_softmax_update(m_old, l_old, acc_old, scores, values):
    """One step of the online softmax: fold a new block of keys into the running state.

    Args:
        m_old: (R,) running max of the scores seen so far (-inf before the first block).
        l_old: (R,) running sum of exp(score - m_old).
        acc_old: (R, Ev) running sum of exp(score - m_old) * value.
        scores: (R, Bk) the scores of the new block of keys (already scaled).
        values: (Bk, Ev) the values of those keys.

    Returns:
        (m_new, l_new, acc_new) with m_new = max(m_old, rowmax(scores)),
        l_new = exp(m_old - m_new) l_old + rowsum(exp(scores - m_new)),
        acc_new = exp(m_old - m_new) acc_old + exp(scores - m_new) @ values.
        ``acc_new / l_new`` is the softmax-weighted average of every value seen so far.

    Source: Milakov & Gimelshein (2018), Algorithm 3; FlashAttention-2, Algorithm 1, lines 8-10.
    """
    m_new = torch.maximum(m_old, scores.amax(dim=-1))
    m_ref = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)  # all -inf so far: avoid NaN
    alpha = torch.exp(m_old - m_ref)
    p = torch.exp(scores - m_ref[..., None])
    l_new = alpha * l_old + p.sum(dim=-1)
    acc_new = alpha[..., None] * acc_old + p @ values
    return m_new, l_new, acc_new


@dataclass(frozen=True)
class OnlineSoftmaxStep:
    """The running state of one query row after a block of keys (a row of the widget's table).

    Attributes:
        tile: index of the key block just processed (0-based).
        start, stop: the keys of that block, ``start <= key < stop``.
        m: running max after the block.
        l: running sum after the block, relative to ``m``.
        acc: (Ev,) running accumulator after the block, relative to ``m``.
        output: (Ev,) ``acc / l``: the attention output over the keys seen so far.
        rescale: ``exp(m_before - m)``, the factor this block applied to the old l and acc.
    """

    tile: int
    start: int
    stop: int
    m: float
    l: float
    acc: torch.Tensor
    output: torch.Tensor
    rescale: float


def online_softmax_trace(scores: torch.Tensor, values: torch.Tensor, block_k: int) -> list[OnlineSoftmaxStep]:
    """Run the online softmax for ONE query row, block by block, and record every state.

    Args:
        scores: (S,) scaled scores of one query against all S keys (float32/float64).
        values: (S, Ev) the values.
        block_k: keys per block (positive int).

    Returns:
        A list of :class:`OnlineSoftmaxStep`, one per key block. After step t, ``output`` equals
        ``softmax(scores[:stop]) @ values[:stop]`` exactly (up to rounding): the rescaling keeps
        the partial result exact at every step, not only at the end.

    Raises:
        ValueError: scores not 1-D, values not (S, Ev), or S = 0.
        TypeError: block_k not a positive int.
    """
    _check_block("block_k", block_k)
    if not isinstance(scores, torch.Tensor) or scores.dim() != 1 or scores.numel() == 0:
        raise ValueError(f"scores must be a non-empty 1-D tensor (S,), got {getattr(scores, 'shape', scores)!r}")
    if not isinstance(values, torch.Tensor) or values.dim() != 2 or values.shape[0] != scores.shape[0]:
        raise ValueError(
            f"values must be a 2-D tensor (S, Ev) with S = {scores.shape[0]}, got {getattr(values, 'shape', values)!r}"
        )
    dt = torch.float64 if scores.dtype == torch.float64 else torch.float32
    scores, values = scores.to(dt), values.to(dt)
    m = torch.full((1,), -math.inf, dtype=dt)
    l = torch.zeros(1, dtype=dt)
    acc = torch.zeros(1, values.shape[1], dtype=dt)
    steps = []
    for t, j0 in enumerate(range(0, scores.shape[0], block_k)):
        j1 = min(j0 + block_k, scores.shape[0])
        m_before = m
        m, l, acc = online_softmax_update(m, l, acc, scores[None, j0:j1], values[j0:j1])
        rescale = 0.0 if m_before.item() == -math.inf else math.exp(m_before.item() - m.item())
        out = acc[0] / l[0] if l.item() > 0 else torch.zeros_like(acc[0])
        steps.append(OnlineSoftmaxStep(t, j0, j1, m.item(), l.item(), acc[0].clone(), out, rescale))
    return steps


def causal_tiles(q_len: int, kv_len: int, block_q: int, block_k: int) -> list[tuple[int, int]]:
    """The (query block, key block) tiles causal attention must compute (top-left aligned).

    Query row r sees keys c <= r. Tile (i, j) covers rows [i*block_q, min((i+1)*block_q, q_len))
    and keys [j*block_k, min((j+1)*block_k, kv_len)); it is needed when its first key is at or
    before its last row: j*block_k <= min((i+1)*block_q, q_len) - 1. Tiles crossing the diagonal
    are computed with a mask; tiles fully above it are skipped.

    Returns:
        Sorted list of (i, j) pairs.

    Raises:
        TypeError / ValueError: an argument is not a positive int.
    """
    for name, value in (("q_len", q_len), ("kv_len", kv_len), ("block_q", block_q), ("block_k", block_k)):
        _check_block(name, value)
    tiles = []
    for i in range(math.ceil(q_len / block_q)):
        last_row = min((i + 1) * block_q, q_len) - 1
        for j in range(math.ceil(kv_len / block_k)):
            if j * block_k <= last_row:
                tiles.append((i, j))
    return tiles


def plot_online_softmax_step(scores: torch.Tensor, values: torch.Tensor, block_k: int, step: int, *, ax=None):
    """Draw the online softmax of one query row after ``step`` blocks (the widget's figure).

    Left: the scores as bars, blocks already seen coloured, the running max as a line. Right: the
    running output ``acc / l`` after this step next to the exact softmax output over all keys.

    Args:
        scores: (S,), values: (S, Ev) as in :func:`online_softmax_trace`.
        block_k: keys per block; step: 0-based index of the block just processed.
        ax: optional pair of matplotlib Axes; created when None.

    Returns:
        The pair of Axes.

    Raises:
        ValueError: ``step`` outside 0..number of blocks - 1.
    """
    import matplotlib.pyplot as plt

    from attn_lib._setup import PALETTE

    trace = online_softmax_trace(scores, values, block_k)
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < len(trace):
        raise ValueError(f"step must be an int in 0..{len(trace) - 1}, got {step!r}")
    st = trace[step]
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(9, 3.2), gridspec_kw={"width_ratios": [3, 2]})
    a0, a1 = ax
    a0.clear()
    a1.clear()
    s = scores.detach().double()
    colours = [PALETTE[0] if c < st.start else PALETTE[1] if c < st.stop else "#BBBBBB" for c in range(len(s))]
    a0.bar(range(len(s)), s.tolist(), color=colours)
    a0.axhline(st.m, color=PALETTE[5], linestyle="--", label=f"running max m = {st.m:.3f}")
    a0.set_xlabel("key position")
    a0.set_ylabel("score")
    a0.set_title(f"block {st.tile}: keys {st.start}..{st.stop - 1}   l = {st.l:.3f}   rescale = {st.rescale:.3f}")
    a0.legend(loc="lower right", fontsize=8)
    exact = torch.softmax(s, dim=0) @ values.detach().double()
    x = torch.arange(values.shape[1])
    a1.bar(x - 0.2, st.output.tolist(), width=0.4, color=PALETTE[1], label="running acc / l")
    a1.bar(x + 0.2, exact.tolist(), width=0.4, color=PALETTE[2], label="softmax over all keys")
    a1.set_xlabel("output dimension")
    a1.set_title("output so far vs final")
    a1.legend(loc="best", fontsize=8)
    return ax


@contextlib.contextmanager
def _quiet_stderr():
    """Silence C-level stderr (the profiler's start/stop log lines) for the duration."""
    try:
        fd = os.dup(2)
    except OSError:  # pragma: no cover - no stderr at all
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(fd, 2)
    finally:
        os.close(fd)


def measure_peak_memory(fn, *args, **kwargs) -> tuple[int, object]:
    """Peak extra CPU memory, in bytes, that torch allocates while running ``fn(*args, **kwargs)``.

    Counts every allocation and free made through PyTorch's CPU allocator during the call (with
    ``torch.profiler``'s memory profiling) and returns the highest running total, i.e. the most
    memory the call held at once beyond what existed before; the returned output counts, the
    inputs do not. Exact and deterministic for a given computation (no RSS noise), but it only
    sees tensors, not the Python interpreter's own memory.

    Returns:
        (peak_bytes, result of the call)
    """
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn(*args, **kwargs)
    events = []

    def walk(node):
        extra = node.extra_fields
        if hasattr(extra, "alloc_size"):
            events.append((node.start_time_ns, extra.alloc_size))
        for child in node.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    events.sort(key=lambda e: e[0])
    total = peak = 0
    for _, size in events:  # frees have negative sizes
        total += size
        peak = max(peak, total)
    return peak, result
