"""FlashAttention-2, forward and backward, as Triton kernels (the "CUDA path" of tiled attention).

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head_dim of query and
key, Ev head_dim of value (the kernels' ``HEAD_DIM`` and ``HEAD_DIM_V``).

:func:`flash_attention` runs the kernels compiled for an NVIDIA GPU when the inputs are CUDA tensors,
and the same kernel source under Triton's interpreter (NumPy on the CPU) when ``backend="triton"`` is
asked for with CPU tensors, so the kernels can be read, stepped through and trained with on a laptop.
With ``backend="auto"`` CPU tensors go to the PyTorch version :func:`attn_lib.tiled.tiled_attention`
(the interpreter is slow).

The kernels (long by nature; each is one screen of arithmetic with the paper's line next to it):

- :func:`_attn_fwd_kernel`, FlashAttention-2 Algorithm 1. One program per (block of BLOCK_M query
  rows, batch * query head). It loads its query tile once, streams the keys and values through in
  blocks of BLOCK_N keeping the online-softmax state (running max ``m_i``, running sum ``l_i``,
  accumulator ``acc``) in float32 registers, and writes the output tile and each row's log-sum-exp once.
- :func:`_attn_bwd_preprocess`, Algorithm 2 line 4: ``delta = rowsum(dO * O)``.
- :func:`_attn_bwd_dkdv_kernel`, Algorithm 2 lines 5-18 without the dQ update: one program per (block
  of BLOCK_N keys, batch * key/value head) keeps dK_j and dV_j in registers while it walks over every
  query block of the G query heads that share this key/value head (so dK, dV are summed over the group
  without atomics), recomputing P = exp(S - lse) from the saved log-sum-exp.
- :func:`_attn_bwd_dq_kernel`, the dQ update (line 15) as its own kernel: one program per query block
  walks over the keys, as the forward does. Two kernels instead of atomic adds into dQ: the result is
  deterministic, and each kernel is as simple as the forward.
- :func:`_tile_logits` (shared): the causal mask (either alignment), ``attn_mask`` (bool or additive
  float, any broadcast: strides 0) and the ALiBi bias ``-m_h |i + S - L - j|`` computed in registers.

The logits stay in natural units, so a finite bias near float32's maximum cannot overflow; the kernels
call the cheap ``exp2`` on the max-subtracted logits, ``exp(x - m) = exp2((x - m) * log2(e))``. K and V are read through ``h // (H / Hkv)``: never repeated in memory for GQA.

Written with plain pointer arithmetic and masked loads/stores (no block pointers: they were removed in
Triton 3.9), so it runs on Triton 3.6 through 3.9. Sources: Dao (2023), "FlashAttention-2",
Algorithms 1 and 2; Triton's tutorial 06 "Fused Attention" (the same loop order); flash-attn's
``alibi_slopes`` (the bias convention).

Why one module of over 400 lines: the Triton kernels (forward, the delta preprocessing, dK/dV and dQ) share
one tile helper and one launcher; the developers' guide lets the Triton kernels stay whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attn_lib._checks import check_bool, check_choice, check_device, check_int
from attn_lib._tiling import _new_output, _prepare
from attn_lib.tiled import tiled_attention

try:  # Triton has no macOS/Windows wheels: the module still imports there (backend="auto" on CPU works)
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton is in the course's Linux requirements
    triton = None
    tl = None

__all__ = ["flash_attention", "triton_available", "kernel_source", "compile_kernel", "BACKENDS", "KERNELS", "ARCHS"]

BACKENDS = ("auto", "triton", "tiled", "cuda")
# The compute capabilities compile_kernel accepts: what Triton 3.9's NVIDIA backend supports (8.0 and newer).
ARCHS = (80, 86, 87, 89, 90, 100, 103, 110, 120, 121)
LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * log2(e))
LN2 = 0.6931471805599453  # ln(2): log(x) = log2(x) * ln(2)
MASK_NONE, MASK_BOOL, MASK_FLOAT = 0, 1, 2  # the kernels' MASK_KIND

# Interpreter tile sizes: big tiles mean fewer Python-level steps, which is what costs time there.
_INTERPRETER_BLOCK = 32


def triton_available() -> bool:
    """True when Triton imported (Linux); the kernels can then run compiled (CUDA) or interpreted (CPU)."""
    return triton is not None


if triton is not None:
    _LOG2E = tl.constexpr(LOG2E)  # the kernels' copies: a jitted function reads only constexpr globals
    _LN2 = tl.constexpr(LN2)

    @triton.jit
    def _tile_logits(
        qk,  # (BLOCK_M, BLOCK_N) scores scale * q . k, float32, natural units
        rows, cols,  # (BLOCK_M,) query positions, (BLOCK_N,) key positions
        L, S, causal_offset,  # key c is visible from query r iff c <= r + causal_offset (0 or S - L)
        m_ptr, stride_ml, stride_ms,  # this (batch, head)'s attn_mask, row and column strides (0: broadcast)
        slope,  # this head's ALiBi slope m_h (unused without ALiBi)
        win_left, win_right,  # window: key c visible iff r + S - L - left <= c <= r + S - L + right (-1 -> L + S)
        IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, HAS_ALIBI: tl.constexpr, HAS_WINDOW: tl.constexpr,
    ):
        """Apply ALiBi, the float or bool attn_mask, the causal mask and the window to one tile of logits.

        Soft-capping is applied by the kernels before this (flash-attn's and Gemma 2's order: cap, then bias/mask).

        The logits stay in natural units here (log2(e) is applied inside exp2, after the max is subtracted),
        so a finite bias near float32's maximum (a mask of 3e38, a slope of 3e38) cannot overflow to inf.
        """
        if HAS_ALIBI:  # -m_h |(r + S - L) - c|, query r at position r + S - L (the padded tensor's positions)
            dist = tl.abs((rows[:, None] + (S - L) - cols[None, :]).to(tl.float32))
            qk = qk - slope * dist
        keep = (rows[:, None] < L) & (cols[None, :] < S)  # ragged tails do not exist
        if MASK_KIND != 0:
            m = tl.load(m_ptr + rows[:, None] * stride_ml + cols[None, :] * stride_ms, mask=keep, other=0)
            if MASK_KIND == 1:  # bool (stored as uint8): True = may attend
                keep = keep & (m != 0)
            else:  # float, added to the logits (-inf blocks)
                qk = qk + m.to(tl.float32)
        if IS_CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None] + causal_offset)
        if HAS_WINDOW:  # flash-attn's window_size, bottom-right: query r sits at key position r + S - L
            pos = rows[:, None] + (S - L)
            keep = keep & (cols[None, :] >= pos - win_left) & (cols[None, :] <= pos + win_right)
        return tl.where(keep, qk, float("-inf"))

    @triton.jit
    def _tanh(x):
        """tanh(x) = 1 - 2 / (e^{2x} + 1), with e^{2x} = 2^{2x log2 e}; exact limits: e^{2x} = inf gives 1, 0 gives -1."""
        return 1.0 - 2.0 / (tl.exp2(x * (2.0 * _LOG2E)) + 1.0)

    @triton.jit
    def _attn_fwd_kernel(
        Q, K, V, O, LSE, MASK, ALIBI, SINKS,  # pointers: q, k, v, output, log-sum-exp (B*H, L), attn_mask, slopes, sinks (H,)
        stride_qb, stride_qh, stride_ql,  # strides of q (B, H, L, E), in elements; head_dim is contiguous
        stride_kb, stride_kh, stride_ks,  # k (B, Hkv, S, E)
        stride_vb, stride_vh, stride_vs,  # v (B, Hkv, S, Ev)
        stride_ob, stride_oh, stride_ol,  # output (B, H, L, Ev)
        stride_mb, stride_mh, stride_ml, stride_ms,  # attn_mask broadcast to (B, H, L, S): 0 where broadcast
        stride_ab,  # ALiBi slopes (B, H): H, or 0 for one (H,) row shared by the batch
        H, L, S, GROUP, causal_offset,  # query heads, queries, keys, H // Hkv, 0 or S - L
        sm_scale,  # the softmax scale (1/sqrt(E) by default)
        win_left, win_right, softcap,  # window sides (-1 replaced by L + S), the soft-cap (unused when off)
        HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr,  # E and Ev, the real head_dims
        BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,  # E, Ev rounded up to powers of two (>= 16): tl.arange needs one
        BLOCK_M: tl.constexpr,  # query rows per program
        BLOCK_N: tl.constexpr,  # keys per step of the inner loop
        IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, HAS_ALIBI: tl.constexpr,
        DOT_PRECISION: tl.constexpr,  # "ieee" for float32 inputs; "tf32" (ignored for fp16/bf16)
        HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, HAS_SINKS: tl.constexpr,
    ):
        # --- which tile this program computes --------------------------------------------------
        pid_m = tl.program_id(0)  # block of query rows
        pid_bh = tl.program_id(1).to(tl.int64)  # (batch, query head); int64 so big offsets don't overflow
        b, h = pid_bh // H, pid_bh % H
        h_kv = h // GROUP  # GQA: the key/value head this query head reads (K/V never repeated)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query rows of this tile
        offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,) key columns, shifted at each step
        offs_d = tl.arange(0, BLOCK_D)  # (BLOCK_D,) head_dim, padded
        offs_dv = tl.arange(0, BLOCK_DV)
        d_ok, dv_ok = offs_d < HEAD_DIM, offs_dv < HEAD_DIM_V  # padding columns: loaded as 0, never stored
        # --- load the query tile once: (BLOCK_M, BLOCK_D) (Algorithm 1, line 4) ---------------
        q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_ql + offs_d[None, :]
        q = tl.load(q_ptrs, mask=(offs_m[:, None] < L) & d_ok[None, :], other=0.0)
        k_base = K + b * stride_kb + h_kv * stride_kh + offs_d[None, :]  # (1, BLOCK_D): this head's keys, row 0
        v_base = V + b * stride_vb + h_kv * stride_vh + offs_dv[None, :]
        m_ptr = MASK + b * stride_mb + h * stride_mh
        slope = 0.0
        if HAS_ALIBI:
            slope = tl.load(ALIBI + b * stride_ab + h)
        # --- online-softmax state, float32, one entry per query row (line 5) -------------------
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max of the logits
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp(logit - m_i)
        acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)  # running sum of exp(logit - m_i) * v
        if HAS_SINKS:  # gpt-oss: the sink's exp(sink) is in every row's sum from the start: m = sink, l = e^0 = 1
            m_i = tl.zeros([BLOCK_M], dtype=tl.float32) + tl.load(SINKS + h)
            l_i = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
        # causal: keys after the tile's last row + offset are above the diagonal, never visited;
        # window: keys before the first row's window or after the last row's are never visited
        row_end = tl.minimum((pid_m + 1) * BLOCK_M, L)  # one past the tile's last real row
        lo = 0
        hi = S
        if IS_CAUSAL:
            hi = tl.maximum(0, tl.minimum(S, row_end + causal_offset))
        if HAS_WINDOW:
            hi = tl.minimum(hi, row_end + (S - L) + win_right)  # (last row + S - L + right) + 1
            lo = (tl.maximum(0, pid_m * BLOCK_M + (S - L) - win_left) // BLOCK_N) * BLOCK_N
        # --- stream K and V through, BLOCK_N keys at a time (line 6) ---------------------------
        for start_n in range(lo, hi, BLOCK_N):
            cols = start_n + offs_n  # (BLOCK_N,) key positions of this step
            k = tl.load(k_base + cols[:, None] * stride_ks, mask=(cols[:, None] < S) & d_ok[None, :], other=0.0)
            v = tl.load(v_base + cols[:, None] * stride_vs, mask=(cols[:, None] < S) & dv_ok[None, :], other=0.0)
            qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale  # S_ij = scale Q_i K_j^T (line 8)
            if SOFTCAP:  # Gemma 2 / flash-attn: cap tanh(S / cap), before bias and mask
                qk = softcap * _tanh(qk / softcap)
            qk = _tile_logits(qk, offs_m, cols, L, S, causal_offset, m_ptr, stride_ml, stride_ms, slope,
                              win_left, win_right, IS_CAUSAL, MASK_KIND, HAS_ALIBI, HAS_WINDOW)
            m_new = tl.maximum(m_i, tl.max(qk, 1))  # m_new = max(m_old, rowmax(S_ij))  (line 9)
            m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: avoid -inf - -inf
            alpha = tl.exp2((m_i - m_ref) * _LOG2E)  # e^(m_old - m_new) = 2^((m_old - m_new) log2 e): the rescale
            p = tl.exp2((qk - m_ref[:, None]) * _LOG2E)  # P_ij = e^(S_ij - m_new), (BLOCK_M, BLOCK_N)  (line 9)
            l_i = l_i * alpha + tl.sum(p, 1)  # l_new = alpha l_old + rowsum(P_ij)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)  # (line 10)
            m_i = m_new
        # --- final rescale and store (lines 12-15) ---------------------------------------------
        empty = l_i == 0.0  # rows that saw no key (all masked, or L > S bottom-right): output 0, lse -inf
        l_safe = tl.where(empty, 1.0, l_i)
        out = acc / l_safe[:, None]  # O_i = acc / l  (line 12)
        lse = tl.where(empty, float("-inf"), m_i + tl.log2(l_safe) * _LN2)  # L_i = m + log l, natural log (line 13)
        row_ok = offs_m < L
        o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_ol + offs_dv[None, :]
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None] & dv_ok[None, :])
        tl.store(LSE + pid_bh * L + offs_m, lse, mask=row_ok)

    @triton.jit
    def _attn_bwd_preprocess(
        O, DO, DELTA,  # output and its gradient, both (B*H, L, Ev) contiguous; delta (B*H, L) float32
        L, HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_M: tl.constexpr,
    ):
        """delta_i = rowsum(dO_i * O_i) (Algorithm 2, line 4): the term every dS of row i subtracts."""
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1).to(tl.int64)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_dv = tl.arange(0, BLOCK_DV)
        ok = (offs_m[:, None] < L) & (offs_dv[None, :] < HEAD_DIM_V)
        ptrs = pid_bh * L * HEAD_DIM_V + offs_m[:, None] * HEAD_DIM_V + offs_dv[None, :]
        o = tl.load(O + ptrs, mask=ok, other=0.0).to(tl.float32)
        do = tl.load(DO + ptrs, mask=ok, other=0.0).to(tl.float32)
        tl.store(DELTA + pid_bh * L + offs_m, tl.sum(o * do, 1), mask=offs_m < L)

    @triton.jit
    def _attn_bwd_dkdv_kernel(
        Q, K, V, DO, LSE, DELTA, DK, DV, MASK, ALIBI,  # q (B, H, L, E), k/dk (B, Hkv, S, E), v/dv (B, Hkv, S, Ev)
        stride_qb, stride_qh, stride_ql,  # q and dO share the layout (B, H, L, .), contiguous
        stride_kb, stride_kh, stride_ks,  # k and dk (B, Hkv, S, E), contiguous
        stride_vb, stride_vh, stride_vs,  # v and dv (B, Hkv, S, Ev), contiguous
        stride_dob, stride_doh, stride_dol,
        stride_mb, stride_mh, stride_ml, stride_ms, stride_ab,
        H, HKV, L, S, GROUP, causal_offset, sm_scale, win_left, win_right, softcap,
        HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, HAS_ALIBI: tl.constexpr, DOT_PRECISION: tl.constexpr,
        HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
    ):
        """dK_j and dV_j for one block of keys, summed over the GROUP query heads that read them."""
        pid_n = tl.program_id(0)  # block of keys
        pid_bh = tl.program_id(1).to(tl.int64)  # (batch, key/value head)
        b, h_kv = pid_bh // HKV, pid_bh % HKV
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_m = tl.arange(0, BLOCK_M)
        offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
        d_ok, dv_ok = offs_d < HEAD_DIM, offs_dv < HEAD_DIM_V
        # load K_j, V_j once (line 6) and keep dK_j, dV_j in registers (line 7)
        k = tl.load(K + b * stride_kb + h_kv * stride_kh + cols[:, None] * stride_ks + offs_d[None, :],
                    mask=(cols[:, None] < S) & d_ok[None, :], other=0.0)
        v = tl.load(V + b * stride_vb + h_kv * stride_vh + cols[:, None] * stride_vs + offs_dv[None, :],
                    mask=(cols[:, None] < S) & dv_ok[None, :], other=0.0)
        dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
        # causal: query rows r with r + offset < first key see none of these keys: start after them
        lo = 0
        hi = L
        if IS_CAUSAL:
            lo = (tl.maximum(0, pid_n * BLOCK_N - causal_offset) // BLOCK_M) * BLOCK_M
        if HAS_WINDOW:  # rows whose window ends before the first key, or starts after the last one, are skipped
            lo = tl.maximum(lo, (tl.maximum(0, pid_n * BLOCK_N - (S - L) - win_right) // BLOCK_M) * BLOCK_M)
            hi = tl.minimum(hi, tl.minimum((pid_n + 1) * BLOCK_N, S) - (S - L) + win_left)  # (last key - S + L + left) + 1
        for g in range(0, GROUP):  # GQA: every query head of the group adds to the same dK_j, dV_j
            h = h_kv * GROUP + g
            q_base = Q + b * stride_qb + h * stride_qh + offs_d[None, :]
            do_base = DO + b * stride_dob + h * stride_doh + offs_dv[None, :]
            m_ptr = MASK + b * stride_mb + h * stride_mh
            slope = 0.0
            if HAS_ALIBI:
                slope = tl.load(ALIBI + b * stride_ab + h)
            for start_m in range(lo, hi, BLOCK_M):  # inner loop over query blocks (line 8)
                rows = start_m + offs_m
                row_ok = rows < L
                q = tl.load(q_base + rows[:, None] * stride_ql, mask=row_ok[:, None] & d_ok[None, :], other=0.0)
                do = tl.load(do_base + rows[:, None] * stride_dol, mask=row_ok[:, None] & dv_ok[None, :], other=0.0)
                lse = tl.load(LSE + (b * H + h) * L + rows, mask=row_ok, other=0.0)
                lse = tl.where(lse == float("-inf"), 0.0, lse)  # rows that saw no key: P = exp(-inf) = 0
                delta = tl.load(DELTA + (b * H + h) * L + rows, mask=row_ok, other=0.0)
                qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale  # recompute S_ij (line 10)
                if SOFTCAP:
                    th = _tanh(qk / softcap)  # kept for the derivative 1 - tanh^2
                    qk = softcap * th
                qk = _tile_logits(qk, rows, cols, L, S, causal_offset, m_ptr, stride_ml, stride_ms, slope,
                                  win_left, win_right, IS_CAUSAL, MASK_KIND, HAS_ALIBI, HAS_WINDOW)
                p = tl.exp2((qk - lse[:, None]) * _LOG2E)  # P_ij = exp(S_ij - L_i): exact probabilities (line 11)
                dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=DOT_PRECISION)  # dV_j += P^T dO_i (line 12)
                dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)  # dP_ij = dO_i V_j^T  (line 13)
                ds = p * (dp - delta[:, None])  # dS_ij = P_ij * (dP_ij - D_i)  (line 14)
                if SOFTCAP:  # d(scale q k) = dS (1 - tanh^2(scale q k / cap))
                    ds = ds * (1.0 - th * th)
                dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=DOT_PRECISION)  # dK_j += dS^T Q_i (line 16)
        col_ok = cols[:, None] < S
        tl.store(DK + b * stride_kb + h_kv * stride_kh + cols[:, None] * stride_ks + offs_d[None, :],
                 (dk * sm_scale).to(DK.dtype.element_ty), mask=col_ok & d_ok[None, :])  # write dK_j (line 18)
        tl.store(DV + b * stride_vb + h_kv * stride_vh + cols[:, None] * stride_vs + offs_dv[None, :],
                 dv.to(DV.dtype.element_ty), mask=col_ok & dv_ok[None, :])

    @triton.jit
    def _attn_bwd_dq_kernel(
        Q, K, V, DO, LSE, DELTA, DQ, MASK, ALIBI,
        stride_qb, stride_qh, stride_ql,  # q and dq (B, H, L, E), contiguous
        stride_kb, stride_kh, stride_ks,
        stride_vb, stride_vh, stride_vs,
        stride_dob, stride_doh, stride_dol,
        stride_mb, stride_mh, stride_ml, stride_ms, stride_ab,
        H, L, S, GROUP, causal_offset, sm_scale, win_left, win_right, softcap,
        HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        IS_CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, HAS_ALIBI: tl.constexpr, DOT_PRECISION: tl.constexpr,
        HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
    ):
        """dQ_i = scale sum_j dS_ij K_j (Algorithm 2, line 15) for one block of query rows."""
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1).to(tl.int64)
        b, h = pid_bh // H, pid_bh % H
        h_kv = h // GROUP
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d, offs_dv = tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV)
        d_ok, dv_ok, row_ok = offs_d < HEAD_DIM, offs_dv < HEAD_DIM_V, rows < L
        q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_ql + offs_d[None, :],
                    mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dol + offs_dv[None, :],
                     mask=row_ok[:, None] & dv_ok[None, :], other=0.0)
        lse = tl.load(LSE + pid_bh * L + rows, mask=row_ok, other=0.0)
        lse = tl.where(lse == float("-inf"), 0.0, lse)
        delta = tl.load(DELTA + pid_bh * L + rows, mask=row_ok, other=0.0)
        k_base = K + b * stride_kb + h_kv * stride_kh + offs_d[None, :]
        v_base = V + b * stride_vb + h_kv * stride_vh + offs_dv[None, :]
        m_ptr = MASK + b * stride_mb + h * stride_mh
        slope = 0.0
        if HAS_ALIBI:
            slope = tl.load(ALIBI + b * stride_ab + h)
        dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        row_end = tl.minimum((pid_m + 1) * BLOCK_M, L)  # the forward's key range for these rows
        lo = 0
        hi = S
        if IS_CAUSAL:
            hi = tl.maximum(0, tl.minimum(S, row_end + causal_offset))
        if HAS_WINDOW:
            hi = tl.minimum(hi, row_end + (S - L) + win_right)
            lo = (tl.maximum(0, pid_m * BLOCK_M + (S - L) - win_left) // BLOCK_N) * BLOCK_N
        for start_n in range(lo, hi, BLOCK_N):
            cols = start_n + offs_n
            k = tl.load(k_base + cols[:, None] * stride_ks, mask=(cols[:, None] < S) & d_ok[None, :], other=0.0)
            v = tl.load(v_base + cols[:, None] * stride_vs, mask=(cols[:, None] < S) & dv_ok[None, :], other=0.0)
            qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale
            if SOFTCAP:
                th = _tanh(qk / softcap)
                qk = softcap * th
            qk = _tile_logits(qk, rows, cols, L, S, causal_offset, m_ptr, stride_ml, stride_ms, slope,
                              win_left, win_right, IS_CAUSAL, MASK_KIND, HAS_ALIBI, HAS_WINDOW)
            p = tl.exp2((qk - lse[:, None]) * _LOG2E)  # P_ij recomputed (line 11)
            dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)  # dP_ij (line 13)
            ds = p * (dp - delta[:, None])  # dS_ij (line 14)
            if SOFTCAP:
                ds = ds * (1.0 - th * th)
            dq += tl.dot(ds.to(k.dtype), k, input_precision=DOT_PRECISION)  # dQ_i += dS_ij K_j (line 15)
        tl.store(DQ + b * stride_qb + h * stride_qh + rows[:, None] * stride_ql + offs_d[None, :],
                 (dq * sm_scale).to(DQ.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])

else:  # pragma: no cover
    _tile_logits = _tanh = _attn_fwd_kernel = _attn_bwd_preprocess = _attn_bwd_dkdv_kernel = _attn_bwd_dq_kernel = None


def kernel_source(kernel: str = "forward") -> str:
    """A kernel's Python source (what notebook 09 reads part by part); ``kernel`` one of :data:`KERNELS`."""
    import inspect
    import textwrap

    if triton is None:
        raise RuntimeError("Triton is not installed (it has Linux wheels only), so there is no kernel to show")
    check_choice("kernel", kernel, KERNELS)
    return textwrap.dedent(inspect.getsource(_kernel(kernel).fn))


def _kernel_is_interpreted() -> bool:
    """True when triton was imported with TRITON_INTERPRET=1 (then @triton.jit made interpreted functions)."""
    return type(_attn_fwd_kernel).__name__ == "InterpretedFunction"


# ----------------------------------------------------------------------------------------------
# launching the kernels
# ----------------------------------------------------------------------------------------------
KERNELS = ("forward", "preprocess", "dkdv", "dq")


def _block_d(head_dim: int) -> int:
    return max(16, 1 << (head_dim - 1).bit_length())


_AUTOTUNED: dict = {}  # kernel name -> triton.autotune wrapper (built on first GPU use: autotuning needs a GPU)
_TUNE_CONFIGS = {  # (BLOCK_M, BLOCK_N, num_warps, num_stages)
    "forward": [(64, 64, 4, 3), (128, 32, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 4, 4)],
    "dkdv": [(32, 128, 4, 3), (64, 64, 4, 3), (32, 64, 4, 3), (64, 128, 8, 2)],
    "dq": [(128, 32, 4, 3), (64, 64, 4, 3), (128, 64, 8, 2)],
}
_TUNE_KEY = ["L", "S", "HEAD_DIM", "HEAD_DIM_V", "IS_CAUSAL", "MASK_KIND", "HAS_ALIBI", "HAS_WINDOW", "SOFTCAP"]


def _kernel(name: str):
    return {"forward": _attn_fwd_kernel, "preprocess": _attn_bwd_preprocess, "dkdv": _attn_bwd_dkdv_kernel,
            "dq": _attn_bwd_dq_kernel}[name]


def _autotuned(name: str):
    """The kernel ``name`` wrapped in triton.autotune over a few tile/warp/stage configurations."""
    if name not in _AUTOTUNED:
        configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
                   for bm, bn, w, s in _TUNE_CONFIGS[name]]
        _AUTOTUNED[name] = triton.autotune(configs=configs, key=_TUNE_KEY)(_kernel(name))
    return _AUTOTUNED[name]


def _run(name: str, grid, args, consts: dict, interpret: bool, block_m, block_n, tiles: str = "MN") -> None:
    """Launch one kernel: interpreted (CPU tensors), with fixed tiles, or autotuned (GPU, no tiles given).

    ``grid`` is a function of (BLOCK_M, BLOCK_N); ``tiles`` says which of the two the kernel takes.
    """
    if interpret or block_m is not None or block_n is not None or name == "preprocess":
        default = _INTERPRETER_BLOCK if interpret else 64
        bm, bn = block_m or default, block_n or default
        kw = dict(BLOCK_M=bm, **({"BLOCK_N": bn} if "N" in tiles else {}), **consts)
        g = grid(bm, bn)
        if not interpret:
            _kernel(name)[g](*args, **kw)
        elif _kernel_is_interpreted():  # TRITON_INTERPRET=1 was set before triton was imported: the supported way
            _kernel(name)[g](*args, **kw)
        else:  # a compiling process (compile_kernel works here too): the twin kernels of _triton_interp
            from attn_lib import _triton_interp

            with _triton_interp.interpreter_mode() as interp:
                _triton_interp.interpreted(_kernel(name), interp)[g](*args, **kw)
    else:
        _autotuned(name)[lambda meta: grid(meta["BLOCK_M"], meta["BLOCK_N"])](*args, **consts)


@dataclass
class _Launch:
    """Everything the kernels need besides q/k/v: 4-D layouts, mask and ALiBi pointers, constants."""

    B: int
    H: int
    Hkv: int
    L: int
    S: int
    mask: torch.Tensor  # (B, H, L, S) view with 0 strides where broadcast, or a dummy
    mask_kind: int
    alibi: torch.Tensor  # (H,) or (B, H) float32, or a dummy
    alibi_stride: int  # the slopes' batch stride: H for (B, H), 0 for (H,)
    causal_offset: int
    is_causal: bool
    scale: float
    interpret: bool
    block_m: int | None
    block_n: int | None

    has_alibi: bool
    window: tuple = (-1, -1)  # flash-attn's (left, right), -1 unbounded
    softcap: float | None = None
    sinks: torch.Tensor | None = None  # (H,) float32, detached: the kernels' copy

    def consts(self, E: int, Ev: int, dtype) -> dict:
        return dict(HEAD_DIM=E, HEAD_DIM_V=Ev, BLOCK_D=_block_d(E), BLOCK_DV=_block_d(Ev), IS_CAUSAL=self.is_causal,
                    MASK_KIND=self.mask_kind, HAS_ALIBI=self.has_alibi,
                    DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32",
                    HAS_WINDOW=self.window != (-1, -1), SOFTCAP=self.softcap is not None)

    def window_args(self) -> tuple:
        """(win_left, win_right, softcap): -1 (unbounded) becomes L + S, beyond every key; softcap 0.0 when off."""
        far = self.L + self.S
        left, right = (far if w < 0 else w for w in self.window)
        return left, right, self.softcap or 0.0

    def mask_strides(self):
        return self.mask.stride() if self.mask_kind else (0, 0, 0, 0)


def _forward(q, k, v, la: _Launch):
    """q (B, H, L, E), k (B, Hkv, S, E), v (B, Hkv, S, Ev) -> out (B, H, L, Ev), lse (B, H, L) float32."""
    B, H, L, E = q.shape
    Ev = v.shape[-1]
    out = _new_output(B, H, L, Ev, dtype=q.dtype, device=q.device)
    lse = _new_output(B, H, L, dtype=torch.float32, device=q.device)
    sinks = q if la.sinks is None else la.sinks  # a dummy pointer without sinks
    args = (q, k, v, out, lse, la.mask, la.alibi, sinks, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            *out.stride()[:3], *la.mask_strides(), la.alibi_stride, H, L, la.S, H // la.Hkv, la.causal_offset, la.scale,
            *la.window_args())
    _run("forward", lambda bm, bn: (triton.cdiv(L, bm), B * H), args,
         {**la.consts(E, Ev, q.dtype), "HAS_SINKS": la.sinks is not None}, la.interpret, la.block_m, la.block_n)
    return out, lse


def _backward(q, k, v, out, lse, d_out, d_lse, la: _Launch):
    """FlashAttention-2's backward (Algorithm 2) as three kernels; all tensors 4-D and contiguous.

    Returns (dq, dk, dv, d_sinks); d_sinks (H,) float32 = -sum over batch and rows of e^{sink_h - lse} D
    (D = rowsum(dO * O) - d_lse, see attn_lib.tiled._tiled_backward), None without sinks: O(B H L), no kernel.
    """
    B, H, L, E = q.shape
    Ev = v.shape[-1]
    S, Hkv, G = la.S, la.Hkv, H // la.Hkv
    consts = la.consts(E, Ev, q.dtype)
    delta = torch.empty(B, H, L, dtype=torch.float32, device=q.device)
    _run("preprocess", lambda bm, bn: (triton.cdiv(L, bm), B * H), (out, d_out, delta, L),
         dict(HEAD_DIM_V=Ev, BLOCK_DV=consts["BLOCK_DV"]), la.interpret, la.block_m, None, tiles="M")
    if d_lse is not None:  # d lse / d S = P, so dS = P (dP - delta) + d_lse P = P (dP - (delta - d_lse))
        delta -= d_lse
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    common = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *d_out.stride()[:3], *la.mask_strides(),
              la.alibi_stride)
    _run("dkdv", lambda bm, bn: (triton.cdiv(S, bn), B * Hkv),
         (q, k, v, d_out, lse, delta, dk, dv, la.mask, la.alibi, *common, H, Hkv, L, S, G, la.causal_offset,
          la.scale, *la.window_args()), consts, la.interpret, la.block_m, la.block_n)
    _run("dq", lambda bm, bn: (triton.cdiv(L, bm), B * H),
         (q, k, v, d_out, lse, delta, dq, la.mask, la.alibi, *common, H, L, S, G, la.causal_offset,
          la.scale, *la.window_args()), consts, la.interpret, la.block_m, la.block_n)
    d_sinks = None
    if la.sinks is not None:  # d sink_h = -sum_{b, rows} P_sink D, P_sink = exp(sink_h - lse)
        d_sinks = -(torch.exp(la.sinks[None, :, None] - lse) * delta).sum(dim=(0, 2))
    return dq, dk, dv, d_sinks


class _FlashAttentionFunction(torch.autograd.Function):
    """Triton forward; Triton backward (delta, dK/dV, dQ kernels), recomputing P from the saved lse."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, la):
        out, lse = _forward(q, k, v, la)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.la, ctx.sinks_dtype = la, None if sinks is None else sinks.dtype
        return out, lse

    @staticmethod
    def backward(ctx, d_out, d_lse):
        if torch.is_grad_enabled():  # backward(create_graph=True): the kernels' gradients have no gradient
            raise RuntimeError("flash_attention's Triton backward cannot be differentiated again (no double "
                               "backward, create_graph=True); use backend='tiled', whose backward is made of "
                               "differentiable PyTorch operations")
        q, k, v, out, lse = ctx.saved_tensors
        if d_out is None:
            d_out = torch.zeros_like(out)
        dq, dk, dv, d_sinks = _backward(q, k, v, out, lse, d_out.contiguous(), d_lse, ctx.la)
        if d_sinks is not None and ctx.needs_input_grad[3]:
            d_sinks = d_sinks.to(ctx.sinks_dtype)
        else:
            d_sinks = None
        return dq, dk, dv, d_sinks, None


def compile_kernel(
    dtype: torch.dtype = torch.float16,
    head_dim: int = 128,
    *,
    kernel: str = "forward",
    head_dim_v: int | None = None,
    is_causal: bool = False,
    mask_kind: int = MASK_NONE,
    alibi: bool = False,
    window: bool = False,
    softcap: bool = False,
    sinks: bool = False,
    arch: int = 90,
    block_m: int = 128,
    block_n: int = 64,
    num_warps: int = 4,
    num_stages: int = 3,
):
    """Compile one of the kernels ahead of time for an NVIDIA GPU architecture; no GPU needed.

    Uses the same specialisation a launch would (pointers and row strides divisible by 16, head_dim
    contiguous). Useful to check on a CPU-only machine that the kernels compile for the GPU and to read
    what they became: ``compiled.asm`` holds "ttir", "ttgir", "llir", "ptx" and "cubin"; on Hopper
    (``arch=90``) the PTX uses warpgroup matrix instructions (wgmma).

    Args:
        dtype: float16, bfloat16 or float32 inputs.
        head_dim: E (padded to a power of two inside), int >= 1; head_dim_v: Ev (default E).
        kernel: one of :data:`KERNELS` ("forward", "preprocess", "dkdv", "dq").
        is_causal, mask_kind (0 none, 1 bool, 2 float), alibi, block_m, block_n, num_warps, num_stages:
            the kernel's compile-time settings.
        window, softcap, sinks: the constexprs HAS_WINDOW, SOFTCAP (forward, dK/dV, dQ) and HAS_SINKS (forward
            only: the backward kernels read the sink through the saved lse).
        arch: compute capability as an int, one of :data:`ARCHS` (Triton 3.9 supports compute capability 8.0 and
            newer): 80 (A100), 86/89 (RTX 30xx/40xx, L4, L40), 90 (H100/H200), 100 (B200), 120 (RTX 50xx).
            The tests compile all four kernels for 80 and 90.

    Returns:
        triton.compiler.CompiledKernel.

    Raises:
        RuntimeError: Triton is not installed. TypeError: unsupported dtype; a flag that is not a bool; an
        arch, a block size or num_warps that is not an int. ValueError: head_dim < 1, an unknown kernel or
        mask_kind, an arch not in :data:`ARCHS`, block sizes that are not powers of two >= 16, num_warps not a
        power of two in 1..32, num_stages < 1.
    """
    import inspect

    if triton is None:
        raise RuntimeError("Triton is not installed (Linux only)")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    ty = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}.get(dtype)
    if ty is None:
        raise TypeError(f"dtype must be torch.float16, torch.bfloat16 or torch.float32, got {dtype}")
    check_int("head_dim", head_dim, minimum=1)
    head_dim_v = head_dim if head_dim_v is None else check_int("head_dim_v", head_dim_v, minimum=1)
    check_choice("kernel", kernel, KERNELS)
    check_bool("is_causal", is_causal)
    check_choice("mask_kind", mask_kind, (MASK_NONE, MASK_BOOL, MASK_FLOAT))
    check_bool("alibi", alibi)
    check_bool("window", window)
    check_bool("softcap", softcap)
    check_bool("sinks", sinks)
    # an architecture Triton's NVIDIA backend does not know aborts the whole process inside LLVM: refuse it here
    check_choice("arch", arch, ARCHS)
    _check_tile("block_m", block_m)
    _check_tile("block_n", block_n)
    check_choice("num_warps", num_warps, (1, 2, 4, 8, 16, 32))
    check_int("num_stages", num_stages, minimum=1)
    fn = _kernel(kernel)
    names = list(inspect.signature(fn.fn).parameters)
    consts = dict(HEAD_DIM=head_dim, HEAD_DIM_V=head_dim_v, BLOCK_D=_block_d(head_dim), BLOCK_DV=_block_d(head_dim_v),
                  BLOCK_M=block_m, BLOCK_N=block_n, IS_CAUSAL=is_causal, MASK_KIND=mask_kind, HAS_ALIBI=alibi,
                  DOT_PRECISION="ieee" if dtype == torch.float32 else "tf32", HAS_WINDOW=window, SOFTCAP=softcap,
                  HAS_SINKS=sinks)
    consts = {k: v for k, v in consts.items() if k in names}
    signature, attrs = {}, {}
    for i, name in enumerate(names):
        if name in consts:
            signature[name] = "constexpr"
        elif name in ("LSE", "DELTA", "ALIBI", "SINKS"):
            signature[name] = "*fp32"
        elif name == "MASK":
            signature[name] = "*fp32" if mask_kind == MASK_FLOAT else "*u8"
        elif name in ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV"):
            signature[name] = "*" + ty
        elif name in ("sm_scale", "softcap"):
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
        # what a launch would see: pointers 16-byte aligned, row strides multiples of 16 when head_dims are
        # (the attn_mask's strides are whatever the caller's mask has: left unspecialised)
        if (signature[name].startswith("*") and name != "MASK") or (
                name.startswith("stride") and not name.startswith("stride_m")
                and head_dim % 16 == 0 and head_dim_v % 16 == 0):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=signature, constexprs={(names.index(k),): v for k, v in consts.items()},
                    attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", arch, 32),
                          options=dict(num_warps=num_warps, num_stages=num_stages, enable_fp_fusion=True))


def _check_tile(name: str, b) -> int:
    check_int(name, b)
    if b < 16 or b & (b - 1):
        raise ValueError(f"{name} must be a power of two >= 16 (tl.arange and tl.dot need it), got {b}")
    return b


def flash_attention(
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
    backend: str = "auto",
    block_m: int | None = None,
    block_n: int | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
):
    """FlashAttention-2, forward and backward: the Triton kernels on a GPU, or interpreted on the CPU.

    The same function as :func:`attn_lib.tiled.tiled_attention` (see it for the exact semantics and an
    executable "equivalent to" snippet) and as ``torch.nn.functional.scaled_dot_product_attention``.
    Legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E, Ev head_dims.

    Args:
        query: (..., H, L, E); float16, bfloat16 or float32 (float64 on the "tiled" path only). E and Ev
            need not be powers of two (48, 96: padded inside the kernels); L and S need not be multiples
            of the tiles.
        key: (..., Hkv, S, E); value: (..., Hkv, S, Ev); Hkv = H unless ``enable_gqa``.
        attn_mask: None, a bool mask broadcastable to (..., H, L, S) (True = may attend; key padding is
            (B, 1, 1, S)) or a float mask added to the logits. The kernels read it through strides (0 where
            broadcast): it is never expanded in memory.
        is_causal, causal_align: causal mask, "top_left" (torch's) or "bottom_right" (FlashAttention-2's,
            the last L of S positions; what a KV cache needs).
        scale: multiplies the logits; default 1/sqrt(E).
        enable_gqa: query head h reads key/value head h // (H / Hkv); K and V are never repeated.
        alibi_slopes: (H,) ALiBi slopes, or (B, H) per batch element (flash-attn's two forms); the bias
            -m_h |r + S - L - c| is computed inside the kernels, with the distance on the padded tensor
            (flash-attn's varlen convention: ``attn_mask=attn_lib.positional.alibi_varlen_mask(...)``).
        return_lse: also return each row's log-sum-exp (natural log, float32, shape (..., H, L)).
        backend: ``"auto"``: CUDA tensors run the compiled kernels, CPU tensors run ``tiled_attention``.
            ``"triton"``: always the Triton kernels; on CPU tensors under Triton's interpreter (slow: small
            inputs only), with no environment variable to set. ``"cuda"``: the compiled kernels only (CUDA
            tensors). ``"tiled"``: always the PyTorch version.
        block_m, block_n: tile sizes (powers of two >= 16, checked for every backend, "auto" and "tiled" too).
            Default: autotuned on a GPU, 32 in the interpreter, ``tiled_attention``'s defaults for "tiled".
        window_size: ``(left, right)``, flash-attn's sliding window: query r (at position r + S - L) may attend key
            c iff ``r + S - L - left <= c <= r + S - L + right``, -1 unbounded, default (-1, -1); ANDed with the
            causal mask and attn_mask. The kernels skip the key blocks (forward, dQ) and query blocks (dK/dV)
            outside the window in their loop bounds (:func:`attn_lib.tiled.window_tiles` lists the tiles computed).
        softcap: flash-attn's / Gemma 2's soft-capping, ``softcap * tanh(scale q . k / softcap)`` before ALiBi and
            the mask; None or 0 = off. The backward kernels multiply dS by 1 - tanh^2.
        sinks: (H,) one logit per query head, gpt-oss's attention sinks: exp(sinks[h]) joins each row's softmax
            denominator with no value, and lse includes it. Differentiable on every path: the Triton path
            computes d sinks = -sum over batch and rows of exp(sink - lse) * D from the saved lse and the
            backward's D = rowsum(dO * O) - d_lse (no extra kernel).
        See :func:`attn_lib.tiled.tiled_attention` for the exact semantics and sources of these three.

    Returns:
        ``output`` (..., H, L, Ev) in the inputs' dtype, or ``(output, lse)`` when ``return_lse``. Rows that
        see no key give 0 (lse -inf), not NaN.

    Autograd: the Triton backward (delta, dK/dV and dQ kernels), which recomputes the probabilities
    from the saved log-sum-exp; with GQA, dK and dV are summed over each group of query heads. A gradient
    through the returned lse is included (it only shifts delta). The Triton paths differentiate query, key
    and value once: a mask or slopes that require grad, and a double backward (create_graph=True), raise
    errors that name backend="tiled", which supports both.

    Notes:
        Triton's interpreter does not compute bfloat16 correctly (it treats the bit patterns as float16),
        so bfloat16 CPU inputs are upcast to float32 for the interpreted run and the output cast back.

    Raises:
        TypeError / ValueError: bad inputs, as :func:`attn_lib.tiled.tiled_attention` (S = 0, NaN/inf
        inputs and overflowing scores included), an unknown backend, bad tile sizes, float64 on a Triton path;
        ValueError: on a Triton path, an attn_mask or alibi_slopes that requires grad;
        RuntimeError: a double backward through the Triton backward;
        ValueError: backend="cuda" without a CUDA GPU (the message suggests backend="tiled" or "triton")
        or with CPU tensors. RuntimeError: a Triton backend but Triton is not installed.

    Source: Dao (2023), "FlashAttention-2", Algorithms 1 and 2.
    """
    check_choice("backend", backend, BACKENDS)
    if backend == "cuda":
        try:
            check_device("device", "cuda")
        except ValueError:
            raise ValueError("backend='cuda' needs an NVIDIA GPU, but torch.cuda.is_available() is False here: use "
                             "backend='tiled' (PyTorch) or backend='triton' with CPU tensors (Triton's interpreter)"
                             ) from None
        if query.device.type != "cuda":
            raise ValueError(f"backend='cuda' runs on CUDA tensors, got query on {query.device}; move them with "
                             ".cuda() or use backend='triton' for the interpreter")
    for name, b in (("block_m", block_m), ("block_n", block_n)):  # one rule for every backend, checked first
        if b is not None:
            _check_tile(name, b)
    on_cuda = isinstance(query, torch.Tensor) and query.device.type == "cuda"
    if backend == "tiled" or (backend == "auto" and not on_cuda):
        return tiled_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, causal_align=causal_align,
                               scale=scale, enable_gqa=enable_gqa, alibi_slopes=alibi_slopes, return_lse=return_lse,
                               window_size=window_size, softcap=softcap, sinks=sinks,
                               **({"block_q": block_m} if block_m is not None else {}),
                               **({"block_k": block_n} if block_n is not None else {}))
    p = _prepare(query, key, value, attn_mask, is_causal, causal_align, scale, enable_gqa, alibi_slopes,
                 window_size=window_size, softcap=softcap, sinks=sinks)
    check_bool("return_lse", return_lse)
    if p.q.numel() == 0:  # no heads, no batch or no queries: nothing to launch; empty outputs as torch returns
        return tiled_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, causal_align=causal_align,
                               scale=scale, enable_gqa=enable_gqa, alibi_slopes=alibi_slopes, return_lse=return_lse,
                               window_size=window_size, softcap=softcap, sinks=sinks)
    if torch.is_grad_enabled():
        for name, t in (("attn_mask", attn_mask), ("alibi_slopes", alibi_slopes)):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                raise ValueError(f"{name} requires grad, but the Triton kernels do not compute its gradient; expected "
                                 f"{name}.detach(), or backend='tiled', which differentiates {name} too")
    if triton is None:
        raise RuntimeError(f"backend={backend!r} needs Triton, which is not installed (Linux only); "
                           "use backend='tiled'")
    if query.device.type not in ("cuda", "cpu"):
        raise ValueError(f"the Triton kernels run on CUDA tensors or (interpreted) CPU tensors, got {query.device}")
    if query.dtype == torch.float64:
        raise TypeError("the Triton kernels take float16, bfloat16 or float32 inputs, got torch.float64; "
                        "use backend='tiled' for float64")
    interpret, dtype = not on_cuda, query.dtype
    lead, (L, E), (S, Ev) = p.lead, query.shape[-2:], value.shape[-2:]
    H = lead[-1] if lead else 1
    Hkv = key.shape[-3] if enable_gqa else H
    B = math.prod(lead) // H
    # (..., H, L, E) -> (B, H, L, E) contiguous: the backward's kernels assume it, and head_dim stride 1
    q, k, v = (t.reshape(B, n, m, d).contiguous() for t, n, m, d in ((query, H, L, E), (key, Hkv, S, E),
                                                                       (value, Hkv, S, Ev)))
    if interpret and dtype == torch.bfloat16:  # the interpreter mishandles bf16: compute in fp32
        q, k, v = q.float(), k.float(), v.float()
    mask, kind = q, MASK_NONE  # a dummy pointer when there is no mask
    if p.mask is not None:
        kind = MASK_BOOL if p.mask.dtype == torch.bool else MASK_FLOAT
        compact = attn_mask.to(query.device)  # the caller's (small, broadcastable) mask, converted once
        compact = compact.view(torch.uint8) if kind == MASK_BOOL else compact.float()
        mask = compact.expand(*lead, L, S).reshape(B, H, L, S)  # a view with 0 strides for 4-D inputs
    alibi, alibi_stride = q, 0  # a dummy pointer without ALiBi
    if alibi_slopes is not None:
        alibi = alibi_slopes.detach().to(query.device, torch.float32).contiguous()
        alibi_stride = H if alibi.dim() == 2 else 0
    kernel_sinks = None if sinks is None else sinks.detach().to(query.device, torch.float32).contiguous()  # (H,)
    la = _Launch(B=B, H=H, Hkv=Hkv, L=L, S=S, mask=mask, mask_kind=kind, alibi=alibi, alibi_stride=alibi_stride,
                 causal_offset=p.offset, is_causal=is_causal, scale=p.scale, interpret=interpret, block_m=block_m,
                 block_n=block_n, has_alibi=alibi_slopes is not None, window=p.window, softcap=p.softcap,
                 sinks=kernel_sinks)
    needs_grad = [t is not None and t.requires_grad for t in (query, key, value, sinks)]
    if torch.is_grad_enabled() and any(needs_grad):
        out, lse = _FlashAttentionFunction.apply(q, k, v, sinks, la)
    else:
        out, lse = _forward(q, k, v, la)
    out, lse = out.to(dtype).reshape(*lead, L, Ev), lse.reshape(*lead, L)
    return (out, lse) if return_lse else out
