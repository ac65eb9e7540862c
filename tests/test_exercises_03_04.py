"""The exercise checks of notebooks 03 and 04 accept correct answers and name typical wrong ones."""

import math

import pytest
import torch

from attn_lib.exercises import (
    check_attention,
    check_attention_weights,
    check_causal_mask,
    check_decoder_mask,
    check_masked_attention,
    check_self_attention,
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


def test_check_attention():
    assert check_attention(lambda q, k, v: _weights(q, k) @ v)
    _fails_with(check_attention(lambda q, k, v: _weights(q, k, scale=1.0) @ v), "missing 1/sqrt(d_k) scale")
    _fails_with(check_attention(lambda q, k, v: _weights(q, k, dim=-2) @ v), "wrong axis")
    _fails_with(check_attention(lambda q, k, v: _weights(q, k)), "you returned the weights")
    _fails_with(check_attention(lambda q, k, v: _weights(q, k) @ k), "over the VALUES")
    _fails_with(check_attention(lambda q, k, v: _weights(q, k) @ v + 1), "differs from the reference")


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
                                   check_causal_mask, check_masked_attention, check_decoder_mask])
def test_checks_are_deterministic(check):
    # the saved notebook output (the message) must reproduce: same fresh inputs every run
    assert repr(check(_not_written)) == repr(check(_not_written))
