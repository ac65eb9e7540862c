"""Your tiled attention with an online softmax (mirrors attn_lib.tiled; notebook 09).

Shapes: R query rows, Bk keys of one block, Ev head_dim of the values; B batch, H query heads, Hkv key/value heads,
L queries, S keys, E head_dim of query and key.
"""

from __future__ import annotations

import torch

from my_attn._todo import todo


def online_softmax_update(m_old, l_old, acc_old, scores, values):
    """Fold one new block of keys into the running state of the online softmax.

    Args:
        m_old: (R,) running max of the scores seen so far (-inf before the first block).
        l_old: (R,) running sum of exp(score - m_old).
        acc_old: (R, Ev) running sum of exp(score - m_old) · value.
        scores: (R, Bk) the (already scaled) scores of the new block; -inf where masked.
        values: (Bk, Ev) the values of those keys.

    Returns:
        (m_new, l_new, acc_new) in the inputs' dtype: m_new = max(m_old, rowmax(scores)),
        l_new = exp(m_old - m_new)·l_old + rowsum(exp(scores - m_new)),
        acc_new = exp(m_old - m_new)·acc_old + exp(scores - m_new) @ values.
        A row that has seen only -inf scores keeps m = -inf, l = 0, acc = 0 (never NaN).
    """
    todo("online_softmax_update", "09", "3 · The online softmax, derived")


def merge_states(m_a, l_a, acc_a, m_b, l_b, acc_b):
    """Merge two online-softmax states computed over two disjoint sets of keys (split-KV, "flash-decoding").

    Args:
        m_a, l_a: (R,) and acc_a: (R, Ev), the state (max, sum, accumulator) of the first keys;
        m_b, l_b, acc_b: the same for the other keys.

    Returns:
        (m, l, acc) with m = max(m_a, m_b), l = exp(m_a - m)·l_a + exp(m_b - m)·l_b, acc likewise, so that acc / l
        is the softmax-weighted average of the values over all the keys. A row where both maxima are -inf stays
        (-inf, 0, 0), never NaN.
    """
    todo("merge_states", "09", "Exercise 2 · Merging two partial results")


def tiled_attention(query, key, value, *, attn_mask=None, is_causal=False, causal_align="top_left", scale=None,
                    enable_gqa=False, alibi_slopes=None, return_lse=False, block_q=256, block_k=512,
                    window_size=(-1, -1), softcap=None, sinks=None, compile_tile=False):
    """Attention computed tile by tile with the online softmax (FlashAttention-2, Algorithm 1).

    Loop over blocks of ``block_q`` query rows; for each, over blocks of ``block_k`` keys, folding every tile of
    scores into (m, l, acc) with your online_softmax_update logic; divide acc by l once at the end. Never build the
    whole (L, S) score matrix. The course checks this subset of attn_lib's options:

    - ``attn_mask``: None or a bool mask (True = may attend) broadcastable to (..., H, L, S);
    - ``is_causal`` with ``causal_align`` "top_left" (query i sees keys 0..i) or "bottom_right"
      (query i sees keys 0..i + S - L);
    - ``scale`` (default 1/sqrt(E)), ``enable_gqa`` (query head h reads key/value head h // (H / Hkv), without
      repeating K and V), ``return_lse``, ``block_q``, ``block_k`` (the last tiles may be shorter).

    You may leave ``alibi_slopes``, ``window_size``, ``softcap``, ``sinks`` and ``compile_tile`` out: raise
    ValueError when one is set (notebook 09 runs attn_lib's for those).

    Args:
        query: (..., H, L, E), key: (..., Hkv, S, E), value: (..., Hkv, S, Ev); float32 or float64.

    Returns:
        output (..., H, L, Ev) in query's dtype, or (output, lse) with lse (..., H, L) the log-sum-exp of each row's
        scores (natural log). A row that may attend no key gets output 0 and lse -inf (never NaN).
    """
    todo("tiled_attention", "09", "5 · From one row to tiles: `tiled_attention`")
