"""The FlashAttention-2 Triton kernels: forward, the backward's delta, dK/dV and dQ (launched by attn_lib.flash).

Shape legend: B batch, H query heads, Hkv key/value heads, L queries, S keys, E head_dim of query and
key, Ev head_dim of value (the kernels' ``HEAD_DIM`` and ``HEAD_DIM_V``).

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

Why one module of over 400 lines: four kernels that share one tile helper, each long by nature; the
developers' guide lets the Triton kernels stay whole.
"""

from __future__ import annotations

from attn_lib._checks import check_choice

try:  # Triton has no macOS/Windows wheels: the module still imports there (attn_lib.flash falls back)
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - triton is in the course's Linux requirements
    triton = None
    tl = None

__all__ = ["LOG2E", "LN2", "MASK_NONE", "MASK_BOOL", "MASK_FLOAT", "KERNELS", "triton_available", "kernel_source"]

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x * log2(e))
LN2 = 0.6931471805599453  # ln(2): log(x) = log2(x) * ln(2)
MASK_NONE, MASK_BOOL, MASK_FLOAT = 0, 1, 2  # the kernels' MASK_KIND


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
    def _softcap(s, cap):
        """(cap tanh(s / cap), tanh(s / cap)) to float32's precision for every cap (Triton has no tanh of its own).

        For |x| = |s / cap| < 1/4, tanh(x) / x is its Taylor series in x^2 (terms to x^10, each below 1e-8 there)
        and the capped score is s * (tanh(x) / x): no cancellation, and s comes back unchanged when x^2 rounds to 0
        (a cap of 1e30). Beyond, tanh |x| = (1 - e) / (1 + e) with e = e^{-2|x|} in (0, 0.61]: no overflow, and the
        subtraction loses at most a bit. (The textbook 1 - 2 / (e^{2x} + 1) cancels for small x: a cap of 1e6 gave
        errors of 0.1 and one of 1e30 uniform attention.)
        """
        x = s / cap
        ax = tl.abs(x)
        small = ax < 0.25
        x2 = tl.where(small, x * x, 0.0)
        ratio = 1.0 + x2 * (-0.3333333333333333 + x2 * (0.13333333333333333 + x2 * (
            -0.05396825396825397 + x2 * (0.021869488536155203 + x2 * -0.008863235529902197))))  # tanh(x) / x
        e = tl.exp2(ax * (-2.0 * _LOG2E))  # e^{-2|x|}: 1 at x = 0, 0 for huge |x| (never inf)
        big = (1.0 - e) / (1.0 + e)
        big = tl.where(x < 0, -big, big)
        th = tl.where(small, x * ratio, big)
        return tl.where(small, s * ratio, cap * big), th

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
                qk, th = _softcap(qk, softcap)
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
                    qk, th = _softcap(qk, softcap)  # th kept for the derivative 1 - tanh^2
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
                qk, th = _softcap(qk, softcap)
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
    _tile_logits = _softcap = _attn_fwd_kernel = _attn_bwd_preprocess = _attn_bwd_dkdv_kernel = _attn_bwd_dq_kernel = None


# ----------------------------------------------------------------------------------------------
# the kernels by name (for the launcher in attn_lib.flash, compile_kernel and notebook 09)
# ----------------------------------------------------------------------------------------------
KERNELS = ("forward", "preprocess", "dkdv", "dq")


def _kernel(name: str):
    return {"forward": _attn_fwd_kernel, "preprocess": _attn_bwd_preprocess, "dkdv": _attn_bwd_dkdv_kernel,
            "dq": _attn_bwd_dq_kernel}[name]


def triton_available() -> bool:
    """True when Triton imported (Linux); the kernels can then run compiled (CUDA) or interpreted (CPU).

    Takes and returns no tensors: a bool.

    Raises:
        Nothing: a missing Triton is the ``False`` answer, not an error.

    Source: the course's own (Triton ships Linux wheels only).
    """
    return triton is not None


def kernel_source(kernel: str = "forward") -> str:
    """A kernel's Python source (what notebook 09 reads part by part); ``kernel`` one of :data:`KERNELS`.

    Takes and returns no tensors: ``kernel`` a str, the source a str (dedented, the ``@triton.jit`` line left out).

    Raises:
        RuntimeError: Triton is not installed, so there is no kernel to show.
        TypeError / ValueError: ``kernel`` not one of :data:`KERNELS`.

    Source: Dao (2023), "FlashAttention-2", Algorithms 1 and 2, as written in this module.
    """
    import inspect
    import textwrap

    if triton is None:
        raise RuntimeError("Triton is not installed (it has Linux wheels only), so there is no kernel to show")
    check_choice("kernel", kernel, KERNELS)
    return textwrap.dedent(inspect.getsource(_kernel(kernel).fn))
