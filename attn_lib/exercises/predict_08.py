"""Notebook 08's "predict, then check" questions (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="08.cache_length",
    prompt=("Greedy decoding with a KV cache: a prompt of 5 tokens, then 8 new tokens, one at a time. How many "
            "positions does each layer's cache hold at the end?"),
    answer=12.0,
    tolerance=0.0,
    hints={
        "low": "The cache holds the keys and values of every token the model has been FED: the whole prompt, "
               "then each generated token when it is fed back to choose the next one.",
        "high": "The last of the 8 new tokens is chosen from the logits of the step before it; it is never fed "
                "back, so its key and value are never computed.",
    },
    explanation=("5 prompt tokens + the first 7 generated tokens fed back = 12; the 8th new token is output, "
                 "not input. HuggingFace's generate(use_cache=True) caches the same 12 positions."),
))
