"""Notebook 04's "predict, then check" questions (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="04.left_padding_nan",
    prompt=("A short sentence is LEFT-padded (its [PAD]s come first) and the mask is padding AND causal. A naive "
            "softmax over scores with -inf at blocked positions gives NaN rows. Which rows?"),
    choices={
        "a": "the rows of the padded queries at the start: every key they may see (at or before them) is padding",
        "b": "the rows of the real tokens at the end: they see the padding keys",
        "c": "no row: softmax turns -inf scores into weights 0",
    },
    answer="a",
    hints={
        "b": "A real token at the end may see itself and the real tokens before it, so its row keeps finite scores: "
             "exp(-inf) = 0 only removes the padding keys from a row that still has other keys.",
        "c": "exp(-inf) = 0 is fine while a row keeps one finite score. If EVERY score of the row is -inf, the "
             "softmax divides 0 by 0.",
    },
    explanation=("Causal lets query i see keys 0..i; left padding puts [PAD] at 0..p-1. For a padded query i < p "
                 "all of its keys 0..i are padding, so every score is -inf and softmax computes 0/0 = NaN."),
))
