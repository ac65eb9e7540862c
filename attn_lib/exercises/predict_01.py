"""Notebook 01's "predict, then check" question (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="01.second_merge",
    prompt=("In the toy corpus (hug 9, pug 6, pun 7, bun 8), suppose hugs occurred 10 times instead of 3. BPE still "
            "merges u + g first. Which pair does it merge second?"),
    choices={"a": "u + n, as with hugs 3 times", "b": "h + ug", "c": "ug + s", "d": "h + u"},
    answer="b",
    hints={
        "a": "u + n still occurs 7 + 8 = 15 times. Now recount h + ug after the first merge: hug has it, and so "
             "has hugs, which counts 10 times now.",
        "c": "ug + s occurs only inside hugs, so 10 times. Which pair sits in hugs AND in hug?",
        "d": "After the first merge hugs is spelled h · ug · s and hug is h · ug: their u went into ug, so h + u no "
             "longer occurs anywhere.",
    },
    explanation=("After u + g, the pair h + ug occurs in hug (9 times) and hugs (10 times): 19, more than u + n (15) "
                 "and ug + s (10). With hugs 3 times it had only 12 and came third: the counts decide the order."),
))
