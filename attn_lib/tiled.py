"""Tiled attention with an online softmax: FlashAttention-2's algorithm in plain PyTorch.

Shape legend (as :mod:`attn_lib.attention`): B batch, H query heads, Hkv key/value heads, L queries,
S keys, E head_dim of query and key, Ev head_dim of value.

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

Grouped-query attention (``enable_gqa``) never repeats K and V: the G = H / Hkv query heads that
share a key/value head are stacked as extra rows of one tile, so one matrix product serves the group.

Sources: Dao et al., "FlashAttention" (2022), Algorithm 1 and section 3.1 (tiling, online
softmax); Dao, "FlashAttention-2" (2023), Algorithm 1 (query blocks in the outer loop, a single
rescale at the end) and Algorithm 2 (the backward pass recomputing the probabilities from the
saved log-sum-exp); Milakov & Gimelshein, "Online normalizer calculation for softmax" (2018);
Rabe & Staats, "Self-attention does not need O(n^2) memory" (2021); Press et al., "Train Short,
Test Long" (ALiBi, 2022).

The functions below the main one (:func:`online_softmax_update`, :func:`online_softmax_trace`,
:func:`causal_tiles`, :func:`plot_online_softmax_step`, :func:`measure_peak_memory`) are the small
pieces notebook 09 explains and its widget and exercises use.

Why one module of over 400 lines: the tiled algorithm, its backward pass and the small pieces notebook 09
teaches with it (one online-softmax update, causal tiles, memory) are one idea, read side by side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from dataclasses import dataclass

import torch

from attn_lib._checks import (
    check_attn_mask,
    check_bool,
    check_choice,
    check_finite,
    check_int,
    check_qkv,
    check_scale,
    check_tensor,
    scores_overflow_error,
    shape_of,
)

__all__ = [
    "tiled_attention",
    "naive_attention",
    "online_softmax_update",
    "OnlineSoftmaxStep",
    "online_softmax_trace",
    "causal_tiles",
    "plot_online_softmax_step",
    "measure_peak_memory",
    "CAUSAL_ALIGNS",
]

CAUSAL_ALIGNS = ("top_left", "bottom_right")  # the values of masks.causal_mask's ``align``

# Default tiles on the CPU. The loop body is a handful of whole-tile tensor operations, so bigger tiles
# mean fewer Python-level steps; 256 x 512 float32 scores for 8 heads is 4 MiB, small next to the output
# at long lengths. Measured with `python -m attn_lib.bench cpu` (docs/benchmarks.md).
BLOCK_Q = 256
BLOCK_K = 512


# ----------------------------------------------------------------------------------------------
# argument checks shared with attn_lib.flash
# ----------------------------------------------------------------------------------------------
def _check_block(name: str, value) -> int:
    return check_int(name, value, minimum=1)


@dataclass(frozen=True)
class _Problem:
    """The checked arguments, with q/k/v viewed as q (N, G, L, E), k (N, S, E), v (N, S, Ev).

    N = (batch elements) x Hkv, G = H / Hkv query heads per key/value head (G = 1 without GQA);
    ``lead`` is query's shape without (L, E). ``mask`` is attn_mask broadcast (a view) to (*lead, L, S).
    ``slopes`` (N, G) float32/64 or None. ``offset`` = S - L for bottom-right causal, else 0.
    """

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    lead: tuple
    mask: torch.Tensor | None
    slopes: torch.Tensor | None
    scale: float
    is_causal: bool
    offset: int


def _prepare(query, key, value, attn_mask, is_causal, causal_align, scale, enable_gqa, alibi_slopes,
             *, allow_float_mask: bool = True) -> _Problem:
    """Every check of tiled_attention / flash_attention, then the (N, G, L, E) views the loops use."""
    check_bool("is_causal", is_causal)
    check_choice("causal_align", causal_align, CAUSAL_ALIGNS)
    check_bool("enable_gqa", enable_gqa)
    check_qkv(query, key, value, enable_gqa=enable_gqa)
    if enable_gqa:
        if query.shape[:-3] != key.shape[:-3]:
            raise ValueError(f"query and key must have the same batch dims before the heads dim: query shape "
                             f"{shape_of(query)}, key shape {shape_of(key)}")
    elif query.shape[:-2] != key.shape[:-2]:
        raise ValueError(f"query and key must have the same batch/head dims (..., H) (pass enable_gqa=True for "
                         f"fewer key/value heads): query shape {shape_of(query)}, key shape {shape_of(key)}")
    scale = check_scale(scale, query.shape[-1])
    lead, (L, E), (S, Ev) = tuple(query.shape[:-2]), query.shape[-2:], value.shape[-2:]
    H = lead[-1] if lead else 1
    hkv = key.shape[-3] if enable_gqa else H
    G = H // hkv if hkv else 1  # zero heads (H = Hkv = 0): an empty problem, as torch returns an empty tensor
    n = math.prod(lead) // G
    q = query.reshape(n, G, L, E)  # (..., Hkv, G, L, E): query head h = hkv_index * G + g, as torch's enable_gqa
    k, v = key.reshape(n, S, E), value.reshape(n, S, Ev)
    mask = check_attn_mask(attn_mask, (*lead, L, S), allow_float=allow_float_mask)
    if mask is not None:
        mask = mask.to(query.device).expand(*lead, L, S)  # a view: no (L, S) copy per head
        if mask.is_floating_point():
            mask = mask.to(_acc_dtype(query.dtype))
    slopes = None
    if alibi_slopes is not None:
        slopes = _alibi_rows(alibi_slopes, query, lead, n, G, hkv)
    offset = S - L if (is_causal and causal_align == "bottom_right") else 0
    _check_scores_fit(q, k, scale)
    return _Problem(q, k, v, lead, mask, slopes, scale, is_causal, offset)


def _alibi_rows(alibi_slopes, query, lead, n: int, G: int, hkv: int) -> torch.Tensor:
    """(H,) slopes, or (B, H) per batch element as flash-attn accepts -> (N, G): the slope of each row group."""
    check_tensor("alibi_slopes", alibi_slopes, floating=True, ndim=(1, 2))
    H = lead[-1] if lead else 1
    per_head = alibi_slopes.dim() == 1 and alibi_slopes.shape[0] == H and query.dim() >= 3
    per_batch = alibi_slopes.dim() == 2 and query.dim() == 4 and shape_of(alibi_slopes) == lead
    if not (per_head or per_batch):
        raise ValueError(f"alibi_slopes must have shape (H,) = ({H},), one slope per query head, or (B, H) = "
                         f"{lead if query.dim() == 4 else '(B, H)'} for a query (B, H, L, E), one row per batch "
                         f"element as flash-attn takes; got shape {shape_of(alibi_slopes)} for query shape "
                         f"{shape_of(query)}")
    check_finite("alibi_slopes", alibi_slopes)
    slopes = alibi_slopes.to(query.device, _acc_dtype(query.dtype))
    if per_batch:  # (B, H) -> (B * Hkv, G): row group n = (b, kv head), its G query heads
        return slopes.reshape(n, G)
    # (H,) -> (N, G): the same slopes for every batch element; a few numbers, not an (L, S) bias
    return slopes.reshape(hkv, G).repeat(n // hkv if hkv else 0, 1)


def _check_scores_fit(q: torch.Tensor, k: torch.Tensor, scale: float) -> None:
    """Refuse finite inputs whose scores scale * q . k overflow the accumulation dtype (one rule for all paths).

    ``scaled_dot_product_attention`` raises on such scores; the tiled loop and the kernels would return NaN
    (inf - inf in the online softmax). Cauchy-Schwarz bounds every score by scale * max|q_i| * max|k_j|
    (row norms): when that bound is far below the dtype's maximum, which is nearly always, nothing more is
    done (two norms, O(L E) work). Otherwise the largest score is computed exactly, in float64, one block of
    query rows at a time (no (L, S) matrix), and a score beyond half the maximum is refused.
    """
    if q.numel() == 0 or k.numel() == 0:
        return
    acc = _acc_dtype(q.dtype)
    big = torch.finfo(acc).max
    q_norm = float(torch.linalg.vector_norm(q.detach(), dim=-1, dtype=acc).amax())
    k_norm = float(torch.linalg.vector_norm(k.detach(), dim=-1, dtype=acc).amax())
    if scale * q_norm * k_norm < big / 4:  # |scale q.k| <= scale |q| |k| (inf norms fall through)
        return
    n, G, L, E = q.shape
    worst = 0.0
    k64 = k.detach().to(torch.float64).transpose(1, 2)
    for i0 in range(0, L, BLOCK_Q):
        s = torch.bmm(q[:, :, i0:i0 + BLOCK_Q].detach().to(torch.float64).reshape(n, -1, E), k64) * scale
        worst = max(worst, float(s.abs().amax()))
    if worst > big / 2:
        raise scores_overflow_error(q, k, scale, acc)


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
# one tile of scores: causal mask, attn_mask and ALiBi bias applied in place
# ----------------------------------------------------------------------------------------------
def _tile_scores(p: _Problem, q_i, k_j, i0: int, i1: int, j0: int, j1: int):
    """S_ij = scale q_i k_j^T (+ ALiBi, + float mask), masked to -inf; q_i (N, G*Bq, E) -> (N, G, Bq, Bk).

    ``q_i`` already carries the scale. Masks are sliced to this tile before any reshape, so at most one
    tile of a broadcast mask is ever copied.
    """
    n, G = p.q.shape[:2]
    # one product for the whole group; K_j^T copied to a contiguous (E, Bk) block first: on the CPU the
    # product is about 25 % faster that way, more than the copy costs (measured, torch 2.13)
    s = torch.bmm(q_i, k_j.transpose(1, 2).contiguous()).view(n, G, i1 - i0, j1 - j0)
    if p.is_causal and j1 - 1 > i0 + p.offset:  # the tile crosses the diagonal (key c visible iff c <= r + offset)
        rows = torch.arange(i0, i1, device=s.device)[:, None]
        cols = torch.arange(j0, j1, device=s.device)[None, :]
        s.masked_fill_(cols > rows + p.offset, -math.inf)
    if p.slopes is not None:  # ALiBi: -m_h |(r + S - L) - c|, query r at position r + S - L (bottom-right)
        s.sub_(p.slopes[:, :, None, None] * _alibi_distance(p, i0, i1, j0, j1, s.dtype))
    if p.mask is not None:
        tile = p.mask[..., i0:i1, j0:j1].reshape(n, G, i1 - i0, j1 - j0)
        if tile.dtype == torch.bool:
            s.masked_fill_(~tile, -math.inf)
        else:
            s.add_(tile)
    return s


def _alibi_distance(p: _Problem, i0: int, i1: int, j0: int, j1: int, dtype) -> torch.Tensor:
    """(Bq, Bk) |(r + S - L) - c| for the tile's rows r and keys c: ALiBi's distance on the padded tensor."""
    S, L = p.k.shape[1], p.q.shape[2]
    rows = torch.arange(i0, i1, device=p.q.device)[:, None] + (S - L)
    return (rows - torch.arange(j0, j1, device=p.q.device)[None, :]).abs().to(dtype)


# ----------------------------------------------------------------------------------------------
# the forward pass: FlashAttention-2, Algorithm 1
# ----------------------------------------------------------------------------------------------
def _tiled_forward(p: _Problem, block_q: int, block_k: int):
    """-> out (N, G, L, Ev) in q's dtype, lse (N, G, L) in the accumulation dtype (natural log)."""
    q, k, v = p.q, p.k, p.v
    n, G, L, E = q.shape
    S, Ev = k.shape[1], v.shape[2]
    acc_t = _acc_dtype(q.dtype)
    out = _new_output(n, G, L, Ev, dtype=q.dtype, device=q.device)
    lse = _new_output(n, G, L, dtype=acc_t, device=q.device)
    for i0 in range(0, L, block_q):  # outer loop over query blocks (Algorithm 1, line 3)
        i1 = min(i0 + block_q, L)  # ragged tail: the last block may be shorter
        R = G * (i1 - i0)  # rows of this tile: Bq rows of each of the G heads sharing the keys
        q_i = (q[:, :, i0:i1].to(acc_t) * p.scale).reshape(n, R, E)  # scale folded into q once (line 4)
        m_i = torch.full((n, R), -math.inf, dtype=acc_t, device=q.device)  # running max (line 5)
        l_i = torch.zeros(n, R, dtype=acc_t, device=q.device)  # running sum
        acc = torch.zeros(n, R, Ev, dtype=acc_t, device=q.device)  # running output, unnormalised
        # causal: key c is visible from row r iff c <= r + offset; later key blocks are never computed
        kv_end = max(0, min(S, i1 + p.offset)) if p.is_causal else S
        for j0 in range(0, kv_end, block_k):  # inner loop over key blocks (line 6)
            j1 = min(j0 + block_k, S)
            s = _tile_scores(p, q_i, k[:, j0:j1].to(acc_t), i0, i1, j0, j1).view(n, R, j1 - j0)  # S_ij (line 8)
            m_new = torch.maximum(m_i, s.amax(dim=-1))  # m_new = max(m_old, rowmax(S_ij))    (line 9)
            # A row that has seen only masked keys keeps m = -inf; use 0 as its reference so that
            # exp(-inf - 0) = 0 instead of exp(-inf - (-inf)) = NaN.
            m_ref = torch.where(m_new == -math.inf, 0.0, m_new)
            alpha = torch.exp(m_i - m_ref)  # exp(m_old - m_new): moves the old sums to the new max
            pt = s.sub_(m_ref[..., None]).exp_()  # P_ij = exp(S_ij - m_new), in place over s         (line 9)
            l_i = alpha * l_i + pt.sum(dim=-1)  # l_new = exp(m_old - m_new) l_old + rowsum(P_ij)
            acc = torch.baddbmm(acc * alpha[..., None], pt, v[:, j0:j1].to(acc_t))  # O = alpha O + P_ij V_j (line 10)
            m_i = m_new
            del s, pt  # free this tile before the next one is allocated: one tile alive at a time
        # Final rescale, once per query block (line 12): O_i = acc / l. A row with no visible key
        # (l = 0) gets output 0 and log-sum-exp -inf, never NaN.
        empty = l_i == 0
        l_safe = torch.where(empty, 1.0, l_i)
        out[:, :, i0:i1] = (acc / l_safe[..., None]).view(n, G, i1 - i0, Ev).to(q.dtype)
        lse_i = torch.where(empty, -math.inf, m_i + torch.log(l_safe))  # L_i = m + log l        (line 13)
        lse[:, :, i0:i1] = lse_i.view(n, G, i1 - i0)
    return out, lse


# ----------------------------------------------------------------------------------------------
# the backward pass: FlashAttention-2, Algorithm 2 (recompute P from the log-sum-exp)
# ----------------------------------------------------------------------------------------------
def _tiled_backward(p: _Problem, out, lse, d_out, d_lse, block_q: int, block_k: int, *,
                    mask_grad: bool = False, slopes_grad: bool = False):
    """Gradients of tiled attention, recomputing each probability tile from the saved log-sum-exp.

    ``out``, ``d_out`` (N, G, L, Ev); ``lse``, ``d_lse`` (N, G, L), ``d_lse`` may be None. Returns
    (dq, dk, dv, d_mask, d_slopes): dq, dk, dv shaped like p.q, p.k, p.v in their dtypes; no (L, S) matrix is
    stored for them. ``mask_grad``: d_mask, the gradient of a float attn_mask, shaped like p.mask (..., L, S)
    (it is dS itself, since the mask is added to the logits; an (L, S) tensor because the mask is one);
    ``slopes_grad``: d_slopes (N, G) = -sum over the tile of dS * |r + S - L - c| (the bias is -m_h * distance).
    Both are None when not asked for.

    With P = softmax(S) and O = P V: dV = P^T dO, dP = dO V^T, dS = P * (dP - D) with
    D = rowsum(dO * O) (FlashAttention-2, section 2.3.2 and Algorithm 2, line 4), dQ = scale dS K,
    dK = scale dS^T Q. A gradient flowing into the log-sum-exp adds d_lse * P to dS (d lse / d S = P).
    With GQA, the G heads sharing a key/value head are rows of the same tile, so dK and dV are summed
    over the group by the products themselves.
    """
    q, k, v = p.q, p.k, p.v
    n, G, L, E = q.shape
    S, Ev = k.shape[1], v.shape[2]
    acc_t = _acc_dtype(q.dtype)
    d_out = d_out.to(acc_t)
    delta = (d_out * out.to(acc_t)).sum(dim=-1)  # D_i = rowsum(dO_i * O_i), (N, G, L)   (line 4)
    if d_lse is not None:
        delta = delta - d_lse.to(acc_t)
    lse_ref = torch.where(lse == -math.inf, 0.0, lse.to(acc_t))  # rows that see no key: P = exp(-inf) = 0
    dq = torch.zeros(n, G, L, E, dtype=acc_t, device=q.device)
    dk = _new_output(n, S, E, dtype=acc_t, device=q.device)
    dv = _new_output(n, S, Ev, dtype=acc_t, device=q.device)
    d_mask = torch.zeros(n, G, L, S, dtype=acc_t, device=q.device) if mask_grad else None
    d_slopes = torch.zeros(n, G, dtype=acc_t, device=q.device) if slopes_grad else None
    for j0 in range(0, S, block_k):  # outer loop over key blocks: dK_j, dV_j accumulate on chip (line 5)
        j1 = min(j0 + block_k, S)
        k_j, v_j = k[:, j0:j1].to(acc_t), v[:, j0:j1].to(acc_t)
        dk_j = torch.zeros(n, j1 - j0, E, dtype=acc_t, device=q.device)
        dv_j = torch.zeros(n, j1 - j0, Ev, dtype=acc_t, device=q.device)
        # causal: rows r with r + offset < j0 see none of these keys; their blocks are skipped
        i_start = max(0, (j0 - p.offset) // block_q * block_q) if p.is_causal else 0
        for i0 in range(i_start, L, block_q):  # inner loop over query blocks (line 8)
            i1 = min(i0 + block_q, L)
            R = G * (i1 - i0)
            q_i = q[:, :, i0:i1].to(acc_t).reshape(n, R, E)
            s = _tile_scores(p, q_i * p.scale, k_j, i0, i1, j0, j1).view(n, R, j1 - j0)  # recompute S_ij (line 10)
            pt = torch.exp(s - lse_ref[:, :, i0:i1].reshape(n, R, 1))  # P_ij = exp(S_ij - L_i), exact (line 11)
            do_i = d_out[:, :, i0:i1].reshape(n, R, Ev)
            dv_j += pt.transpose(1, 2) @ do_i  # dV_j += P_ij^T dO_i                         (line 12)
            dp = do_i @ v_j.transpose(1, 2)  # dP_ij = dO_i V_j^T                                (line 13)
            ds = pt * (dp - delta[:, :, i0:i1].reshape(n, R, 1))  # dS_ij = P_ij * (dP_ij - D_i)  (line 14)
            dq[:, :, i0:i1] += (p.scale * (ds @ k_j)).view(n, G, i1 - i0, E)  # dQ_i += scale dS_ij K_j (line 15)
            dk_j += p.scale * (ds.transpose(1, 2) @ q_i)  # dK_j += scale dS_ij^T Q_i               (line 16)
            if mask_grad:  # logits = ... + mask: d mask = dS
                d_mask[:, :, i0:i1, j0:j1] = ds.view(n, G, i1 - i0, j1 - j0)
            if slopes_grad:  # logits = ... - m_h dist: d m_h = -sum dS dist
                dist = _alibi_distance(p, i0, i1, j0, j1, acc_t)
                d_slopes -= (ds.view(n, G, i1 - i0, j1 - j0) * dist).sum(dim=(-2, -1))
        dk[:, j0:j1] = dk_j
        dv[:, j0:j1] = dv_j
    if mask_grad:
        d_mask = d_mask.view(p.mask.shape)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), d_mask, d_slopes


class _TiledAttentionFunction(torch.autograd.Function):
    """Autograd wrapper: forward saves (q, k, v, mask, slopes, out, lse) and no (L, S) matrix; backward recomputes.

    Everything the backward reads goes through ``ctx.save_for_backward``, so a query, key or value changed in
    place after the forward makes the backward raise torch's version-counter error instead of using it.
    A float ``mask`` and the ALiBi ``slopes`` are inputs too: they get gradients when they require them.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, slopes, problem, block_q, block_k):
        out, lse = _tiled_forward(problem, block_q, block_k)
        ctx.save_for_backward(q, k, v, mask, slopes, out, lse)
        ctx.problem, ctx.blocks = problem, (block_q, block_k)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, mask, slopes, out, lse = ctx.saved_tensors
        p = dataclasses.replace(ctx.problem, q=q, k=k, v=v, mask=mask, slopes=slopes)
        if d_out is None:
            d_out = torch.zeros_like(out)
        dq, dk, dv, d_mask, d_slopes = _tiled_backward(
            p, out, lse, d_out, d_lse, *ctx.blocks,
            mask_grad=ctx.needs_input_grad[3], slopes_grad=ctx.needs_input_grad[4])
        return dq, dk, dv, d_mask, d_slopes, None, None, None


def tiled_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    causal_align: str = "top_left",
    scale: float | None = None,
    enable_gqa: bool = False,
    alibi_slopes: torch.Tensor | None = None,
    return_lse: bool = False,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
):
    """Scaled dot-product attention computed tile by tile with an online softmax (FlashAttention-2).

    The same function as ``torch.nn.functional.scaled_dot_product_attention`` (and its ``enable_gqa``),
    but no (L, S) matrix is materialised: one (block_q, block_k) tile of scores exists at a time, and
    the extra memory is O(L * E). Legend: B batch, H query heads, Hkv key/value heads, L queries, S keys,
    E head_dim of query and key, Ev head_dim of value.

    Args:
        query: (..., H, L, E), e.g. (B, H, L, E); float16, bfloat16, float32 or float64. The running
            max, sum and accumulator are float32 (float64 for float64 inputs).
        key: (..., Hkv, S, E); Hkv = H unless ``enable_gqa``.
        value: (..., Hkv, S, Ev); Ev may differ from E.
        attn_mask: None, a bool mask broadcastable to (..., H, L, S) with True = may attend (attn_lib's
            convention, e.g. key padding (B, 1, 1, S)), or a float mask of that shape added to the scores
            (finite values or -inf). It is broadcast as a view; at most one tile of it is copied at a time.
        is_causal: mask the keys after each query. Combined with ``attn_mask`` by AND.
        causal_align: ``"top_left"`` (torch's is_causal: query r sees keys 0..r) or ``"bottom_right"``
            (the L queries are the last L of S positions: query r sees keys 0..r + S - L; FlashAttention-2's
            convention and what decoding with a KV cache needs). The values of ``masks.causal_mask``'s align.
        scale: multiplies the logits; default 1/sqrt(E).
        enable_gqa: grouped-query attention as in torch: query head h reads key/value head h // (H / Hkv).
            K and V are never repeated in memory.
        alibi_slopes: None, (H,) floats m_h, or (B, H) (one row per batch element, as flash-attn accepts, for a
            4-D query): adds the ALiBi bias -m_h |(r + S - L) - c| to the logit of query r and key c, equal to
            ``attn_lib.positional.alibi_bias``. Computed per tile: no (L, S) bias tensor is built. The distance is
            measured on the padded tensor (query r sits at position r + S - L for every batch element), as
            flash-attn's ``flash_attn_func`` does; its variable-length API measures each sequence from its own
            real lengths instead, which differs when query and key padding differ:
            ``attn_mask=attn_lib.positional.alibi_varlen_mask(...)`` gives that convention.
        return_lse: also return the log-sum-exp of each row's logits (natural log).
        block_q: query rows per tile (the outer loop); block_k: keys per tile (the inner loop). The last
            tiles may be shorter. The defaults were chosen for CPU speed (docs/benchmarks.md).

    Returns:
        ``output`` (..., H, L, Ev) in query's dtype, or ``(output, lse)`` when ``return_lse``; lse is
        (..., H, L), float32 (float64 for float64 inputs), ``lse[r] = log(sum_c exp(logit[r, c]))``.
        A row that may attend to no key (all masked; or L > S with bottom-right causal) gets output 0
        and lse -inf, never NaN (torch's function gives NaN there).

    Gradients: differentiable in query, key and value (also through ``lse``), in a float ``attn_mask`` (its
    gradient is dS, summed over broadcast dims; an (..., L, S) tensor is then built) and in ``alibi_slopes``
    (-sum of dS times the distance, per head), and twice differentiable (the backward is PyTorch
    operations). The backward pass saves the inputs, the output and the log-sum-exp, no (L, S) matrix,
    and recomputes each probability tile as exp(S_ij - lse_i) (FlashAttention-2, Algorithm 2); with GQA,
    dK and dV are summed over each group of query heads. An input changed in place after the forward
    makes the backward raise torch's "modified by an inplace operation" error.

    Equivalent to (for a bool ``attn_mask`` and rows that see at least one key)::

        >>> import math, torch
        >>> from attn_lib.masks import causal_mask
        >>> from attn_lib.positional import alibi_bias
        >>> def reference(query, key, value, attn_mask=None, is_causal=False, causal_align="top_left",
        ...               scale=None, enable_gqa=False, alibi_slopes=None):
        ...     L, S = query.shape[-2], key.shape[-2]
        ...     scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
        ...     if enable_gqa:  # repeat each key/value head for its H / Hkv query heads
        ...         g = query.shape[-3] // key.shape[-3]
        ...         key, value = key.repeat_interleave(g, -3), value.repeat_interleave(g, -3)
        ...     logits = scale * query @ key.transpose(-2, -1)                       # (..., H, L, S)
        ...     if alibi_slopes is not None:
        ...         pos = torch.arange(L)[:, None] + S - L - torch.arange(S)[None, :]
        ...         logits = logits - alibi_slopes[:, None, None] * pos.abs()
        ...     allowed = torch.ones(L, S, dtype=torch.bool)
        ...     if is_causal:
        ...         allowed = allowed & causal_mask(L, S, align=causal_align)
        ...     if attn_mask is not None:
        ...         allowed = allowed & attn_mask
        ...     return torch.softmax(logits.masked_fill(~allowed, -math.inf), dim=-1) @ value
        >>> q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 3)
        >>> pad = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])[:, None, None, :]  # (B, 1, 1, S)
        >>> kw = dict(attn_mask=pad, is_causal=True, causal_align="bottom_right", enable_gqa=True,
        ...           alibi_slopes=torch.tensor([0.5, 0.25, 0.125, 0.0625]))
        >>> torch.allclose(tiled_attention(q, k, v, **kw), reference(q, k, v, **kw), atol=1e-5)
        True

    Raises:
        TypeError: non-tensor or non-floating inputs, mixed dtypes, a mask neither bool nor floating,
            a flag that is not a bool, a block size that is not an int.
        ValueError: mismatched shapes or devices, S = 0 or E = 0 (as torch's function), NaN or infinity
            in query/key/value, a mask that does not broadcast, H not a multiple of Hkv, alibi_slopes
            not (H,) or (B, H), an unknown causal_align, block sizes < 1, a scale that is not positive;
            finite inputs whose scores scale * q . k overflow the accumulation dtype (the same error as
            :func:`attn_lib.attention.scaled_dot_product_attention`, instead of NaN).

    Zero heads or an empty batch give an empty output, as torch's function does.

    Source: Dao (2023), "FlashAttention-2", Algorithms 1 and 2; the ALiBi bias of Press et al. (2022).
    """
    p = _prepare(query, key, value, attn_mask, is_causal, causal_align, scale, enable_gqa, alibi_slopes)
    check_bool("return_lse", return_lse)
    _check_block("block_q", block_q)
    _check_block("block_k", block_k)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (p.q, p.k, p.v, p.mask, p.slopes)):
        out, lse = _TiledAttentionFunction.apply(p.q, p.k, p.v, p.mask, p.slopes, p, block_q, block_k)
    else:
        out, lse = _tiled_forward(p, block_q, block_k)
    L, Ev = query.shape[-2], value.shape[-1]
    out, lse = out.reshape(*p.lead, L, Ev), lse.reshape(*p.lead, L)
    return (out, lse) if return_lse else out


def naive_attention(query, key, value, *, is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """The textbook version: materialise the full (..., L, S) score matrix, softmax, multiply by V.

    query (..., L, E), key (..., S, E), value (..., S, Ev) -> output (..., L, Ev). Causal is
    top-left aligned (like torch). Used as the memory/time baseline in notebook 09 and the benchmark.

    Raises:
        TypeError / ValueError: as :func:`tiled_attention`.
    """
    check_qkv(query, key, value)
    check_bool("is_causal", is_causal)
    scale = check_scale(scale, query.shape[-1])
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

    Raises:
        TypeError: an argument is not a floating tensor.
        ValueError: shapes that do not fit together (named in the message).

    Source: Milakov & Gimelshein (2018), Algorithm 3; FlashAttention-2, Algorithm 1, lines 8-10.
    """
    for name, t, nd in (("m_old", m_old, 1), ("l_old", l_old, 1), ("acc_old", acc_old, 2), ("scores", scores, 2),
                        ("values", values, 2)):
        check_tensor(name, t, floating=True, ndim=nd)
    R, Ev = acc_old.shape
    if m_old.shape != (R,) or l_old.shape != (R,) or scores.shape[0] != R or values.shape != (scores.shape[1], Ev):
        raise ValueError(
            "online_softmax_update needs m_old (R,), l_old (R,), acc_old (R, Ev), scores (R, Bk), values (Bk, Ev); "
            f"got m_old {shape_of(m_old)}, l_old {shape_of(l_old)}, acc_old {shape_of(acc_old)}, "
            f"scores {shape_of(scores)}, values {shape_of(values)}")
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
