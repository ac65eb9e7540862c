"""Notebook 00's "predict, then check" question (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="00.uniform_row",
    prompt="A head gives a query equal scores for all 9 tokens of the sentence. What weight does each token get?",
    answer=1 / 9,
    tolerance=0.002,
    hints={
        "low": "Each row of weights sums to 1, and equal scores give equal weights: 9 equal parts of 1.",
        "high": "The weights are shared among all 9 tokens and sum to 1, so each is less than you think.",
    },
    explanation="softmax of 9 equal scores: e^s / (9 e^s) = 1/9 ≈ 0.111 for every token.",
))
