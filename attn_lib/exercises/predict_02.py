"""Notebook 02's "predict, then check" question (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="02.rope_offset",
    prompt=("With RoPE, put q at position 3 and k at position 1, then q at 10 and k at 8 (the same two vectors). "
            "The second score is ..."),
    choices={"a": "the same as the first", "b": "larger, because both positions are larger",
             "c": "different, by an amount that depends on q and k"},
    answer="a",
    hints={
        "b": "RoPE does not add anything that grows with the position: it only rotates q and k. What matters for "
             "the dot product of two rotated vectors?",
        "c": "Write each pair as a 2-D rotation: R(m·θ) q · R(n·θ) k = q · R((n − m)·θ) k. What is n − m in both cases?",
    },
    explanation="Rotating q by m·θ and k by n·θ leaves their dot product a function of n − m alone: 1 − 3 = 8 − 10.",
))
