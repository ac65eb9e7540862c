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
:func:`causal_tiles`, :func:`window_tiles`, :func:`skipped_tiles`) are the small pieces notebook 09 explains
and its widget and exercises use; the widget's figure is :func:`attn_lib.course.viz.plot_online_softmax_step` and
the memory measurement :func:`attn_lib.course.bench.measure_peak_memory`.

Why one module of over 400 lines: the tiled algorithm, its backward pass and the small pieces notebook 09
teaches with it (one online-softmax update, causal tiles, memory) are one idea, read side by side.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from attn_lib._checks import (check_bool, check_choice, check_finite, check_qkv, check_same_device, check_same_dtype,
                              check_scale, check_tensor, shape_of)
from attn_lib.masks import causal_mask
from attn_lib._tiling import (  # noqa: F401  (BLOCK_Q/BLOCK_K/CAUSAL_ALIGNS are public here)
    BLOCK_K,
    BLOCK_Q,
    CAUSAL_ALIGNS,
    _Problem,
    _acc_dtype,
    _check_block,
    _check_window,
    _clip_window,
    _new_output,
    _prepare,
    _value_scale,
)

__all__ = [
    "tiled_attention",
    "naive_attention",
    "online_softmax_update",
    "OnlineSoftmaxStep",
    "online_softmax_trace",
    "causal_tiles",
    "window_tiles",
    "skipped_tiles",
    "merge_partials",
    "CAUSAL_ALIGNS",
]

# ----------------------------------------------------------------------------------------------
# one tile of scores: soft-capping, causal and window masks, attn_mask and ALiBi bias applied in place
# ----------------------------------------------------------------------------------------------
def _tile_scores(p: _Problem, q_i, k_j, i0: int, i1: int, j0: int, j1: int, *, with_tanh: bool = False):
    """S_ij = softcap(scale q_i k_j^T) (+ ALiBi, + float mask), masked to -inf; q_i (N, G*Bq, E) -> (N, G, Bq, Bk).

    ``q_i`` already carries the scale. The order is flash-attn's and Gemma 2's: soft-capping first, on the
    scaled product alone, then the ALiBi bias and the mask. Masks are sliced to this tile before any reshape,
    so at most one tile of a broadcast mask is ever copied. ``with_tanh`` (the backward): also return
    tanh(scale q k / softcap) (N, G, Bq, Bk), whose 1 - tanh^2 is the soft-cap's derivative (None without softcap).
    """
    n, G = p.q.shape[:2]
    # one product for the whole group; K_j^T copied to a contiguous (E, Bk) block first: on the CPU the
    # product is about 25 % faster that way, more than the copy costs (measured, torch 2.13)
    s = torch.bmm(q_i, k_j.transpose(1, 2).contiguous()).view(n, G, i1 - i0, j1 - j0)
    th = None
    if p.softcap is not None and with_tanh:  # Gemma 2 / flash-attn: s = cap tanh(s / cap), |s| < cap
        th = torch.tanh(s / p.softcap)
        s = th * p.softcap
    elif p.softcap is not None:  # the same, in place: one tile alive
        s.div_(p.softcap).tanh_().mul_(p.softcap)
    visible = _visible(p, i0, i1, j0, j1, s.device)  # (Bq, Bk) causal AND window, or None
    if visible is not None:
        s.masked_fill_(~visible, -math.inf)
    if p.slopes is not None:  # ALiBi: -m_h |(r + S - L) - c|, query r at position r + S - L (bottom-right)
        s.sub_(p.slopes[:, :, None, None] * _alibi_distance(p, i0, i1, j0, j1, s.dtype))
    if p.mask is not None:
        tile = p.mask[..., i0:i1, j0:j1].reshape(n, G, i1 - i0, j1 - j0)
        if tile.dtype == torch.bool:
            s.masked_fill_(~tile, -math.inf)
        else:
            s.add_(tile)
    return (s, th) if with_tanh else s


def _visible(p: _Problem, i0: int, i1: int, j0: int, j1: int, device):
    """(Bq, Bk) bool: key c visible from query r by the causal mask AND the window; None if the tile is all visible.

    Causal: c <= r + offset. Window (flash-attn, always bottom-right): r + S - L - left <= c <= r + S - L + right.
    """
    S, L = p.k.shape[1], p.q.shape[2]
    left, right = p.window
    w = S - L  # query r sits at key position r + S - L
    crosses = ((p.is_causal and j1 - 1 > i0 + p.offset) or (left >= 0 and j0 < i1 - 1 + w - left)
               or (right >= 0 and j1 - 1 > i0 + w + right))
    if not crosses:  # every (row, key) of the tile passes: no mask to build
        return None
    rows = torch.arange(i0, i1, device=device)[:, None]
    cols = torch.arange(j0, j1, device=device)[None, :]
    keep = torch.ones(i1 - i0, j1 - j0, dtype=torch.bool, device=device)
    if p.is_causal:
        keep &= cols <= rows + p.offset
    if left >= 0:
        keep &= cols >= rows + w - left
    if right >= 0:
        keep &= cols <= rows + w + right
    return keep


def _key_range(p: _Problem, i0: int, i1: int, block_k: int) -> tuple[int, int]:
    """The keys [start, stop) the query rows [i0, i1) may see; start rounded down to a key block.

    Key blocks outside it are skipped (never computed): after the causal diagonal (c <= r + offset), and
    outside the window (r + S - L - left <= c <= r + S - L + right) of every row of the block.
    """
    S, L = p.k.shape[1], p.q.shape[2]
    left, right = p.window
    start, stop = 0, S
    if p.is_causal:
        stop = min(stop, i1 + p.offset)  # last row's last key + 1
    if right >= 0:
        stop = min(stop, i1 - 1 + S - L + right + 1)
    if left >= 0:
        start = max(0, i0 + S - L - left)  # first row's first key
    if start >= stop:  # no row of the block sees a key
        return 0, 0
    return start // block_k * block_k, stop


def _query_range(p: _Problem, j0: int, j1: int, block_q: int) -> tuple[int, int]:
    """The query rows [start, stop) that may see a key of [j0, j1); start rounded down to a query block."""
    S, L = p.k.shape[1], p.q.shape[2]
    left, right = p.window
    start, stop = 0, L
    if p.is_causal:
        start = max(start, j0 - p.offset)  # rows r with r + offset >= j0
    if right >= 0:
        start = max(start, j0 - (S - L) - right)  # rows r with r + S - L + right >= j0
    if left >= 0:
        stop = min(stop, j1 - 1 - (S - L) + left + 1)  # rows r with r + S - L - left <= j1 - 1
    start = max(0, start)
    if start >= stop:  # no row sees a key of the block
        return 0, 0
    return start // block_q * block_q, stop


def _alibi_distance(p: _Problem, i0: int, i1: int, j0: int, j1: int, dtype) -> torch.Tensor:
    """(Bq, Bk) |(r + S - L) - c| for the tile's rows r and keys c: ALiBi's distance on the padded tensor."""
    S, L = p.k.shape[1], p.q.shape[2]
    rows = torch.arange(i0, i1, device=p.q.device)[:, None] + (S - L)
    return (rows - torch.arange(j0, j1, device=p.q.device)[None, :]).abs().to(dtype)


# ----------------------------------------------------------------------------------------------
# the forward pass: FlashAttention-2, Algorithm 1
# ----------------------------------------------------------------------------------------------
def _online_step(s, m_i, l_i, acc, v_j, inplace: bool = True):
    """One key tile of the online softmax (Algorithm 1, lines 9-10): fold the scores ``s`` into the state.

    s (N, R, Bk) scores of this tile (masked: -inf), m_i / l_i (N, R) running max and sum, acc (N, R, Ev),
    v_j (N, Bk, Ev) -> (m_new, l_new, acc_new). ``inplace``: P is computed over ``s`` itself (one tile alive,
    eager); the ``torch.compile`` version is pure, and Inductor fuses the max, the subtract-exp and the row sum
    into loops over the tile instead of one pass of memory per operation.
    """
    m_new = torch.maximum(m_i, s.amax(dim=-1))  # m_new = max(m_old, rowmax(S_ij))    (line 9)
    # A row that has seen only masked keys keeps m = -inf; use 0 as its reference so that
    # exp(-inf - 0) = 0 instead of exp(-inf - (-inf)) = NaN.
    m_ref = torch.where(m_new == -math.inf, 0.0, m_new)
    alpha = torch.exp(m_i - m_ref)  # exp(m_old - m_new): moves the old sums to the new max
    if inplace:
        pt = s.sub_(m_ref[..., None]).exp_()  # P_ij = exp(S_ij - m_new), in place over s      (line 9)
    else:
        pt = torch.exp(s - m_ref[..., None])
    l_new = alpha * l_i + pt.sum(dim=-1)  # l_new = exp(m_old - m_new) l_old + rowsum(P_ij)
    acc_new = torch.baddbmm(acc * alpha[..., None], pt, v_j)  # O = alpha O + P_ij V_j          (line 10)
    return m_new, l_new, acc_new


def _online_step_pure(s, m_i, l_i, acc, v_j):
    return _online_step(s, m_i, l_i, acc, v_j, inplace=False)


_COMPILED_STEP = None


def compiled_tile_step():
    """The per-tile online-softmax step (:func:`_online_step`, pure) under ``torch.compile`` (Inductor), built once.

    The first call of each new tile shape compiles (seconds; Inductor's FX-graph and code caches under
    ``torch._inductor.runtime.cache_dir_utils.cache_dir()`` make a later process's compile faster). On the CPU
    Inductor generates C++, so it needs a C++ compiler (g++ or clang).
    """
    global _COMPILED_STEP
    if _COMPILED_STEP is None:
        _COMPILED_STEP = torch.compile(_online_step_pure, dynamic=False)
    return _COMPILED_STEP


def _tiled_forward(p: _Problem, block_q: int, block_k: int, compile_tile: bool = False):
    """-> out (N, G, L, Ev) in q's dtype, lse (N, G, L) in the accumulation dtype (natural log).

    ``compile_tile``: each tile's online-softmax step runs under ``torch.compile`` (:func:`compiled_tile_step`).
    """
    q, k, v = p.q, p.k, p.v
    n, G, L, E = q.shape
    S, Ev = k.shape[1], v.shape[2]
    acc_t = _acc_dtype(q.dtype)
    step = compiled_tile_step() if compile_tile else _online_step
    out = _new_output(n, G, L, Ev, dtype=q.dtype, device=q.device)
    lse = _new_output(n, G, L, dtype=acc_t, device=q.device)
    for i0 in range(0, L, block_q):  # outer loop over query blocks (Algorithm 1, line 3)
        i1 = min(i0 + block_q, L)  # ragged tail: the last block may be shorter
        R = G * (i1 - i0)  # rows of this tile: Bq rows of each of the G heads sharing the keys
        q_i = (q[:, :, i0:i1].to(acc_t) * p.scale).reshape(n, R, E)  # scale folded into q once (line 4)
        if p.sinks is None:
            m_i = torch.full((n, R), -math.inf, dtype=acc_t, device=q.device)  # running max (line 5)
            l_i = torch.zeros(n, R, dtype=acc_t, device=q.device)  # running sum
        else:  # gpt-oss's sink: a logit with no value, exp(sink) in the sum from the start: m = sink, l = e^0 = 1
            m_i = p.sinks[:, :, None].expand(n, G, i1 - i0).reshape(n, R).clone()
            l_i = torch.ones(n, R, dtype=acc_t, device=q.device)
        acc = torch.zeros(n, R, Ev, dtype=acc_t, device=q.device)  # running output, unnormalised
        # key blocks after the causal diagonal or outside every row's window are never computed
        kv_start, kv_end = _key_range(p, i0, i1, block_k)
        for j0 in range(kv_start, kv_end, block_k):  # inner loop over key blocks (line 6)
            j1 = min(j0 + block_k, S)
            s = _tile_scores(p, q_i, k[:, j0:j1].to(acc_t), i0, i1, j0, j1).view(n, R, j1 - j0)  # S_ij (line 8)
            m_i, l_i, acc = step(s, m_i, l_i, acc, v[:, j0:j1].to(acc_t))  # lines 9-10
            del s  # free this tile before the next one is allocated: one tile alive at a time
        # Final rescale, once per query block (line 12): O_i = acc / l. A row with no visible key
        # (l = 0) gets output 0 and log-sum-exp -inf, never NaN (with a sink: output 0, lse = sink).
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
                    mask_grad: bool = False, slopes_grad: bool = False, sinks_grad: bool = False):
    """Gradients of tiled attention, recomputing each probability tile from the saved log-sum-exp.

    ``out``, ``d_out`` (N, G, L, Ev); ``lse``, ``d_lse`` (N, G, L), ``d_lse`` may be None. Returns
    (dq, dk, dv, d_mask, d_slopes, d_sinks): dq, dk, dv shaped like p.q, p.k, p.v in their dtypes; no (L, S) matrix is
    stored for them. ``mask_grad``: d_mask, the gradient of a float attn_mask, shaped like p.mask (..., L, S)
    (it is dS itself, since the mask is added to the logits; an (L, S) tensor because the mask is one);
    ``slopes_grad``: d_slopes (N, G) = -sum over the tile of dS * |r + S - L - c| (the bias is -m_h * distance).
    ``sinks_grad``: d_sinks (N, G) = -sum over rows of P_sink * D with P_sink = exp(sink - lse) (derivation
    below). All three are None when not asked for.

    With P = softmax(S) and O = P V: dV = P^T dO, dP = dO V^T, dS = P * (dP - D) with
    D = rowsum(dO * O) (FlashAttention-2, section 2.3.2 and Algorithm 2, line 4), dQ = scale dS K,
    dK = scale dS^T Q. A gradient flowing into the log-sum-exp adds d_lse * P to dS (d lse / d S = P).
    With GQA, the G heads sharing a key/value head are rows of the same tile, so dK and dV are summed
    over the group by the products themselves.

    Soft-capping s = cap tanh(t / cap) of the scaled product t: dt = dS (1 - tanh^2(t / cap)), and dQ, dK are
    then scale dt K and scale dt^T Q. The sink (a logit z with no value): lse = log(sum_c e^{s_c} + e^z), so
    with P_z = e^{z - lse}, dp_c / dz = -p_c P_z and d lse / dz = P_z, hence
    d z = -P_z sum_c p_c (dO . v_c) + d_lse P_z = -P_z (rowsum(dO * O) - d_lse) = -P_z D: summed over the
    rows of the head (and the batch). The P of the keys and dS = P (dP - D) are unchanged by a sink.
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
    d_sinks = None
    if sinks_grad:  # d z = -sum_rows P_z D, P_z = exp(z - lse): no tile needed (lse is finite with a sink)
        d_sinks = -(torch.exp(p.sinks[:, :, None] - lse.to(acc_t)) * delta).sum(dim=-1)  # (N, G)
    for j0 in range(0, S, block_k):  # outer loop over key blocks: dK_j, dV_j accumulate on chip (line 5)
        j1 = min(j0 + block_k, S)
        k_j, v_j = k[:, j0:j1].to(acc_t), v[:, j0:j1].to(acc_t)
        dk_j = torch.zeros(n, j1 - j0, E, dtype=acc_t, device=q.device)
        dv_j = torch.zeros(n, j1 - j0, Ev, dtype=acc_t, device=q.device)
        # causal: rows r with r + offset < j0 see none of these keys; window: rows whose window misses them.
        # Their blocks are skipped.
        i_start, i_end = _query_range(p, j0, j1, block_q)
        for i0 in range(i_start, i_end, block_q):  # inner loop over query blocks (line 8)
            i1 = min(i0 + block_q, L)
            R = G * (i1 - i0)
            q_i = q[:, :, i0:i1].to(acc_t).reshape(n, R, E)
            s, th = _tile_scores(p, q_i * p.scale, k_j, i0, i1, j0, j1, with_tanh=True)  # recompute S_ij (line 10)
            s = s.view(n, R, j1 - j0)
            pt = torch.exp(s - lse_ref[:, :, i0:i1].reshape(n, R, 1))  # P_ij = exp(S_ij - L_i), exact (line 11)
            do_i = d_out[:, :, i0:i1].reshape(n, R, Ev)
            dv_j += pt.transpose(1, 2) @ do_i  # dV_j += P_ij^T dO_i                         (line 12)
            dp = do_i @ v_j.transpose(1, 2)  # dP_ij = dO_i V_j^T                                (line 13)
            ds = pt * (dp - delta[:, :, i0:i1].reshape(n, R, 1))  # dS_ij = P_ij * (dP_ij - D_i)  (line 14)
            if th is not None:  # soft-cap: d(scale q k) = dS (1 - tanh^2); mask/ALiBi come after it, keep dS
                ds_raw = ds * (1 - th.view(n, R, j1 - j0) ** 2)
            else:
                ds_raw = ds
            dq[:, :, i0:i1] += (p.scale * (ds_raw @ k_j)).view(n, G, i1 - i0, E)  # dQ_i += scale dS_ij K_j (line 15)
            dk_j += p.scale * (ds_raw.transpose(1, 2) @ q_i)  # dK_j += scale dS_ij^T Q_i               (line 16)
            if mask_grad:  # logits = ... + mask: d mask = dS
                d_mask[:, :, i0:i1, j0:j1] = ds.view(n, G, i1 - i0, j1 - j0)
            if slopes_grad:  # logits = ... - m_h dist: d m_h = -sum dS dist
                dist = _alibi_distance(p, i0, i1, j0, j1, acc_t)
                d_slopes -= (ds.view(n, G, i1 - i0, j1 - j0) * dist).sum(dim=(-2, -1))
        dk[:, j0:j1] = dk_j
        dv[:, j0:j1] = dv_j
    if mask_grad:
        d_mask = d_mask.view(p.mask.shape)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), d_mask, d_slopes, d_sinks


class _TiledAttentionFunction(torch.autograd.Function):
    """Autograd wrapper: forward saves (q, k, v, mask, slopes, sinks, out, lse), no (L, S) matrix; backward recomputes.

    Everything the backward reads goes through ``ctx.save_for_backward``, so a query, key or value changed in
    place after the forward makes the backward raise torch's version-counter error instead of using it.
    A float ``mask``, the ALiBi ``slopes`` and the ``sinks`` are inputs too: they get gradients when they require them.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, slopes, sinks, problem, block_q, block_k, compile_tile):
        out, lse = _tiled_forward(problem, block_q, block_k, compile_tile)
        ctx.save_for_backward(q, k, v, mask, slopes, sinks, out, lse)
        ctx.problem, ctx.blocks = problem, (block_q, block_k)
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        q, k, v, mask, slopes, sinks, out, lse = ctx.saved_tensors
        p = dataclasses.replace(ctx.problem, q=q, k=k, v=v, mask=mask, slopes=slopes, sinks=sinks)
        if d_out is None:
            d_out = torch.zeros_like(out)
        dq, dk, dv, d_mask, d_slopes, d_sinks = _tiled_backward(
            p, out, lse, d_out, d_lse, *ctx.blocks,
            mask_grad=ctx.needs_input_grad[3], slopes_grad=ctx.needs_input_grad[4], sinks_grad=ctx.needs_input_grad[5])
        return dq, dk, dv, d_mask, d_slopes, d_sinks, None, None, None, None


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
    window_size: tuple[int, int] = (-1, -1),
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
    compile_tile: bool = False,
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
        window_size: ``(left, right)``, flash-attn's ``flash_attn_func(..., window_size=(left, right))``: query r,
            at position r + S - L (bottom-right, as flash-attn, whatever ``causal_align``), may attend key c iff
            ``r + S - L - left <= c <= r + S - L + right``; -1 leaves that side unbounded; default ``(-1, -1)``
            (no window). Combined with ``is_causal`` and ``attn_mask`` by AND (flash-attn's causal=True is
            ``is_causal=True, causal_align="bottom_right"``, equivalently right = 0). Key tiles outside every row's
            window are skipped, never computed (:func:`window_tiles`, :func:`skipped_tiles` count them).
        softcap: None or 0 (off), or a positive number: flash-attn's ``softcap`` and Gemma 2's
            ``attn_logit_softcapping``. The scaled product t = scale q . k becomes ``softcap * tanh(t / softcap)``
            *before* ALiBi and ``attn_mask`` are added (the order of flash-attn's kernel and of Gemma 2, whose mask
            is added after the capping); the backward multiplies dS by the derivative 1 - tanh^2(t / softcap).
        sinks: None, or (H,) floats, one logit per query head as gpt-oss's attention takes (``GptOssAttention``'s
            ``sinks`` parameter, its kernels' ``Sinks``): each row's softmax denominator gets an extra exp(sinks[h])
            with no value, so ``output = sum_c e^{s_c} v_c / (sum_c e^{s_c} + e^{sink_h})`` and the returned lse
            includes it. A row that sees no key then gives output 0 and lse = sink. Not scaled, not capped, not
            masked (gpt-oss concatenates it to the scaled, masked logits).
        compile_tile: run each tile's online-softmax step (max, subtract-exp, row sum, rescale, P V) under
            ``torch.compile`` (:func:`compiled_tile_step`): Inductor fuses what eager runs as separate passes over
            the tile. The first call of each tile shape compiles (seconds; needs a C++ compiler on the CPU); the
            backward is unchanged. The CPU lesson on fusion of notebook 09 and ``python -m attn_lib.course.bench cpu``.

    Returns:
        ``output`` (..., H, L, Ev) in query's dtype, or ``(output, lse)`` when ``return_lse``; lse is
        (..., H, L), float32 (float64 for float64 inputs), ``lse[r] = log(sum_c exp(logit[r, c]))``.
        A row that may attend to no key (all masked; or L > S with bottom-right causal) gets output 0
        and lse -inf, never NaN (torch's function gives NaN there).

    Gradients: differentiable in query, key and value (also through ``lse``), in a float ``attn_mask`` (its
    gradient is dS, summed over broadcast dims; an (..., L, S) tensor is then built), in ``alibi_slopes``
    (-sum of dS times the distance, per head) and in ``sinks`` (d sink_h = -sum over rows of e^{sink_h - lse} D
    with D = rowsum(dO * O) - d_lse; see :func:`_tiled_backward`), and twice differentiable (the backward is PyTorch
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
        TypeError: non-tensor or non-floating inputs (sinks included), mixed dtypes, a mask neither bool nor
            floating, a flag that is not a bool, a block size that is not an int, window_size not a pair of ints,
            softcap not a number.
        ValueError: mismatched shapes or devices, S = 0 or E = 0 (as torch's function), NaN or infinity
            in query/key/value, a mask that does not broadcast, H not a multiple of Hkv, alibi_slopes
            not (H,) or (B, H), sinks not (H,), NaN or infinity in sinks or alibi_slopes, window_size sides below
            -1, a negative softcap, an unknown causal_align, block sizes < 1, a scale that is not positive;
            finite inputs whose scores scale * q . k overflow the accumulation dtype (the same error as
            :func:`attn_lib.attention.scaled_dot_product_attention`, instead of NaN).

    Zero heads or an empty batch give an empty output, as torch's function does.

    Source: Dao (2023), "FlashAttention-2", Algorithms 1 and 2; the ALiBi bias of Press et al. (2022);
    ``window_size`` and ``softcap`` as flash-attn's ``flash_attn_func`` (its docstring: "Query at position i will
    only attend to keys between [i + seqlen_k - seqlen_q - window_size[0], i + seqlen_k - seqlen_q +
    window_size[1]] inclusive"; softcap applied to the scaled scores before the mask and ALiBi); soft-capping
    as Gemma 2 (Gemma Team, 2024); ``sinks`` as gpt-oss (OpenAI, 2025; ``GptOssAttention`` in transformers).
    """
    p = _prepare(query, key, value, attn_mask, is_causal, causal_align, scale, enable_gqa, alibi_slopes,
                 window_size=window_size, softcap=softcap, sinks=sinks)
    check_bool("return_lse", return_lse)
    _check_block("block_q", block_q)
    _check_block("block_k", block_k)
    check_bool("compile_tile", compile_tile)
    big = _value_scale(value, key.shape[-2])
    if big != 1.0:  # values near the dtype's maximum: attend over value / 2^k (exact), scale the average back
        out = tiled_attention(query, key, value / big, attn_mask=attn_mask, is_causal=is_causal,
                              causal_align=causal_align, scale=scale, enable_gqa=enable_gqa, alibi_slopes=alibi_slopes,
                              return_lse=return_lse, block_q=block_q, block_k=block_k, window_size=window_size,
                              softcap=softcap, sinks=sinks, compile_tile=compile_tile)
        return (out[0] * big, out[1]) if return_lse else out * big
    inputs = (p.q, p.k, p.v, p.mask, p.slopes, p.sinks)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs):
        out, lse = _TiledAttentionFunction.apply(*inputs, p, block_q, block_k, compile_tile)
    else:
        out, lse = _tiled_forward(p, block_q, block_k, compile_tile)
    L, Ev = query.shape[-2], value.shape[-1]
    out, lse = out.reshape(*p.lead, L, Ev), lse.reshape(*p.lead, L)
    return (out, lse) if return_lse else out


def naive_attention(query, key, value, *, is_causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """The textbook version: materialise the full (..., L, S) score matrix, softmax, multiply by V.

    query (..., L, E), key (..., S, E), value (..., S, Ev) -> output (..., L, Ev), in the inputs' floating dtype
    (float16/bfloat16/float32/float64; the softmax is computed in that dtype, as the textbook writes it). Causal is
    top-left aligned (like torch). Used as the memory/time baseline in notebook 09 and the benchmark.

    Raises:
        TypeError / ValueError: as :func:`tiled_attention`.

    Source: Vaswani et al. 2017, §3.2.1, Eq. 1 (torch's ``scaled_dot_product_attention`` with the math backend).
    """
    check_qkv(query, key, value)
    check_bool("is_causal", is_causal)
    scale = check_scale(scale, query.shape[-1])
    scores = (query @ key.transpose(-2, -1)) * scale  # (..., L, S): the matrix tiling avoids
    if is_causal:  # the course's one causal mask, top-left like torch's
        scores = scores.masked_fill(~causal_mask(*scores.shape[-2:], device=query.device), -math.inf)
    # the textbook softmax(scores) @ V on purpose: the leanest full-matrix baseline for notebook 09's memory figures
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

        All five are floating tensors (float32 or float64 in the notebooks); the update runs in their dtype.

    Returns:
        (m_new, l_new, acc_new) with m_new = max(m_old, rowmax(scores)),
        l_new = exp(m_old - m_new) l_old + rowsum(exp(scores - m_new)),
        acc_new = exp(m_old - m_new) acc_old + exp(scores - m_new) @ values.
        ``acc_new / l_new`` is the softmax-weighted average of every value seen so far.

    Raises:
        TypeError: an argument is not a floating tensor, or the five are not of one dtype.
        ValueError: shapes that do not fit together (named in the message); tensors on different devices.

    Source: Milakov & Gimelshein (2018), Algorithm 3; FlashAttention-2, Algorithm 1, lines 8-10.
    """
    for name, t, nd in (("m_old", m_old, 1), ("l_old", l_old, 1), ("acc_old", acc_old, 2), ("scores", scores, 2),
                        ("values", values, 2)):
        check_tensor(name, t, floating=True, ndim=nd)
    check_same_dtype(m_old=m_old, l_old=l_old, acc_old=acc_old, scores=scores, values=values)
    check_same_device(m_old=m_old, l_old=l_old, acc_old=acc_old, scores=scores, values=values)
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


def merge_partials(outputs, lses):
    """Merge attention results computed on disjoint sets of keys into the result over all of them.

    The online softmax's rescale (:func:`online_softmax_update`), applied to finished partial results: part i
    attended to its own keys and returned its normalised output O_i and log-sum-exp lse_i (what
    ``tiled_attention(..., return_lse=True)`` returns). Over the union of the keys,
    ``lse = log(sum_i exp(lse_i))`` and ``O = sum_i exp(lse_i - lse) O_i``: each part's weight is the share of
    the softmax's denominator its keys hold. Split-KV decoding (FlashDecoding) and ring attention merge this way.

    Args:
        outputs: a non-empty list or tuple of (..., L, Ev) floating tensors, one per part, all the same shape
            and dtype (float32 or float64 in the course).
        lses: a list or tuple of as many (..., L) tensors, floating, the natural-log log-sum-exp of each
            part's rows; -inf for a row that saw no key in that part (its output is then ignored).

    Returns:
        ``(output, lse)``: (..., L, Ev) in the outputs' dtype and (..., L) in the lses' dtype. A row that saw
        no key in any part gets output 0 and lse -inf (never NaN). Differentiable in every input.

    Raises:
        TypeError: outputs or lses not a list/tuple of floating tensors.
        ValueError: empty lists, different lengths, shapes or dtypes that differ, an lse not shaped like its
            output without the last dim, NaN or +inf in an lse.

    Source: Milakov & Gimelshein (2018), section 3 (merging partial softmax states); Dao et al., "Flash-Decoding
    for long-context inference" (2023 blog post); Liu et al., "Ring Attention" (2023), section 3.
    """
    for name, parts in (("outputs", outputs), ("lses", lses)):
        if not isinstance(parts, (list, tuple)):
            raise TypeError(f"{name} must be a list or tuple of tensors, got {type(parts).__name__}")
        if len(parts) == 0:
            raise ValueError(f"{name} must hold at least one partial result, got an empty {type(parts).__name__}")
        for i, t in enumerate(parts):
            check_tensor(f"{name}[{i}]", t, floating=True)
    if len(outputs) != len(lses):
        raise ValueError(f"outputs and lses must have one entry per part: got {len(outputs)} outputs and "
                         f"{len(lses)} lses")
    for i, (o, s) in enumerate(zip(outputs, lses)):
        if o.shape != outputs[0].shape or o.dtype != outputs[0].dtype:
            raise ValueError(f"outputs[{i}] has shape {shape_of(o)} and dtype {o.dtype}; outputs[0] has "
                             f"{shape_of(outputs[0])} and {outputs[0].dtype}: every part must match")
        if o.ndim < 1 or s.shape != o.shape[:-1] or s.dtype != lses[0].dtype:
            raise ValueError(f"lses[{i}] must have shape {shape_of(o)[:-1]} (outputs[{i}] without its last dim) "
                             f"and dtype {lses[0].dtype}; got {shape_of(s)} and {s.dtype}")
        if bool(torch.isnan(s).any()) or bool((s == math.inf).any()):
            raise ValueError(f"lses[{i}] holds NaN or +inf; a part's log-sum-exp is finite, or -inf for a row "
                             "that saw no key")
    stacked = torch.stack(list(lses))  # (P, ..., L)
    lse = torch.logsumexp(stacked, dim=0)  # -inf where every part is -inf
    ref = torch.where(lse == -math.inf, torch.zeros_like(lse), lse)
    weights = torch.exp(stacked - ref)  # exp(-inf) = 0 for a part that saw no key: no NaN
    out = sum(w[..., None].to(o.dtype) * o for w, o in zip(weights, outputs))
    return out, lse


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

    ``m``, ``l`` and ``rescale`` are Python floats; ``acc`` and ``output`` are float32 or float64 tensors (float64
    when the scores were float64).

    Raises:
        Nothing of its own: a plain record, built by :func:`online_softmax_trace`, which checks its inputs.

    Source: the state (m, l, O) of Milakov & Gimelshein (2018), Algorithm 3, and FlashAttention-2, Algorithm 1.
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
        ValueError: scores not 1-D, values not (S, Ev), or S = 0; NaN or +inf in scores, NaN or inf in values.
        TypeError: block_k not a positive int; scores or values not floating.

    Source: Milakov & Gimelshein (2018), Algorithm 3 (the online normalizer), one row at a time.
    """
    _check_block("block_k", block_k)
    if not isinstance(scores, torch.Tensor) or scores.dim() != 1 or scores.numel() == 0:
        raise ValueError(f"scores must be a non-empty 1-D tensor (S,), got {getattr(scores, 'shape', scores)!r}")
    if not isinstance(values, torch.Tensor) or values.dim() != 2 or values.shape[0] != scores.shape[0]:
        raise ValueError(
            f"values must be a 2-D tensor (S, Ev) with S = {scores.shape[0]}, got {getattr(values, 'shape', values)!r}"
        )
    check_tensor("scores", scores, floating=True)
    check_tensor("values", values, floating=True)
    check_finite("scores", scores, allow_neg_inf=True)  # -inf: a masked key
    check_finite("values", values)
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
        Sorted list of (i, j) int pairs (no tensors): cells of the (Tq, Tk) grid of tiles, with
        Tq = ceil(q_len / block_q) query blocks and Tk = ceil(kv_len / block_k) key blocks.

    Raises:
        TypeError / ValueError: an argument is not a positive int.

    Source: FlashAttention-2 (Dao 2023), §3.1.1 "Causal masking": blocks with every column index above the row
    indices are skipped.
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


def window_tiles(q_len: int, kv_len: int, block_q: int, block_k: int, *, window_size=(-1, -1),
                 is_causal: bool = False, causal_align: str = "top_left") -> list[tuple[int, int]]:
    """The (query block, key block) tiles tiled_attention and flash_attention compute for a window and/or causal mask.

    Tile (i, j) covers rows [i*block_q, ...) and keys [j*block_k, ...) as in :func:`causal_tiles`. Query row r
    (at position r + kv_len - q_len) may see key c iff ``r + kv_len - q_len - left <= c <= r + kv_len - q_len +
    right`` (flash-attn's ``window_size``, -1 = unbounded) and, when causal, ``c <= r + offset`` (offset 0 or
    kv_len - q_len for ``causal_align="bottom_right"``). Each query block's loop runs over the key blocks from the
    one holding its first row's first visible key to the one holding its last row's last visible key; the tiles
    outside that range are skipped. These are the bounds the loops use (forward and both backward passes).

    Returns:
        Sorted list of (i, j) int pairs (no tensors): cells of the (Tq, Tk) grid of tiles, with
        Tq = ceil(q_len / block_q) query blocks and Tk = ceil(kv_len / block_k) key blocks.

    Raises:
        TypeError / ValueError: a length or block not a positive int; window_size not (left, right) of ints >= -1.

    Source: flash-attn's ``window_size`` semantics (Dao's flash_attn_func docs); the loop bounds of FlashAttention-2
    (Dao 2023), §3.1.1.
    """
    for name, value in (("q_len", q_len), ("kv_len", kv_len), ("block_q", block_q), ("block_k", block_k)):
        _check_block(name, value)
    check_bool("is_causal", is_causal)
    check_choice("causal_align", causal_align, CAUSAL_ALIGNS)
    offset = kv_len - q_len if (is_causal and causal_align == "bottom_right") else 0
    # a shape-only problem: the bounds read only the lengths, the window and the causal settings
    p = _Problem(torch.empty(1, 1, q_len, 0), torch.empty(1, kv_len, 0), None, (), None, None, 1.0, is_causal,
                 offset, _clip_window(_check_window(window_size), q_len, kv_len))
    tiles = []
    for i in range(math.ceil(q_len / block_q)):
        start, stop = _key_range(p, i * block_q, min((i + 1) * block_q, q_len), block_k)
        tiles += [(i, j0 // block_k) for j0 in range(start, stop, block_k)]
    return tiles


def skipped_tiles(q_len: int, kv_len: int, block_q: int, block_k: int, **kwargs) -> int:
    """How many of the ceil(q_len / block_q) x ceil(kv_len / block_k) tiles the loops skip: never computed.

    ``kwargs``: ``window_size``, ``is_causal``, ``causal_align`` as :func:`window_tiles`, which it counts. Takes and
    returns no tensors: ints in, an int out (0 when no mask is given).

    Raises:
        TypeError / ValueError: as :func:`window_tiles` (a length or block size not a positive int, a bad
        ``window_size`` or ``causal_align``).

    Source: FlashAttention-2 (Dao 2023), §3.1.1; the count notebook 09 prints next to the tile grid.
    """
    done = window_tiles(q_len, kv_len, block_q, block_k, **kwargs)
    return math.ceil(q_len / block_q) * math.ceil(kv_len / block_k) - len(done)

