"""The exercise checks of notebook 07 accept right answers and name typical mistakes."""

from __future__ import annotations

import math

import torch

from attn_lib.course.exercises import check_cross_attention, check_most_read_source, check_shift_right


# --------------------------------------------------------------------------- shift_right
def shift_right(tgt_out, bos_id):
    bos = torch.full_like(tgt_out[:, :1], bos_id)
    return torch.cat([bos, tgt_out[:, :-1]], dim=1)


def test_shift_right_accepts_the_solution():
    r = check_shift_right(shift_right)
    assert r and "✅" in repr(r)


def test_shift_right_names_mistakes():
    cases = {
        (lambda t, b: t): "not shifted",
        (lambda t, b: torch.cat([t[:, 1:], torch.full_like(t[:, :1], b)], 1)): "wrong way",
        (lambda t, b: torch.cat([torch.full_like(t[:, :1], b), t], 1)): "one token too long",
        (lambda t, b: torch.cat([torch.zeros_like(t[:, :1]), t[:, :-1]], 1)): "start token",
    }
    for fn, hint in cases.items():
        r = check_shift_right(fn)
        assert not r and hint in repr(r), repr(r)


def test_not_written_yet():
    def stub(*args):
        raise NotImplementedError

    for check in (check_shift_right, check_cross_attention, check_most_read_source):
        r = check(stub)
        assert not r and "not written yet" in repr(r)


# --------------------------------------------------------------------------- cross_attention
def _cross(x, memory, w_q, w_k, w_v, mask, *, scale=True, use_mask=True, invert=False, causal=False,
           swap=False, axis=-1, values=True):
    q, k, v = x @ w_q, memory @ w_k, memory @ w_v
    if swap:
        q, k, v = memory @ w_q, x @ w_k, x @ w_v
    s = q @ k.transpose(-2, -1)
    if scale:
        s = s / math.sqrt(x.shape[-1])
    if use_mask and not swap:
        m = ~mask[:, None, :] if invert else mask[:, None, :]
        if causal:
            m = m & torch.ones(s.shape[-2:], dtype=torch.bool).tril()
        s = s.masked_fill(~m, float("-inf"))
    w = torch.softmax(s, dim=axis)
    return w @ (v if values else k), w


def test_cross_attention_accepts_the_solution():
    r = check_cross_attention(_cross)
    assert r and "✅" in repr(r), repr(r)


def test_cross_attention_names_mistakes():
    cases = {
        "queries and keys are swapped": dict(swap=True),
        "padded source positions get weight": dict(use_mask=False),
        "inverted": dict(invert=True),
        "1/sqrt(D)": dict(scale=False),
        "not causal": dict(causal=True),
        "wrong axis": dict(axis=-2),
        "KEYS": dict(values=False),
    }
    for hint, kw in cases.items():
        r = check_cross_attention(lambda *a, kw=kw: _cross(*a, **kw))
        assert not r and hint in repr(r), (hint, repr(r))


def test_cross_attention_wants_a_pair():
    r = check_cross_attention(lambda *a: _cross(*a)[0])
    assert not r and "pair" in repr(r)


# --------------------------------------------------------------------------- most_read_source
def test_most_read_source_accepts_the_solution():
    r = check_most_read_source(lambda w, toks: [toks[i] for i in w.argmax(-1).tolist()])
    assert r and "✅" in repr(r)


def test_most_read_source_names_mistakes():
    cases = {
        "argmin": lambda w, toks: [toks[i] for i in w.argmin(-1).tolist()],
        "wrong axis": lambda w, toks: [toks[i] for i in w.argmax(0).tolist()],
        "positions": lambda w, toks: w.argmax(-1).tolist(),
        "not a tensor": lambda w, toks: w.argmax(-1),
    }
    for hint, fn in cases.items():
        r = check_most_read_source(fn)
        assert not r and hint in repr(r), (hint, repr(r))
