"""Exercise checks for notebook 05 (multi-head attention).

- :func:`check_split_heads`: (B, T, d_model) -> (B, num_heads, T, head_dim).
- :func:`check_multi_head_attention`: a whole multi-head self-attention forward from given weights.
- :func:`check_head_entropy`: the average attention entropy of each head, the measure the notebook
  uses to find "broad" and "focused" heads.

Each check compares with attn_lib's own functions (:func:`attn_lib.mha.split_heads`,
:class:`attn_lib.mha.MultiHeadAttention`, which tests/test_mha.py proves equal to
``torch.nn.MultiheadAttention``) on fresh random inputs and names the typical mistakes.
"""

from __future__ import annotations

import math

import torch

from attn_lib.course.exercises._core import as_tensor as _as_tensor
from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.masks import causal_mask
from attn_lib.mha import MultiHeadAttention, split_heads

__all__ = ["check_split_heads", "check_multi_head_attention", "check_head_entropy"]

HINT_SPLIT_NO_TRANSPOSE = (
    "the features are cut into heads in the wrong places: you reshaped straight to (B, num_heads, T, head_dim). "
    "First view as (B, T, num_heads, head_dim) -- head j is features j*head_dim .. (j+1)*head_dim-1 of each token -- "
    "then swap the T and num_heads axes with .transpose(1, 2)."
)
HINT_SPLIT_FORGOT_TRANSPOSE = (
    "almost: that is (B, T, num_heads, head_dim). Swap the T and num_heads axes (.transpose(1, 2)) so that each "
    "head holds a (T, head_dim) matrix."
)
HINT_SCALE_D_MODEL = (
    "you scaled the scores by 1/sqrt(d_model); each head's queries and keys have head_dim = d_model / num_heads "
    "features, so divide by sqrt(head_dim)."
)
HINT_NO_SCALE = "missing 1/sqrt(head_dim) scale: divide each head's scores Q·Kᵀ by sqrt(head_dim) before the softmax."
HINT_NO_W_O = "the output projection is missing: multiply the concatenated heads by w_o at the end."
HINT_ONE_HEAD = (
    "you computed ONE attention over all d_model features (a single head). Split Q, K and V into num_heads heads "
    "of head_dim features, attend in each head separately, then concatenate."
)
HINT_MERGE_NO_TRANSPOSE = (
    "the heads are concatenated in the wrong layout: transpose (B, num_heads, T, head_dim) to "
    "(B, T, num_heads, head_dim) before reshaping to (B, T, d_model)."
)
HINT_WRONG_AXIS = (
    "softmax over the wrong axis: each query's weights must sum to 1 over the KEYS (dim=-1 of the (B, H, T, T) scores)."
)
HINT_BITS = "you computed the entropy in bits (log2); use the natural logarithm (nats), torch.log."
HINT_SUM_QUERIES = "you summed the entropies over the queries; take their mean (one number per head, average over the L queries)."
HINT_ENTROPY_AXIS = "the entropy runs over the keys (the last dim, where each row sums to 1), not over the queries."
HINT_ENTROPY_SIGN = "the sign is flipped: entropy is -Σ p·log p, which is >= 0."
HINT_NAN = (
    "your result has NaN: a weight of exactly 0 gives 0·log 0 = 0·(-inf) = NaN. By convention 0·log 0 = 0: "
    "use torch.special.xlogy(p, p) or torch.where(p > 0, p * p.log(), 0)."
)




# ------------------------------------------------------------------------------------------
def check_split_heads(split_heads_fn) -> CheckResult:
    """Check ``split_heads(x, num_heads)``: (B, T, d_model) -> (B, num_heads, T, head_dim).

    Head j must hold features ``j*head_dim : (j+1)*head_dim`` of every token (the layout of
    ``torch.nn.MultiheadAttention`` and of BERT). Tried on 4 fresh inputs.
    """
    dims = [(2, 5, 12, 3), (1, 4, 16, 2), (3, 6, 8, 8), (2, 7, 24, 4)]  # (B, T, d_model, num_heads)

    def trials():
        for trial, (B, T, D, H) in enumerate(dims):
            x = torch.randn(B, T, D, generator=fresh_generator("check_split_heads", trial))
            want = split_heads(x, H)
            got = _as_tensor(call(split_heads_fn, {"x": x, "num_heads": H}), "split_heads")
            wrong = [
                (x.reshape(B, H, T, D // H), HINT_SPLIT_NO_TRANSPOSE),
                (x.reshape(B, T, H, D // H), HINT_SPLIT_FORGOT_TRANSPOSE),
                (x.reshape(B, T, D // H, H).permute(0, 3, 1, 2),
                 "the heads take every num_heads-th feature; head j must take the contiguous block "
                 "j*head_dim .. (j+1)*head_dim-1: view as (B, T, num_heads, head_dim)."),
            ]
            expect_close(got, want, what=f"split_heads(x of shape {(B, T, D)}, num_heads={H})", wrong_answers=wrong,
                         dtype=x.dtype)
        return len(dims)

    return run_check("check_split_heads", trials,
                     shape_mistakes="head_dim = d_model // num_heads; view x as (B, T, num_heads, head_dim), then "
                                    ".transpose(1, 2) gives (B, num_heads, T, head_dim).")


# ------------------------------------------------------------------------------------------
def _reference_mha(x, wq, wk, wv, wo, H):
    """attn_lib's MultiHeadAttention with these weights (nn.Linear stores W transposed: y = x @ W.T)."""
    D = x.shape[-1]
    m = MultiHeadAttention(D, H, bias=False).to(x.dtype)
    with torch.no_grad():
        for lin, w in ((m.q_proj, wq), (m.k_proj, wk), (m.v_proj, wv), (m.out_proj, wo)):
            lin.weight.copy_(w.T)
        return m(x)[0]


def _mha_variants(x, wq, wk, wv, wo, H):
    """Typical wrong answers, each computed from scratch."""
    B, T, D = x.shape
    hd = D // H
    q, k, v = x @ wq, x @ wk, x @ wv

    def attend(qh, kh, vh, scale, dim=-1):
        return torch.softmax(qh @ kh.transpose(-2, -1) * scale, dim=dim) @ vh

    def split(t):
        return t.view(B, T, H, hd).transpose(1, 2)

    def merge(t):
        return t.transpose(1, 2).reshape(B, T, D)

    s = 1 / math.sqrt(hd)
    return [
        (merge(attend(split(q), split(k), split(v), 1 / math.sqrt(D))) @ wo, HINT_SCALE_D_MODEL),
        (merge(attend(split(q), split(k), split(v), 1.0)) @ wo, HINT_NO_SCALE),
        (merge(attend(split(q), split(k), split(v), s)), HINT_NO_W_O),
        (attend(q, k, v, 1 / math.sqrt(D)) @ wo, HINT_ONE_HEAD),
        (attend(q, k, v, s) @ wo, HINT_ONE_HEAD),
        (attend(split(q), split(k), split(v), s).reshape(B, T, D) @ wo, HINT_MERGE_NO_TRANSPOSE),
        (merge(attend(q.reshape(B, H, T, hd), k.reshape(B, H, T, hd), v.reshape(B, H, T, hd), s)) @ wo,
         HINT_SPLIT_NO_TRANSPOSE),
        (merge(attend(split(q), split(k), split(v), s, dim=-2)) @ wo, HINT_WRONG_AXIS),
    ]


def check_multi_head_attention(multi_head_attention) -> CheckResult:
    """Check ``multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads)`` -> (B, T, d_model).

    Self-attention with ``num_heads`` heads and no biases: Q = x @ w_q, K = x @ w_k, V = x @ w_v
    (each (B, T, d_model)), split into heads of head_dim = d_model / num_heads, softmax(Q Kᵀ /
    sqrt(head_dim)) V per head, concatenate, multiply by w_o. All w_* are (d_model, d_model).
    Compared with attn_lib's MultiHeadAttention on 3 fresh inputs.
    """
    dims = [(2, 5, 16, 4), (1, 6, 12, 3), (2, 4, 32, 8)]  # (B, T, d_model, num_heads)

    def trials():
        for trial, (B, T, D, H) in enumerate(dims):
            g = fresh_generator("check_multi_head_attention", trial)
            x = torch.randn(B, T, D, generator=g)
            # scaled so that the scores are large enough for the scale to matter, not so large that softmax is one-hot
            wq, wk, wv, wo = (torch.randn(D, D, generator=g) * (2 / math.sqrt(D)) for _ in range(4))
            want = _reference_mha(x, wq, wk, wv, wo, H)
            got = _as_tensor(
                call(multi_head_attention, {"x": x, "w_q": wq, "w_k": wk, "w_v": wv, "w_o": wo, "num_heads": H}),
                "multi_head_attention",
            )
            expect_close(got, want, what=f"the output for d_model={D}, num_heads={H}",
                         wrong_answers=_mha_variants(x, wq, wk, wv, wo, H), atol=1e-4, dtype=x.dtype)
        return len(dims)

    return run_check("check_multi_head_attention", trials,
                     shape_mistakes="Per head the scores are (B, num_heads, T, T): use k.transpose(-2, -1), not k.T "
                                    "(which reverses all 4 dims); merge the heads back with .transpose(1, 2).reshape(B, "
                                    "T, d_model) -- .view fails after a transpose (use .reshape or .contiguous()).")


# ------------------------------------------------------------------------------------------
def reference_head_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Mean over queries of the entropy -Σ_s p·ln p of each query's attention row, per head.

    Args:
        weights: (..., H, L, S), rows summing to 1 (zeros allowed, 0·ln 0 = 0).

    Returns:
        (..., H) in nats: 0 for a head whose every query looks at one key, ln S for uniform attention.
    """
    return -torch.special.xlogy(weights, weights).sum(dim=-1).mean(dim=-1)


def check_head_entropy(head_entropy) -> CheckResult:
    """Check ``head_entropy(weights)``: (H, L, S) attention weights -> (H,) mean entropy per head (nats).

    The inputs include exact zeros (as after a padding or causal mask), so 0·log 0 must count as 0.
    """
    dims = [(4, 5, 5), (3, 6, 4), (12, 7, 7)]

    def trials():
        for trial, (H, L, S) in enumerate(dims):
            g = fresh_generator("check_head_entropy", trial)
            scores = torch.randn(H, L, S, generator=g) * 2
            if trial != 1:  # a causal mask: exact zeros above the diagonal
                scores = scores.masked_fill(~causal_mask(L, S), float("-inf"))
            w = torch.softmax(scores, dim=-1)
            want = reference_head_entropy(w)
            got = _as_tensor(call(head_entropy, {"weights": w}), "head_entropy")
            plogp = torch.special.xlogy(w, w)
            wrong = [
                (want / math.log(2), HINT_BITS),
                (-plogp.sum(-1).sum(-1), HINT_SUM_QUERIES),
                (-plogp.sum(-2).mean(-1), HINT_ENTROPY_AXIS),
                (-want, HINT_ENTROPY_SIGN),
            ]
            if isinstance(got, torch.Tensor) and got.shape == want.shape and torch.isnan(got).any():
                raise Mismatch(HINT_NAN)
            expect_close(got, want, what=f"the entropies of weights of shape {(H, L, S)}", wrong_answers=wrong,
                         dtype=w.dtype)
        return len(dims)

    return run_check("check_head_entropy", trials)
