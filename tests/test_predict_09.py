"""Notebook 09's predict-then-check answers, derived. (The right-answer / wrong-hint test of every question is in
tests/test_predictions.py.)"""

from __future__ import annotations

from attn_lib.exercises.concepts import QUESTIONS, questions_for
from attn_lib.tiled import causal_tiles


questions_for(9)  # loads predict_09.py


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
