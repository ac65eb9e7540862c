"""Notebook 04's predict-then-check answer, derived: which rows of a left-padded causal batch are NaN.

(The generic right-answer / wrong-hint test of every question is in tests/test_predictions.py.)"""

import torch

from attn_lib.exercises.concepts import QUESTIONS, questions_for
from attn_lib.masks import causal_mask

questions_for(4)  # loads predict_04.py


def test_left_padding_nan_rows_are_the_padded_queries():
    p, L = 3, 7  # 3 [PAD]s first, then 4 real tokens
    real = torch.tensor([False] * p + [True] * (L - p))
    allowed = causal_mask(L, L) & real[None, :]  # query i may see key j: j <= i and j is a real token
    scores = torch.randn(L, L).masked_fill(~allowed, float("-inf"))
    naive = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)  # 0/0 where a row has no finite score
    nan_rows = torch.isnan(naive).all(-1)
    assert nan_rows.tolist() == [True] * p + [False] * (L - p)
    assert QUESTIONS["04.left_padding_nan"].answer == "a"
    assert "padded queries" in QUESTIONS["04.left_padding_nan"].choices["a"]
