"""The exercise checks of notebooks 03 and 04 accept correct answers and name typical wrong ones."""

import math

import pytest
import torch

from attn_lib.course.exercises import (
    check_attention,
    check_attention_weights,
    check_causal_mask,
    check_decoder_mask,
    check_masked_attention,
    check_self_attention,
    check_window_mask,
)


from exercise_asserts import fails_with as _fails_with, not_written as _not_written


# ------------------------------------------------------------------ notebook 03
def _weights(q, k, scale=None, dim=-1):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return torch.softmax(q @ k.transpose(-2, -1) * scale, dim=dim)


def test_check_attention_weights():
    assert check_attention_weights(_weights)
    assert "✅" in repr(check_attention_weights(_weights))
    _fails_with(check_attention_weights(lambda q, k: _weights(q, k, scale=1.0)), "missing 1/sqrt(d_k) scale")
    _fails_with(check_attention_weights(lambda q, k: _weights(q, k, dim=-2)), "softmax over the wrong axis")
    _fails_with(check_attention_weights(lambda q, k: _weights(q, k, scale=1 / q.shape[-1])), "divided by d_k")
    _fails_with(check_attention_weights(lambda q, k: q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])),
                "not the weights")
    _fails_with(check_attention_weights(_not_written), "not written yet")
    # notebook 03's exercise 1: a softmax written by hand must subtract the row max, or large scores overflow

    def by_hand(q, k, stable):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        e = torch.exp(s - s.amax(-1, keepdim=True) if stable else s)
        return e / e.sum(-1, keepdim=True)

    assert "passed on 5 fresh inputs" in repr(check_attention_weights(lambda q, k: by_hand(q, k, True)))
    _fails_with(check_attention_weights(lambda q, k: by_hand(q, k, False)), "Subtract each row's max before exp")
    # key.t() only works for 2-D inputs: the batched trials show the crash instead of a false pass
    _fails_with(check_attention_weights(lambda q, k: torch.softmax(q @ k.t() / math.sqrt(q.shape[-1]), -1)), "raised")


def _attention(q, k, v, scale=None, bias=None, *, scale_as=None, bias_as=None):
    """Exercise 2 of notebook 03, right or with one typical mistake: scale_as / bias_as name how it goes wrong."""
    raw, default = q @ k.transpose(-2, -1), 1 / math.sqrt(q.shape[-1])
    used = default if scale is None else scale
    s = raw * used
    if scale is not None and scale_as is not None:
        s = {"ignored": lambda: raw * default, "divides": lambda: raw / scale,
             "twice": lambda: raw * default * scale, "squared": lambda: raw * scale ** 2}[scale_as]()
    if bias is None:
        return torch.softmax(s, dim=-1) @ v
    if bias_as == "after":
        return (torch.softmax(s, dim=-1) + bias) @ v
    s = {None: lambda: s + bias, "before": lambda: (raw + bias) * used,
         "transposed": lambda: s + bias.transpose(-2, -1), "ignored": lambda: s, "subtracted": lambda: s - bias,
         "multiplied": lambda: s * bias}[bias_as]()
    return torch.softmax(s, dim=-1) @ v


def test_check_attention():
    # right: written out, and torch's own function (the check's reference) with the same arguments
    assert check_attention(_attention)
    assert "passed on 6 fresh inputs" in repr(check_attention(
        lambda q, k, v, scale=None, bias=None: torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, scale=scale)))
    # the mistakes of the 3-argument attention still get their hints (the first trial uses the defaults)
    _fails_with(check_attention(lambda q, k, v, scale=None, bias=None: _weights(q, k, scale=1.0) @ v),
                "missing 1/sqrt(d_k) scale")
    _fails_with(check_attention(lambda q, k, v, scale=None, bias=None: _weights(q, k, dim=-2) @ v), "wrong axis")
    _fails_with(check_attention(lambda q, k, v, scale=None, bias=None: _weights(q, k)), "you returned the weights")
    _fails_with(check_attention(lambda q, k, v, scale=None, bias=None: _weights(q, k) @ k), "over the VALUES")
    _fails_with(check_attention(lambda q, k, v, scale=None, bias=None: _attention(q, k, v, scale, bias) + 1),
                "differs from the reference")
    _fails_with(check_attention(_not_written), "not written yet")


@pytest.mark.parametrize("scale_as, words", [
    ("ignored", "although scale was given"), ("divides", "divided the scores by scale"),
    ("twice", "both 1/sqrt(d_k) and scale"), ("squared", "scale²")])
def test_check_attention_names_the_scale_mistakes(scale_as, words):
    _fails_with(check_attention(lambda q, k, v, scale=None, bias=None: _attention(q, k, v, scale, bias,
                                                                                   scale_as=scale_as)), words)


@pytest.mark.parametrize("bias_as, words", [
    ("before", "added the bias before scaling"), ("after", "after the softmax"), ("transposed", "bias is transposed"),
    ("ignored", "the bias is missing"), ("subtracted", "subtracted the bias"),
    ("multiplied", "multiplied the scores by the bias")])
def test_check_attention_names_the_bias_mistakes(bias_as, words):
    _fails_with(check_attention(lambda q, k, v, scale=None, bias=None: _attention(q, k, v, scale, bias,
                                                                                   bias_as=bias_as)), words)


@pytest.mark.parametrize("dim, words", [(("value", -1), "used d_v = value.shape[-1]"),
                                        (("query", -2), "the number of queries L")])
def test_check_attention_names_d_k_taken_from_the_wrong_dimension(dim, words):
    def wrong(q, k, v, scale=None, bias=None):
        n = {"value": v, "query": q}[dim[0]].shape[dim[1]]
        return _attention(q, k, v, 1 / math.sqrt(n) if scale is None else scale, bias)

    _fails_with(check_attention(wrong), words)


def test_check_attention_catches_a_given_scale_ignored_on_every_biased_trial():
    # the ALiBi trial's scale (0.3) differs from its 1/sqrt(d_k) = 0.25 (it was 0.25, so that trial tested no
    # scale): an answer that ignores the given scale only with a per-head (H, L, S) bias fails there
    def ignores_scale_with_bias(q, k, v, scale=None, bias=None):
        per_head = bias is not None and bias.dim() == 3 and bias.shape[-2] > 1  # the ALiBi trial only
        return _attention(q, k, v, None if per_head else scale, bias)

    _fails_with(check_attention(ignores_scale_with_bias), "although scale was given")


def test_check_attention_names_a_missing_default_and_a_none_used_as_a_number():
    _fails_with(check_attention(lambda q, k, v: _weights(q, k) @ v), "scale=None, bias=None", "takes 3 positional")
    _fails_with(check_attention(lambda q, k, v, scale, bias: _attention(q, k, v, scale, bias)),
                "scale=None, bias=None", "missing 2 required")
    _fails_with(check_attention(lambda q, k, v, scale=None, bias=None: _weights(q, k) @ v + 0 * bias),
                "used a None argument as a number", "NoneType")
    _fails_with(check_attention(lambda q, k, v, scale=None, bias=None: torch.softmax(q @ k.mT * scale, -1) @ v),
                "used a None argument as a number")


def test_check_attention_reference_is_torch_with_a_float_mask():
    # the check's expected output: torch's function with bias as a float attn_mask, the scale multiplying Q·Kᵀ;
    # equal in float64 to the formula written out, for the kinds of bias the check uses (broadcast from the right)
    from attn_lib.positional import alibi_bias

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, d, generator=g, dtype=torch.float64) for n, d in ((4, 16), (6, 16), (6, 5)))
    for scale, bias in ((None, None), (0.25, alibi_bias(3, 4, 6, dtype=torch.float64)),
                        (2.0, torch.randn(2, 3, 1, 6, generator=g, dtype=torch.float64))):
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
        assert (want - _attention(q, k, v, scale, bias)).abs().max() < 1e-12
    # and it tells the orders apart: the bias added before the scaling is another answer
    bias = alibi_bias(3, 4, 6, dtype=torch.float64)
    assert (_attention(q, k, v, 0.25, bias) - _attention(q, k, v, 0.25, bias, bias_as="before")).abs().max() > 1e-3


def test_check_self_attention():
    def right(x, wq, wk, wv):
        return _weights(x @ wq, x @ wk) @ (x @ wv)

    assert check_self_attention(right)
    _fails_with(check_self_attention(lambda x, wq, wk, wv: _weights(x @ wq, x @ wk, scale=1.0) @ (x @ wv)),
                "missing 1/sqrt(d_k)")
    _fails_with(check_self_attention(
        lambda x, wq, wk, wv: _weights(x @ wq, x @ wk, scale=x.shape[-1] ** -0.5) @ (x @ wv)), "d_model")
    _fails_with(check_self_attention(lambda x, wq, wk, wv: _weights(x @ wq, x @ wv) @ (x @ wk)), "swapped")
    # the variation: values of another width d_v; the scale still uses d_k
    _fails_with(check_self_attention(
        lambda x, wq, wk, wv: _weights(x @ wq, x @ wk, scale=wv.shape[1] ** -0.5) @ (x @ wv)), "1/sqrt(d_v)")
    _fails_with(check_self_attention(lambda x, wq, wk, wv: _weights(x @ wq.T, x @ wk.T) @ (x @ wv.T)),
                "raised")  # transposed (d_model, d_k) matrices do not even multiply when d_model != d_k


def test_check_self_attention_transposed_square_matrices_get_the_hint():
    # only the square trial can run transposed matrices; make the other trials pass to reach it
    def transposed_when_square(x, wq, wk, wv):
        if wq.shape[0] == wq.shape[1]:
            return _weights(x @ wq.T, x @ wk.T) @ (x @ wv.T)
        return _weights(x @ wq, x @ wk) @ (x @ wv)

    _fails_with(check_self_attention(transposed_when_square), "transposed")


# ------------------------------------------------------------------ notebook 04
def test_check_causal_mask():
    assert check_causal_mask(lambda n: torch.ones(n, n, dtype=torch.bool).tril())
    _fails_with(check_causal_mask(lambda n: ~torch.ones(n, n, dtype=torch.bool).tril()), "inverted")
    _fails_with(check_causal_mask(lambda n: torch.ones(n, n, dtype=torch.bool).triu()), "upper triangle")
    _fails_with(check_causal_mask(lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1)), "diagonal is missing")
    _fails_with(check_causal_mask(lambda n: torch.ones(n, n).tril()), "return a bool tensor")
    _fails_with(check_causal_mask(_not_written), "not written yet")


def _window(lengths, T, w, *, padding="left", window="<", causal=True, on="keys", combine="and"):
    """Notebook 04's exercise 1, right or with one typical mistake (written with loops, unlike the check)."""
    out = torch.zeros(len(lengths), T, T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        real = [(t >= T - n) if padding == "left" else (t < n) for t in range(T)]
        for i in range(T):
            for j in range(T):
                ok_time = (j <= i) if causal else True
                dist = i - j if causal else abs(i - j)
                ok_window = {"<": dist < w, "<=": dist <= w, None: True}[window]
                ok_real = {"keys": real[j], "queries": real[i], None: True}[on]
                if combine == "and":
                    out[b, i, j] = ok_time and ok_window and ok_real
                else:
                    out[b, i, j] = (ok_time and ok_window) or ok_real
    return out


def test_check_window_mask():
    assert check_window_mask(_window)
    # a differently written right answer: the distance matrix and the first real position, vectorised
    def vectorised(lengths, max_len, window):
        d = torch.arange(max_len)[:, None] - torch.arange(max_len)[None, :]  # i - j
        first = max_len - torch.as_tensor(lengths)
        keys_real = torch.arange(max_len) >= first[:, None, None]  # (B, 1, T)
        return keys_real & (d >= 0) & (d < window)

    assert "passed on 4 fresh inputs" in repr(check_window_mask(vectorised))
    _fails_with(check_window_mask(lambda l, T, w: ~_window(l, T, w)), "inverted")
    _fails_with(check_window_mask(lambda l, T, w: _window(l, T, w, padding="right")), "RIGHT-padded")
    _fails_with(check_window_mask(lambda l, T, w: _window(l, T, w, window="<=")), "off by one in the window")
    _fails_with(check_window_mask(lambda l, T, w: _window(l, T, w, window=None)), "the window is missing")
    _fails_with(check_window_mask(lambda l, T, w: _window(l, T, w, causal=False)), "causal part is missing")
    _fails_with(check_window_mask(lambda l, T, w: _window(l, T, w, on=None)), "padding part is missing")
    _fails_with(check_window_mask(lambda l, T, w: _window(l, T, w, on="queries")), "queries (rows)")
    _fails_with(check_window_mask(lambda l, T, w: _window(l, T, w, combine="or")), "OR")
    _fails_with(check_window_mask(lambda l, T, w: _window(l, T, w).int()), "return a bool tensor")
    _fails_with(check_window_mask(_not_written), "not written yet")


def _masked(q, k, v, mask, *, safe=True, scale=True):
    s = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale else 1.0)
    w = torch.softmax(s.masked_fill(~mask, -math.inf), dim=-1)
    if safe:
        w = torch.nan_to_num(w, nan=0.0)
    return w @ v


def test_check_masked_attention():
    assert check_masked_attention(_masked)
    _fails_with(check_masked_attention(lambda q, k, v, m: _masked(q, k, v, ~m)), "inverted")
    _fails_with(check_masked_attention(lambda q, k, v, m: _masked(q, k, v, m, safe=False)), "NaN")
    _fails_with(check_masked_attention(
        lambda q, k, v, m: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1) * m @ v),
        "after the softmax")
    _fails_with(check_masked_attention(
        lambda q, k, v, m: torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) * m, -1) @ v),
        "multiplying the scores by the mask")
    _fails_with(check_masked_attention(lambda q, k, v, m: _masked(q, k, v, m, scale=False)), "scale")
    _fails_with(check_masked_attention(
        lambda q, k, v, m: torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~m, 0.0), -1) @ v),
        "masked_fill with 0")


def _decoder(lengths, T, *, keys=True, combine="and", queries=False):
    pad = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    p = pad[:, None, :] if keys else pad[:, :, None]
    if queries:
        p = p & pad[:, :, None]
    return p & causal if combine == "and" else p | causal


def test_check_decoder_mask():
    assert check_decoder_mask(_decoder)
    _fails_with(check_decoder_mask(lambda lengths, T: ~_decoder(lengths, T)), "inverted")
    _fails_with(check_decoder_mask(lambda lengths, T: _decoder(lengths, T, keys=False)), "not the queries (rows)")
    _fails_with(check_decoder_mask(lambda lengths, T: _decoder(lengths, T, combine="or")), "OR")
    _fails_with(check_decoder_mask(lambda lengths, T: _decoder(lengths, T, queries=True)), "not the queries (rows)")  # same mask as above for right padding
    _fails_with(check_decoder_mask(lambda lengths, T: torch.ones(T, T, dtype=torch.bool).tril().expand(len(lengths), T, T)),
                "padding part is missing")
    _fails_with(check_decoder_mask(
        lambda lengths, T: (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None])[:, None, :]
        & ~torch.ones(T, T, dtype=torch.bool).tril()), "causal part is inverted")


@pytest.mark.parametrize("check", [check_attention_weights, check_attention, check_self_attention,
                                   check_causal_mask, check_window_mask, check_masked_attention,
                                   check_decoder_mask])
def test_checks_are_deterministic(check):
    # the saved notebook output (the message) must reproduce: same fresh inputs every run
    assert repr(check(_not_written)) == repr(check(_not_written))
