"""Notebook 09's "predict, then check" questions (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="09.causal_tiles",
    prompt=("Causal attention over N = 8192 tokens in 128 x 128 tiles (64 x 64 = 4096 tiles). How many tiles "
            "does FlashAttention compute?"),
    choices={"a": "all 4096: the mask is applied inside each tile", "b": "about half (2080)",
             "c": "about a quarter (1024)"},
    answer="b",
    hints={
        "a": "A tile whose keys all come after all its query rows is entirely masked: every weight in it "
             "would be 0, so the loop over keys stops before it. Only tiles on or below the diagonal remain.",
        "c": "The diagonal cuts the square grid of tiles into two triangles, not four parts: the lower "
             "triangle with the diagonal is 64 * 65 / 2 tiles.",
    },
    explanation=("Tiles on or below the diagonal are computed, the 64 * 63 / 2 above it skipped: "
                 "64 * 65 / 2 = 2080 of 4096, so causal attention costs about half."),
))

register(Question(
    id="09.gqa_dk",
    prompt=("Grouped-query attention with H = 8 query heads and Hkv = 2 key/value heads: each key/value head is "
            "read by 4 query heads. The gradient dK of one key/value head is ..."),
    choices={"a": "the gradient through one of its query heads (the first)",
             "b": "the sum of the gradients through its 4 query heads",
             "c": "the average of the gradients through its 4 query heads"},
    answer="b",
    hints={
        "a": "All 4 query heads use the same K in their scores, so each of them changes the loss through K.",
        "c": "The chain rule adds the contributions of every use of a tensor; nothing divides by the group size.",
    },
    explanation=("K is used by all 4 query heads of its group, and the chain rule adds every use: "
                 "dK = sum over the group of dS^T Q. The dK/dV kernel loops over the group's heads for that."),
))
