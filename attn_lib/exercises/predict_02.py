"""Notebook 02's "predict, then check" question (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="02.rope_swap",
    prompt=("With RoPE, score a query q at position 5 against a key k at position 2; then the same q at position 2 "
            "against the same k at position 5. The two scores are ..."),
    choices={"a": "the same: both pairs are 3 positions apart",
             "b": "different in general: the offsets are −3 and +3, and the sign matters",
             "c": "opposite: the second is minus the first"},
    answer="b",
    hints={
        "a": "The score is q · R((n − m)θ) k, a function of the signed offset n − m of key position n and query "
             "position m: here 2 − 5 = −3, then 5 − 2 = +3. Is a rotation by −3θ the same as a rotation by +3θ?",
        "c": "Take q = k: the scores become q · R(−3θ) q and q · R(+3θ) q, which are equal (both turn q by the same "
             "angle, one each way), not opposite. Write q · R(+3θ) k as k · R(−3θ) q: which vectors would have to "
             "swap as well?",
    },
    explanation=("The scores are q · R(−3θ) k and q · R(+3θ) k, equal only for special q and k. Since q · R(φ) k = "
                 "k · R(−φ) q, the second score is the first with q and k swapped too: RoPE knows which of the two "
                 "tokens comes first, not only how far apart they are."),
))
