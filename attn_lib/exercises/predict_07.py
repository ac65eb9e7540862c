"""Notebook 07's "predict, then check" question (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="07.cross_attention_keys",
    prompt=("The source '12/31/99' (8 characters) is padded with 4 <pad> tokens to the batch's 12. While the decoder "
            "writes output character t, how many source positions may its cross-attention weigh above zero?"),
    answer=8,
    hints={
        "low": "Cross-attention has no causal mask: the whole source is known before the translation starts. "
               "Which keys are masked, then?",
        "high": "The padding positions are masked (True = real token in src_padding_mask); they get weight 0.",
    },
    explanation="Cross-attention may read every real source character (8); only the 4 padding keys are masked.",
))
