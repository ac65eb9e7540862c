"""Exercise checks for notebook 03 (scaled dot-product attention).

Each check runs your function on fresh random inputs, compares it with
:func:`attn_lib.attention.scaled_dot_product_attention` and, on a mismatch, names the typical
mistake it recognises (missing 1/sqrt(d_k) scale, softmax over the wrong axis, a bias added before the
scaling, ...). Exercise 2's reference is ``torch.nn.functional.scaled_dot_product_attention`` itself, in float64.
"""

from __future__ import annotations

import math

import torch

from attn_lib.attention import scaled_dot_product_attention
from attn_lib.course.exercises._core import _LearnerError
from attn_lib.course.exercises._core import as_tensor as _as_tensor
from attn_lib.course.exercises._core import HINT_SCALE_ZERO
from attn_lib.course.exercises._core import CheckResult, Mismatch, call, expect_close, fresh_generator, run_check
from attn_lib.positional import alibi_bias

_F_sdpa = torch.nn.functional.scaled_dot_product_attention  # the reference of exercise 2, captured at import

__all__ = ["check_attention_weights", "check_attention", "check_self_attention"]

HINT_NO_SCALE = "missing 1/sqrt(d_k) scale: divide the scores Q·Kᵀ by sqrt(d_k) before the softmax."
HINT_DIV_DK = "you divided by d_k; divide by sqrt(d_k) (math.sqrt(d_k) or d_k ** 0.5)."
HINT_MUL_SQRT = "you multiplied by sqrt(d_k); divide by it instead."
HINT_WRONG_AXIS = (
    "softmax over the wrong axis: each query's weights must sum to 1 over the KEYS, "
    "i.e. softmax(..., dim=-1) on scores of shape (..., L, S)."
)
HINT_NO_SOFTMAX = "these are the scaled scores, not the weights: apply softmax over the keys (dim=-1)."
# exercise 2: scale and bias, as torch's scaled_dot_product_attention(..., attn_mask=bias, scale=scale)
HINT_NOT_SCALED = "the scores are not scaled: multiply Q·Kᵀ by scale (by 1/sqrt(d_k) when scale is None)."
HINT_SCALE_IGNORED = ("you used 1/sqrt(d_k) although scale was given: scale=None means 1/sqrt(d_k), and a number "
                      "given replaces it, as in torch's scaled_dot_product_attention(..., scale=scale).")
HINT_SCALE_DIVIDES = ("you divided the scores by scale; scale MULTIPLIES them, Q·Kᵀ·scale (its default is the "
                      "factor 1/sqrt(d_k), not the divisor sqrt(d_k)).")
HINT_DK_FROM_VALUE = ("the default scale used d_v = value.shape[-1]; it is 1/sqrt(d_k) with d_k = query.shape[-1], "
                      "the size of the vectors in the dot products.")
HINT_DK_FROM_LENGTH = ("the default scale used query.shape[-2], the number of queries L; d_k is the LAST dimension, "
                       "query.shape[-1].")
HINT_SCALE_TWICE = ("you applied both 1/sqrt(d_k) and scale; a given scale replaces the 1/sqrt(d_k), it does not "
                    "come on top of it.")
HINT_SCALE_SQUARED = ("the scores were multiplied by scale twice (scale²): did you scale both query and key? "
                      "Multiply the scores Q·Kᵀ by scale once.")
HINT_BIAS_BEFORE_SCALE = ("you added the bias before scaling, (Q·Kᵀ + bias)·scale; add it to the scaled scores, "
                          "Q·Kᵀ·scale + bias, so that a bias b multiplies a weight by e^b whatever d_k and scale are.")
HINT_BIAS_AFTER_SOFTMAX = ("you added the bias to the weights after the softmax; add it to the scores before the "
                           "softmax, which then makes weights that are positive and sum to 1 over the keys.")
HINT_BIAS_IGNORED = "the bias is missing: when bias is given, add it to the scaled scores before the softmax."
HINT_BIAS_SUBTRACTED = ("you subtracted the bias; add it: Q·Kᵀ·scale + bias (a penalty such as ALiBi's is already "
                        "negative).")
HINT_BIAS_MULTIPLIED = "you multiplied the scores by the bias; a bias is added: Q·Kᵀ·scale + bias."
HINT_BIAS_TRANSPOSED = ("the bias is transposed: bias[..., i, j] belongs to query i and key j, laid out like the "
                        "scores (..., L, S); add it as it is.")
HINT_SIGNATURE = ("the check calls attention(query, key, value) with three arguments and attention(query, key, "
                  "value, scale, bias) with five: define def attention(query, key, value, scale=None, bias=None).")
HINT_NONE = ("your function used a None argument as a number: scale=None means 1/sqrt(d_k) and bias=None means no "
             "bias; test them with `is None` (if bias is not None: ...) before using them.")
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


def _attention_variants(q, k, v, scale, bias):
    """The typical wrong answers of exercise 2 for these inputs, each with its hint (scale None: 1/sqrt(d_k))."""
    default = 1 / math.sqrt(q.shape[-1])
    used = default if scale is None else scale
    raw = q @ k.transpose(-2, -1)  # (..., L, S)
    b = 0.0 if bias is None else bias

    def out(scores, dim=-1):
        return torch.softmax(scores, dim=dim) @ v

    if scale is None and bias is None:
        wrong = [(ww @ v, hint) for ww, hint in _weights_wrong_answers(q, k)]
    else:
        wrong = [(out(raw + b), HINT_NOT_SCALED), (out(raw * used + b, dim=-2), HINT_WRONG_AXIS)]
    if scale is None:  # the default 1/sqrt(d_k) taken from the wrong dimension
        if v.shape[-1] != q.shape[-1]:
            wrong.append((out(raw / math.sqrt(v.shape[-1]) + b), HINT_DK_FROM_VALUE))
        if q.shape[-2] != q.shape[-1]:
            wrong.append((out(raw / math.sqrt(q.shape[-2]) + b), HINT_DK_FROM_LENGTH))
    if scale is not None:
        wrong += [(out(raw * default + b), HINT_SCALE_IGNORED), (out(raw / scale + b), HINT_SCALE_DIVIDES),
                  (out(raw * default * scale + b), HINT_SCALE_TWICE), (out(raw * scale ** 2 + b), HINT_SCALE_SQUARED)]
    if bias is not None:
        wrong += [(out((raw + bias) * used), HINT_BIAS_BEFORE_SCALE),
                  ((torch.softmax(raw * used, dim=-1) + bias) @ v, HINT_BIAS_AFTER_SOFTMAX),
                  (out(raw * used), HINT_BIAS_IGNORED),
                  (out(raw * used - bias), HINT_BIAS_SUBTRACTED),
                  (out(raw * used * bias), HINT_BIAS_MULTIPLIED)]
        if bias.dim() >= 2 and bias.shape[-1] == bias.shape[-2]:
            wrong.append((out(raw * used + bias.transpose(-2, -1)), HINT_BIAS_TRANSPOSED))
    if k.shape == v.shape:
        w = torch.softmax(raw * used + b, dim=-1)
        wrong.append((w @ k, "you multiplied the weights by key; the weighted sum is over the VALUES."))
    return wrong


_OMIT = object()  # the trial that calls attention(query, key, value) with three arguments


def _bias_of(kind, batch, L, S, g):
    if kind is None:
        return None
    if kind == "random":  # any (L, S) bias, not symmetric: bias[i, j] belongs to query i, key j
        return 2 * torch.randn(L, S, generator=g, dtype=torch.float64)
    if kind == "alibi":  # notebook 02's ALiBi, one slope per head: (H, L, S), broadcast over the batch
        return alibi_bias(batch[-1], L, S, dtype=torch.float64)
    return torch.randn(*batch, 1, S, generator=g, dtype=torch.float64)  # "keys": one bias per sequence and key


def check_attention(attention) -> CheckResult:
    """Check ``attention(query, key, value, scale=None, bias=None)`` -> softmax(Q·Kᵀ·scale + bias)·V.

    query (..., L, d_k), key (..., S, d_k), value (..., S, d_v) float64 -> output (..., L, d_v), float64.
    ``scale`` multiplies the scores Q·Kᵀ (None: 1/sqrt(d_k)); ``bias`` is None or a float64 tensor broadcastable to
    the scores (..., L, S), added to the scaled scores before the softmax: the semantics of
    ``torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=bias, scale=scale)`` with a
    float ``attn_mask``, which gives the expected output (in float64). Tried on 6 fresh inputs: once with three
    arguments (the defaults), then with a scale, an (L, S) bias, notebook 02's ALiBi bias (H, L, S) for a batch of
    heads, a bias (B, 1, S) per sequence and key (scores (B, L, S); with heads it would be (B, 1, 1, S)), and
    scale=0.0 (a scale, not the default: uniform weights). The
    hints name the typical mistakes: a scale ignored, divided by, applied on top of 1/sqrt(d_k) or twice; the
    default 1/sqrt(d_k) taken from the wrong dimension; a bias added before the scaling, after the softmax,
    transposed, subtracted or multiplied.
    """
    trials_ = [  # (batch dims, L, S, d_k, d_v, scale, kind of bias)
        ((), 3, 5, 16, 16, _OMIT, None),
        ((), 4, 6, 8, 3, 0.5, None),
        ((), 5, 5, 8, 4, None, "random"),
        ((2, 3), 4, 6, 16, 5, 0.3, "alibi"),  # 0.3, not 1/sqrt(16) = 0.25: a scale ignored must show
        ((2,), 3, 7, 8, 2, 2.0, "keys"),
        ((), 4, 5, 8, 3, 0.0, None),  # scale 0.0 is a scale (uniform weights), not "use the default"
    ]

    def trials():
        for trial, (batch, L, S, E, Ev, scale, kind) in enumerate(trials_):
            g = fresh_generator("check_attention", trial)
            q, k, v = (torch.randn(*batch, n, d, generator=g, dtype=torch.float64)
                       for n, d in ((L, E), (S, E), (S, Ev)))
            bias = _bias_of(kind, batch, L, S, g)
            inputs = {"query": q, "key": k, "value": v}
            if scale is not _OMIT:
                inputs.update(scale=scale, bias=bias)
            used = None if scale is _OMIT else scale
            want = _F_sdpa(q, k, v, attn_mask=bias, scale=used)
            w = torch.softmax(q @ k.transpose(-2, -1) * (1 / math.sqrt(E) if used is None else used)
                              + (0.0 if bias is None else bias), dim=-1)
            try:
                got = _as_tensor(call(attention, inputs), "attention")
            except _LearnerError as e:
                text = str(e.error)
                if isinstance(e.error, TypeError) and "positional argument" in text:
                    raise Mismatch(HINT_SIGNATURE + f" ({type(e.error).__name__}: {text.splitlines()[0]})") from None
                if isinstance(e.error, TypeError) and "NoneType" in text:
                    raise Mismatch(HINT_NONE + f" ({type(e.error).__name__}: {text.splitlines()[0]})") from None
                raise
            if got.shape == w.shape and got.shape != want.shape:
                raise Mismatch("you returned the weights (..., L, S); multiply them by value to get the output "
                               "(..., L, d_v).")
            wrong = _attention_variants(q, k, v, used, bias)
            if used == 0.0:
                wrong = [(_F_sdpa(q, k, v, attn_mask=bias), HINT_SCALE_ZERO), *wrong]
            expect_close(got, want, what="the attention output", wrong_answers=wrong, dtype=q.dtype)
        return len(trials_)

    return run_check("check_attention", trials, success="Your attention equals torch's "
                     "scaled_dot_product_attention(query, key, value, attn_mask=bias, scale=scale).",
                     shape_mistakes=SHAPE_MISTAKES + " The output weights @ value is (..., L, d_v). A bias is added as "
                     "it is: bias[..., i, j] belongs to query i and key j, like the scores (..., L, S); "
                     "it broadcasts against them from the right, as (L, S), (H, L, S) for scores (..., H, L, S), or (B, 1, S) "
                     "for scores (B, L, S).")


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
