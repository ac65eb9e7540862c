"""Notebook 12's "predict, then check" questions (see :mod:`attn_lib.exercises.concepts`)."""

from attn_lib.exercises.concepts import Question, register

register(Question(
    id="12.state_growth",
    prompt=("A linear-attention layer with 4 heads and E = Ev = 64 decodes one token at a time. The context grows "
            "from 1 024 to 32 768 tokens. Its recurrent state grows ..."),
    choices={"a": "32 times, like a KV cache", "b": "not at all", "c": "about 5 times (log2 32)"},
    answer="b",
    hints={
        "a": "A KV cache keeps one key and one value per token; the recurrent state folds every token into "
             "S = Σ φ(k) vᵀ, an E x Ev matrix per head, whose size has no sequence length in it.",
        "c": "Nothing in the update S <- S + φ(k) vᵀ depends on how many tokens came before: adding to a matrix "
             "does not make it bigger.",
    },
    explanation=("The state is 4 x 64 x 64 numbers (+ a 64-vector normaliser per head) at every length: "
                 "constant memory and constant work per token. What it loses instead is precision: "
                 "32 768 tokens squeezed into 64 x 64 numbers per head."),
))

register(Question(
    id="12.fft_cost",
    prompt=("Hyena (and S4's convolution mode) applies a filter as long as the sequence through the FFT. Double the "
            "length L: the cost is multiplied by ..."),
    choices={"a": "exactly 2: it is linear", "b": "a little more than 2: it grows as L log L",
             "c": "4: it is quadratic, like attention"},
    answer="b",
    hints={
        "a": "An FFT of n points costs about n log2 n operations; log2(2L) > log2(L), so doubling L more than "
             "doubles the work. Linear in L is the recurrent layers' cost, not the FFT's.",
        "c": "4 times would be the direct sum over all (t, s) pairs; the FFT avoids it: n log n, not n².",
    },
    explanation=("2L log(2L) / (L log L) = 2 (1 + 1/log2 L): about 2.2 at L = 1 024. O(L log L) is far below "
                 "attention's O(L²), but it is not linear, and Hyena's paper says so."),
))
