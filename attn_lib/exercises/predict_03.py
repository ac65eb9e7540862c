"""Notebook 03's "predict, then check" questions (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="03.scale_by_dk",
    prompt=("Divide the scores by d_k = 64 instead of sqrt(d_k) = 8. Compared with the usual scaling, "
            "the attention weights of a row become ..."),
    choices={"a": "sharper (closer to one-hot)", "b": "flatter (closer to uniform)", "c": "exactly the same"},
    answer="b",
    hints={
        "a": "Dividing by 64 instead of 8 makes every score 8 times smaller. Smaller differences between "
             "scores give a softmax that is closer to uniform, not sharper.",
        "c": "The softmax is unchanged by adding a constant, not by multiplying: softmax(x / 8) and "
             "softmax(x / 64) differ whenever the scores differ.",
    },
    explanation=("The scores shrink 8 times, so their differences shrink too and exp() of nearly equal "
                 "numbers gives nearly equal weights: the row flattens towards 1/S."),
))
