"""Notebook 06's "predict, then check" questions (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="06.lazy_dog_by_position",
    prompt=('In "The quick brown fox jumps over the lazy dog." a head puts much weight from "lazy" on "dog". '
            "Which head would do that by position alone, without knowing any grammar?"),
    choices={"a": "a previous-token head (query i looks at key i - 1)",
             "b": "a next-token head (query i looks at key i + 1)",
             "c": "a head that puts most of its weight on [CLS]"},
    answer="b",
    hints={
        "a": '"dog" comes after "lazy": from the query "lazy", the previous token is "the".',
        "c": "A [CLS] head sends the weight of every query to the first token, not to \"dog\".",
    },
    explanation=('"dog" is the token right after "lazy", so a head that always looks one token ahead links '
                 "lazy -> dog for every adjective-noun pair that is adjacent. That is why a role has to beat "
                 "its head's positional baseline before we call it grammar."),
))

register(Question(
    id="06.cls_weight_is_influence",
    prompt=("Most heads of MiniLM put more than half of their attention weight on [CLS]. Switch off the head "
            "that puts the most weight there. The sentence embeddings ..."),
    choices={"a": "change a lot: that head carries the most information",
             "b": "hardly change: a large weight on a small value vector adds little",
             "c": "become NaN: the softmax has nothing left to normalise"},
    answer="b",
    hints={
        "a": "A head's output is sum_s p_s v_s. A large weight p_s times a short value vector v_s is still a "
             "small contribution; look at [CLS]'s share of ||p_s v_s|| before you decide.",
        "c": "Switching a head off multiplies its output by 0 after the softmax; nothing is divided by zero.",
    },
    explanation=("[CLS]'s value vectors are small, so attending to it works like a 'do nothing' default; the "
                 "switch-off experiment shows that head moves the embeddings by less than the median head."),
))
