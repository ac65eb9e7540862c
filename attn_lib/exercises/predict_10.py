"""Notebook 10's "predict, then check" questions (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="10.cache_query_rows",
    prompt=("The capstone model generates with a KV cache. After a prompt of 5 tokens it has generated 14 "
            "more. To produce the next token, how many query rows does each attention layer compute?"),
    answer=1.0,
    tolerance=0.0,
    hints={
        "high": "With the cache, the keys and values of the 19 earlier tokens are stored; only the newest "
                "token needs a query. Without a cache the layer would recompute all 20 rows.",
    },
    explanation=("One: the newest token's query attends over the 19 cached keys and its own. The cache trades "
                 "memory (2 x num_kv_heads x head_dim numbers per token and layer) for recomputation."),
))

register(Question(
    id="10.gqa_cache_size",
    prompt=("The capstone's attention has num_heads = 4 query heads and num_kv_heads = 2 key/value heads. "
            "Compared with a model with 4 key/value heads (plain multi-head attention), its KV cache is ..."),
    choices={"a": "the same size", "b": "half the size", "c": "a quarter of the size"},
    answer="b",
    hints={
        "a": "The cache stores keys and values per key/value head, not per query head.",
        "c": "Only the key/value heads are halved (4 -> 2); the head_dim and the number of tokens stay.",
    },
    explanation=("The cache holds (B, num_kv_heads, S, head_dim) keys and values: 2 heads instead of 4 halves it, "
                 "while all 4 query heads still attend (two per key/value head)."),
))

register(Question(
    id="10.self_only_deeper",
    prompt=("On the copy task the self-only model (every token attends only to itself) stays at ln 16 = 2.77 nats "
            "per word. Give it 8 layers instead of 2 and train it 10 times longer. Its held-out loss on the copied "
            "half becomes ..."),
    choices={"a": "close to 0, like the attention model", "b": "about half of ln 16", "c": "still about ln 16"},
    answer="c",
    hints={
        "a": "Depth adds computation per token, not information: with the mask eye(L, L) every layer sees only the "
             "token's own vector, so no layer ever learns an earlier word.",
        "b": "There is no partial credit from depth: the next word is independent of the current one, and the current "
             "one is all any layer sees. Exercise 4 proves the bound.",
    },
    explanation=("Still ln 16. With one key per query the softmax gives weight 1 to the token itself, so by induction "
                 "over the layers the logits at position i are a function of token i alone; the copied word is "
                 "independent of it, and Gibbs' inequality bounds the cross-entropy below by ln 16 at any depth."),
))
