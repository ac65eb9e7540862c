"""Notebook 09's predict-then-check questions: the right answer passes, every wrong choice gets its own hint."""

from __future__ import annotations

import pytest

from attn_lib.exercises.concepts import QUESTIONS, check_prediction
from attn_lib.tiled import causal_tiles


@pytest.mark.parametrize("qid", ["09.causal_tiles", "09.gqa_dk"])
def test_right_answer_passes_and_wrong_ones_get_their_hint(qid):
    check_prediction(qid, ...)  # loads the questions
    q = QUESTIONS[qid]
    assert check_prediction(qid, q.answer).passed
    for key in q.choices:
        if key != q.answer:
            res = check_prediction(qid, key)
            assert not res.passed and q.hints[key] in str(res.message)


def test_causal_tiles_answer_is_derived():
    n = len(causal_tiles(8192, 8192, 128, 128))
    assert n == 64 * 65 // 2 == 2080  # "b": about half of 4096


def test_gqa_dk_answer_is_derived():
    # autograd of torch's enable_gqa: dK of a shared head = sum of the per-query-head gradients
    import torch

    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 5, 4, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 6, 4, generator=g, dtype=torch.float64)
    F = torch.nn.functional
    (dk,) = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, enable_gqa=True).sum(), k)
    k_rep = k.detach().repeat_interleave(4, 1).requires_grad_()
    (dk_rep,) = torch.autograd.grad(F.scaled_dot_product_attention(q, k_rep, v.repeat_interleave(4, 1)).sum(), k_rep)
    torch.testing.assert_close(dk, dk_rep.view(1, 2, 4, 6, 4).sum(2))
