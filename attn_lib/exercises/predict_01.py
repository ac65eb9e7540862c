"""Notebook 01's "predict, then check" question (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="01.count_after_merge",
    prompt=("In the toy corpus (hug 9, pug 6, pun 7, bun 8, hugs 3), BPE merged u + g first. After that merge, "
            "how often does the pair h + ug occur?"),
    answer=12,
    hints={
        "low": "Count every word that contains h followed by ug, weighted by its count: hugs has one too.",
        "high": "Only words with h directly before ug count: pug has p + ug, not h + ug.",
    },
    explanation="h + ug occurs in hug (9 times) and hugs (3 times): 12.",
))
