"""Exercise checks for notebook 03 (scaled dot-product attention).

Each check runs your function on fresh random inputs, compares it with
:func:`attn_lib.attention.scaled_dot_product_attention` and, on a mismatch, names the typical
mistake it recognises (missing 1/sqrt(d_k) scale, softmax over the wrong axis, ...).
"""

from __future__ import annotations

import math

import torch

from attn_lib.attention import scaled_dot_product_attention
from attn_lib.exercises._core import as_tensor as _as_tensor
from attn_lib.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check

__all__ = ["check_attention_weights", "check_attention", "check_self_attention"]

HINT_NO_SCALE = "missing 1/sqrt(d_k) scale: divide the scores Q·Kᵀ by sqrt(d_k) before the softmax."
HINT_DIV_DK = "you divided by d_k; divide by sqrt(d_k) (math.sqrt(d_k) or d_k ** 0.5)."
HINT_MUL_SQRT = "you multiplied by sqrt(d_k); divide by it instead."
HINT_WRONG_AXIS = (
    "softmax over the wrong axis: each query's weights must sum to 1 over the KEYS, "
    "i.e. softmax(..., dim=-1) on scores of shape (..., L, S)."
)
HINT_NO_SOFTMAX = "these are the scaled scores, not the weights: apply softmax over the keys (dim=-1)."
SHAPE_MISTAKES = (
    "Known shape mistakes: key.T (or key.t()) on a batched key (..., S, d_k) reverses or refuses ALL the dimensions; "
    "key.transpose(-2, -1) swaps only the last two, giving (..., d_k, S). The scores query @ keyᵀ are (..., L, S)."
)


def _scores(q, k, scale):
    return q @ k.transpose(-2, -1) * scale


def _weights_wrong_answers(q, k):
    E = q.shape[-1]
    s = _scores(q, k, 1.0)
    return [
        (torch.softmax(s, dim=-1), HINT_NO_SCALE),
        (torch.softmax(s / E, dim=-1), HINT_DIV_DK),
        (torch.softmax(s * math.sqrt(E), dim=-1), HINT_MUL_SQRT),
        (torch.softmax(s / math.sqrt(E), dim=-2), HINT_WRONG_AXIS),
        (torch.softmax(s, dim=-2), HINT_WRONG_AXIS + " The 1/sqrt(d_k) scale is missing too."),
        (s / math.sqrt(E), HINT_NO_SOFTMAX),
    ]




def check_attention_weights(attention_weights) -> CheckResult:
    """Check ``attention_weights(query, key)`` -> softmax(query·keyᵀ / sqrt(d_k)) over the keys.

    Your function gets query (..., L, d_k) and key (..., S, d_k) float32 tensors and returns the
    weights (..., L, S). Tried on 5 fresh inputs, some with a batch dimension and L != S; the last has
    scores in the hundreds, where a softmax written as exp(s) / sum(exp(s)) overflows float32 (exp(s) is
    inf above s ≈ 88) unless each row's max is subtracted first (notebook 03's exercise 1).
    """
    shapes = [((3, 16), (5, 16)), ((4, 8), (4, 8)), ((2, 6, 32), (2, 3, 32)), ((2, 2, 4, 16), (2, 2, 7, 16)),
              ((3, 16), (6, 16))]
    large = len(shapes) - 1  # the trial with large scores

    def trials():
        for trial, (qs, ks) in enumerate(shapes):
            g = fresh_generator("check_attention_weights", trial)
            q, k = torch.randn(*qs, generator=g), torch.randn(*ks, generator=g)
            if trial == large:
                q, k = 12 * q, 12 * k  # scores q·k / 4 with a spread of about 36: many far above 88
            _, want = scaled_dot_product_attention(q, k, torch.zeros(*ks[:-1], 1))
            got = _as_tensor(call(attention_weights, {"query": q, "key": k}), "attention_weights")
            if trial == large and got.shape == want.shape and not torch.isfinite(got).all():
                raise Mismatch("with large scores your weights hold inf or NaN: exp(s) overflows float32 above "
                               "s ≈ 88. Subtract each row's max before exp: softmax(s) = softmax(s - max(s)), "
                               "and every exp is then at most 1.")
            expect_close(got, want, what="the attention weights", wrong_answers=_weights_wrong_answers(q, k),
                         dtype=q.dtype)
        return len(shapes)

    return run_check("check_attention_weights", trials, shape_mistakes=SHAPE_MISTAKES)


def check_attention(attention) -> CheckResult:
    """Check ``attention(query, key, value)`` -> the output softmax(Q·Kᵀ / sqrt(d_k))·V.

    query (..., L, d_k), key (..., S, d_k), value (..., S, d_v) -> output (..., L, d_v).
    """
    shapes = [((3, 16), (5, 16), (5, 16)), ((4, 8), (6, 8), (6, 3)), ((2, 5, 32), (2, 4, 32), (2, 4, 6))]

    def trials():
        for trial, (qs, ks, vs) in enumerate(shapes):
            g = fresh_generator("check_attention", trial)
            q, k, v = torch.randn(*qs, generator=g), torch.randn(*ks, generator=g), torch.randn(*vs, generator=g)
            want, w = scaled_dot_product_attention(q, k, v)
            got = _as_tensor(call(attention, {"query": q, "key": k, "value": v}), "attention")
            if got.shape == w.shape and got.shape != want.shape:
                raise Mismatch("you returned the weights (..., L, S); multiply them by value to get the output (..., L, d_v).")
            wrong = [(ww @ v, hint) for ww, hint in _weights_wrong_answers(q, k)]
            wrong.append((w @ k, "you multiplied the weights by key; the weighted sum is over the VALUES."))
            expect_close(got, want, what="the attention output", wrong_answers=wrong, dtype=q.dtype)
        return len(shapes)

    return run_check("check_attention", trials, shape_mistakes=SHAPE_MISTAKES + " The output weights @ value is "
                     "(..., L, d_v).")


def check_self_attention(self_attention) -> CheckResult:
    """Check ``self_attention(x, w_q, w_k, w_v)`` -> output of self-attention with learned projections.

    x (T, d_model) are the input vectors; w_q, w_k (d_model, d_k) and w_v (d_model, d_v) the projection
    matrices (Q = x @ w_q, and so on), the value width d_v not always d_k. Returns (T, d_v) =
    softmax(Q·Kᵀ / sqrt(d_k))·V: the scale uses d_k, neither d_model nor d_v.
    """
    dims = [(5, 16, 4, 4), (6, 8, 8, 8), (4, 32, 8, 3), (5, 12, 3, 6)]  # (T, d_model, d_k, d_v); the 2nd is square

    def trials():
        for trial, (T, d_model, d_k, d_v) in enumerate(dims):
            g = fresh_generator("check_self_attention", trial)
            x = torch.randn(T, d_model, generator=g)
            wq, wk = (torch.randn(d_model, d_k, generator=g) / math.sqrt(d_model) for _ in range(2))
            wv = torch.randn(d_model, d_v, generator=g) / math.sqrt(d_model)
            q, k, v = x @ wq, x @ wk, x @ wv
            want, _ = scaled_dot_product_attention(q, k, v)
            got = _as_tensor(call(self_attention, {"x": x, "w_q": wq, "w_k": wk, "w_v": wv}), "self_attention")

            def attn(q_, k_, v_, scale):
                return torch.softmax(q_ @ k_.T * scale, dim=-1) @ v_

            s = 1 / math.sqrt(d_k)
            wrong = [
                (attn(q, k, v, 1.0), HINT_NO_SCALE),
                (attn(q, k, v, 1 / math.sqrt(d_model)),
                 "you scaled by 1/sqrt(d_model); the scale uses the query/key size d_k = w_q.shape[1]."),
                (attn(k, q, v, s), "queries and keys are swapped: Q = x @ w_q, K = x @ w_k."),
                (torch.softmax(q @ k.T * s, dim=0) @ v, HINT_WRONG_AXIS),
            ]
            if d_v != d_k:
                wrong.append((attn(q, k, v, 1 / math.sqrt(d_v)),
                              "you scaled by 1/sqrt(d_v); the scale uses the query/key size d_k = w_q.shape[1]: "
                              "the values enter no dot product, their width d_v only sets the output's."))
            else:
                wrong.append((attn(q, v, k, s), "keys and values are swapped: K = x @ w_k, V = x @ w_v."))
            if d_model == d_k:
                wrong.append((attn(x, x, x, s),
                              "the projections are missing: first compute Q = x @ w_q, K = x @ w_k, V = x @ w_v."))
                wrong.append((attn(x @ wq.T, x @ wk.T, x @ wv.T, s),
                              "the matrices are transposed: the course's convention is Q = x @ w_q with w_q (d_model, d_k)."))
            expect_close(got, want, what="the self-attention output", wrong_answers=wrong, dtype=x.dtype)
        return len(dims)

    return run_check("check_self_attention", trials,
                     shape_mistakes="The course's convention: Q = x @ w_q with x (T, d_model) and w_q (d_model, d_k), "
                                    "so Q is (T, d_k); w_q.T or w_q @ x do not fit.")
