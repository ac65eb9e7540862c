"""Notebook 05's "predict, then check" questions (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="05.params_of_heads",
    prompt=("A multi-head attention layer with d_model = 512 and 8 heads (head_dim 64), with biases. "
            "Compared with one attention head of width 512 that also has biases and an output matrix W_O, it has ..."),
    choices={"a": "8 times as many parameters", "b": "exactly as many parameters", "c": "8 times fewer parameters"},
    answer="b",
    hints={
        "a": "The 8 heads do not each get a 512 x 512 W_Q: they share one 512 x 512 matrix, 64 columns each. "
             "Splitting into heads is a reshape of the projections' output, not 8 copies of them.",
        "c": "Each head's W_Q is 512 x 64, 8 times smaller than 512 x 512 -- but there are 8 of them, and W_O "
             "is still 512 x 512.",
    },
    explanation=("W_Q, W_K, W_V and W_O stay 512 x 512 (plus a bias of 512): 4 x (512*512 + 512) = 1,050,624 "
                 "parameters either way. The heads partition the 512 dimensions; they do not multiply them. (A bare "
                 "head without W_O has 3 x (512*512 + 512) = 787,968.)"),
))
