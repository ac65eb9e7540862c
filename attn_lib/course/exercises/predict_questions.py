"""Every notebook's "predict, then check" questions: the data of :mod:`attn_lib.course.exercises.concepts`, one section per
notebook (00-14), in the order each notebook asks them.

The one file the grader and the student edition withhold (``classroom/sandbox.py``, ``classroom/edition.py``): it holds
the answers, the hints and the explanations. A question is registered with :func:`~attn_lib.course.exercises.concepts.register`
and asked in its notebook with ``attn_lib.course.exercises.check_prediction("NN.slug", answer)``; tests/course/test_predictions.py
derives every answer independently.
"""

import re

from attn_lib.course.exercises.concepts import Question, register


# -----------------------------------------------------------------------------------------------------------------
# Notebook 00
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="00.uniform_row",
    reveals=("one ninth", re.compile(r"\b1\s*/\s*9\b"), re.compile(r"\b0?\.111")),
    prompt="A head gives a query equal scores for all 9 tokens of the sentence. What weight does each token get?",
    answer=1 / 9,
    tolerance=0.002,
    hints={
        "low": "Each row of weights sums to 1, and equal scores give equal weights: 9 equal parts of 1.",
        "high": "The weights are shared among all 9 tokens and sum to 1, so each is less than you think.",
    },
    explanation="softmax of 9 equal scores: e^s / (9 e^s) = 1/9 ≈ 0.111 for every token.",
))


# -----------------------------------------------------------------------------------------------------------------
# Notebook 01
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="01.second_merge",
    reveals=(re.compile(r"9 \+ 10 = 19"), re.compile(r"h \+ ug[^.]{0,70}\b19\b"), re.compile(r"\b19\b[^.]{0,40}h \+ ug")),
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


# -----------------------------------------------------------------------------------------------------------------
# Notebook 02
# -----------------------------------------------------------------------------------------------------------------

# (RoPE's prediction moved to notebook 04 with RoPE itself: 04.rope_swap)


# -----------------------------------------------------------------------------------------------------------------
# Notebook 03
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="03.scale_by_dk",
    reveals=("d_k instead of", "shrink 8 times", "8 times smaller", re.compile(r"(scores|s)\s*/\s*(d_k|64)\b"),
             re.compile(r"(divid\w*|scal\w*) by \$?d_k\b(?!\})[^.]{0,80}(flat|uniform)")),
    prompt=("Divide the scores by d_k = 64 instead of sqrt(d_k) = 8. Compared with the usual scaling, "
            "the attention weights of a row become ..."),
    choices={"a": "sharper (closer to one-hot)", "b": "flatter (closer to uniform)", "c": "exactly the same"},
    answer="b",
    hints={
        "a": "Dividing by 64 instead of 8 makes every score 8 times smaller. Smaller differences between "
             "scores give a softmax that is closer to uniform, not sharper.",
        "c": "The softmax is unchanged by adding a constant, not by multiplying: softmax(x / 8) and "
             "softmax(x / 64) differ whenever the scores differ.",
    },
    explanation=("The scores shrink 8 times, so their differences shrink too and exp() of nearly equal "
                 "numbers gives nearly equal weights: the row flattens towards 1/S."),
))


# -----------------------------------------------------------------------------------------------------------------
# Notebook 04
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="04.left_padding_nan",
    # (not "nothing to attend to": 04 teaches the fully masked row first; the question applies it to left padding)
    reveals=(re.compile(r"padded (query |queries )?rows?[^.]{0,40}(nan|zero)", re.I),
             re.compile(r"only keys[^.]{0,80}padding too"),
             re.compile(r"padded quer\w+.{0,60}keys.{0,20}are padding")),
    prompt=("A short sentence is LEFT-padded (its [PAD]s come first) and the mask is padding AND causal. A naive "
            "softmax over scores with -inf at blocked positions gives NaN rows. Which rows?"),
    choices={
        "a": "the rows of the padded queries at the start: every key they may see (at or before them) is padding",
        "b": "the rows of the real tokens at the end: they see the padding keys",
        "c": "no row: softmax turns -inf scores into weights 0",
    },
    answer="a",
    hints={
        "b": "A real token at the end may see itself and the real tokens before it, so its row keeps finite scores: "
             "exp(-inf) = 0 only removes the padding keys from a row that still has other keys.",
        "c": "exp(-inf) = 0 is fine while a row keeps one finite score. If EVERY score of the row is -inf, the "
             "softmax divides 0 by 0.",
    },
    explanation=("Causal lets query i see keys 0..i; left padding puts [PAD] at 0..p-1. For a padded query i < p "
                 "all of its keys 0..i are padding, so every score is -inf and softmax computes 0/0 = NaN."),
))


register(Question(
    id="04.rope_swap",
    reveals=("signed offset", "sign of the offset", "the sign matters", re.compile(r"offset\s*[-−]\d"),
             re.compile(r"rope_score\(\s*5\s*,\s*2\s*\)")),
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


# -----------------------------------------------------------------------------------------------------------------
# Notebook 05
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="05.params_of_heads",
    reveals=("1,050,624", "1050624", "1_050_624", "787,968", "as many parameters as", "cost no more parameters",
             "costs nothing extra", re.compile(r"same number of (parameters|weights)")),
    prompt=("A multi-head attention layer with d_model = 512 and 8 heads (head_dim 64), with biases. "
            "Compared with one attention head of width 512 that also has biases and an output matrix W_O, it has ..."),
    choices={"a": "8 times as many parameters", "b": "exactly as many parameters", "c": "8 times fewer parameters"},
    answer="b",
    hints={
        "a": "The 8 heads do not each get a 512 x 512 W_Q: they share one 512 x 512 matrix, 64 columns each. "
             "Splitting into heads is a reshape of the projections' output, not 8 copies of them.",
        "c": "Each head's W_Q is 512 x 64, 8 times smaller than 512 x 512 -- but there are 8 of them, and W_O "
             "is still 512 x 512.",
    },
    explanation=("W_Q, W_K, W_V and W_O stay 512 x 512 (plus a bias of 512): 4 x (512*512 + 512) = 1,050,624 "
                 "parameters either way. The heads partition the 512 dimensions; they do not multiply them. (A bare "
                 "head without W_O has 3 x (512*512 + 512) = 787,968.)"),
))


# -----------------------------------------------------------------------------------------------------------------
# Notebook 06
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="06.lazy_dog_by_position",
    reveals=(re.compile(r"(one token ahead|next-token head)[^.]{0,80}lazy\s*(→|->)\s*dog"),
             re.compile(r"lazy\s*(→|->)\s*dog[^.]{0,80}(neighbours|next-token|one token ahead)")),
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
    reveals=("a large weight is not a large influence", "no single head is indispensable",
             re.compile(r"(big|large) weight but a small value"),
             re.compile(r"value vectors? (is|are) small")),
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


# -----------------------------------------------------------------------------------------------------------------
# Notebook 07
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="07.cross_attention_keys",
    reveals=(re.compile(r"(cross-attention|target position)[^.]{0,80}(every|any) (real )?source (character|position)", re.I),
             re.compile(r"cross-attention \|.{0,200}source padding only", re.I),
             re.compile(r"every target position may (look at|read)")),
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


# -----------------------------------------------------------------------------------------------------------------
# Notebook 08
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="08.cache_length",
    reveals=("never fed back", re.compile(r"\b5 \+ 7\b"), re.compile(r"seq_len\s*==\s*12\b"),
             re.compile(r"cache[^.]{0,40}\b12 positions")),
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


# -----------------------------------------------------------------------------------------------------------------
# Notebook 09
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="09.causal_tiles",
    reveals=("2080", "2 080", "2,080", re.compile(r"64 \* 65"),
             re.compile(r"(causal|mask)[^.]{0,60}(about|roughly) half")),
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
    reveals=("sum over the group", "summed over the group", re.compile(r"\bdK\b[^.]{0,60}\bsum"),
             re.compile(r"sum of the gradients through"), re.compile(r"adds? to the same dK")),
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


# -----------------------------------------------------------------------------------------------------------------
# Notebook 10
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="10.cache_query_rows",
    reveals=("one query row", "one token per step", re.compile(r"only the (newest|new|last) token needs a query"),
             re.compile(r"feeds? only the (newest|last|new) token")),
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
    reveals=("gqa_cache_size(", "half the size", re.compile(r"key/value heads, not 4"),
             re.compile(r"(halv\w*|half)[^.]{0,40}\bcache|\bcache[^.]{0,40}(halv\w*|half)")),
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
    reveals=("any depth", "any number of layers", "depth adds"),
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


# -----------------------------------------------------------------------------------------------------------------
# Notebook 11
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="11.mla_vs_mha",
    reveals=("40,960", "40 960", "40960", re.compile(r"\b71(\.\d)?\s*(times|x|×)")),
    prompt=("DeepSeek-V3's attention has 128 heads with keys of 128 + 64 features (no-position + RoPE) and values of "
            "128, and caches a latent of 512 plus one shared RoPE key of 64 per token and layer. How many times "
            "more would an ordinary multi-head attention cache per token, with the same head sizes? (one number)"),
    answer=round(128 * (128 + 64 + 128) / (512 + 64), 1),
    tolerance=1.0,
    hints={
        "low": "Count every head: MHA caches, per token and layer, 128 keys of 192 features AND 128 values of 128.",
        "high": "The values have 128 features, not 192: MHA's cache is 128 x (192 + 128) elements per token and layer.",
    },
    explanation=("MHA: 128 x (192 + 128) = 40,960 elements per token and layer; MLA: 512 + 64 = 576. "
                 "40,960 / 576 = 71.1 times less for MLA."),
))

register(Question(
    id="11.ring_slot",
    reveals=("1808", "1 808", "5904", "5 904", re.compile(r"10[ ,]?000\s*%\s*4[ ,]?096")),
    prompt=("A sliding-window layer with window 4096 keeps its keys in a ring buffer: position p goes to slot "
            "p % 4096. Which slot (0 to 4095) holds the key of position 10,000?"),
    answer=10000 % 4096,
    tolerance=0.0,
    hints={
        "low": "10,000 = 2 x 4096 + 1808: the ring has wrapped around twice; the remainder is the slot.",
        "high": "Slots run from 0 to 4095; take the remainder of 10,000 divided by 4096.",
    },
    explanation=("10,000 % 4096 = 1808; the key it overwrote there was position 10,000 - 4096 = 5904, which just "
                 "left the window."),
))


# -----------------------------------------------------------------------------------------------------------------
# Notebook 12
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="12.state_growth",
    reveals=("constant memory", "does not grow", "fixed-size state", re.compile(r"state[^.]{0,40}(fixed|constant) size")),
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
    reveals=(re.compile(r"O\(\s*[NL]\s*\\?log\s*[NL]\s*\)"), re.compile(r"\b[NL] log [NL]\b"),
             "a little more than 2"),
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


# -----------------------------------------------------------------------------------------------------------------
# Notebook 13
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="13.moba_keys",
    reveals=("2 + 4 = 6", re.compile(r"position 13\b[^.]{0,80}\b6 keys")),
    prompt=("MoBA with blocks of 4 keys and top-2 blocks: how many keys does the query at position 13 (counting from "
            "0) attend to?"),
    choices={"a": "8: two full blocks of 4", "b": "6: its own block up to itself (2 keys) and one earlier block (4)",
             "c": "14: every key up to itself"},
    answer="b",
    hints={
        "a": "Position 13 sits in block 3 (positions 12-15): causally it sees only 12 and 13 of its own block, and "
             "top-2 counts its own block.",
        "c": "That is dense causal attention. MoBA keeps 2 blocks: the query's own and the best earlier one.",
    },
    explanation=("Blocks of 4: position 13 is in block 3, of which it sees 12 and 13 (causal). Top-2 counts that "
                 "block, so one earlier block of 4 keys is added: 2 + 4 = 6 keys."),
))

register(Question(
    id="13.fewest_keys",
    reveals=("67 071", "65 535", re.compile(r"DSA[^.]{0,40}\bfewest")),
    prompt=("At 1 048 576 tokens, which design reads the fewest keys per query (per head)? MoBA (8 blocks of 512), "
            "NSA (compressed blocks of 32 every 16, 16 selected blocks of 64, a window of 512) or DSA (top 2 048)"),
    choices={"a": "MoBA", "b": "NSA", "c": "DSA"},
    answer="c",
    hints={
        "a": "MoBA reads 8 x 512 = 4 096 keys. DSA's top-k is 2 048 tokens.",
        "b": "NSA's compressed branch alone has (1 048 576 - 32) / 16 + 1 = 65 535 entries: it grows with the "
             "context, at 1/16 of its length.",
    },
    explanation=("MoBA 4 096, NSA 65 535 + 1 024 + 512 = 67 071, DSA 2 048. But DSA's indexer scores every one of "
                 "the 1 048 576 keys (small FP8 keys, no softmax) to choose them: the keys attended to are few, the "
                 "keys looked at are all."),
))


# -----------------------------------------------------------------------------------------------------------------
# Notebook 14
# -----------------------------------------------------------------------------------------------------------------

register(Question(
    id="14.paged_waste",
    reveals=("69 %", "69%", "0.5 %", "5 110", "5 136", "5110", "5136"),
    prompt=("Four sequences end at 1 000, 100, 10 and 4 000 tokens. A contiguous cache reserves 4 096 slots for each; "
            "a paged cache takes blocks of 16 slots as they fill. Which slots hold nothing?"),
    choices={"a": "about 70 % of both caches", "b": "about 70 % of the contiguous cache, under 1 % of the paged one",
             "c": "about 30 % of the contiguous cache, about 10 % of the paged one"},
    answer="b",
    hints={
        "a": "Paging allocates a block only when the previous one is full: each sequence leaves at most 15 of its "
             "slots empty, whatever its length.",
        "c": "The contiguous cache holds 5 110 tokens in 4 x 4 096 = 16 384 slots: most of it is empty. The paged "
             "cache wastes at most 15 slots per sequence.",
    },
    explanation=("Contiguous: 1 - 5 110 / 16 384 ≈ 69 % empty. Paged: 1 008 + 112 + 16 + 4 000 = 5 136 slots, "
                 "26 empty, 0.5 %. vLLM measured 20-38 % of a contiguous cache in use in the systems it replaced."),
))

register(Question(
    id="14.ring_imbalance",
    reveals=("3.67", re.compile(r"2W\s*[-−]\s*1"), re.compile(r"\b7\s*(times|x|×)")),
    prompt=("Causal ring attention over 4 096 tokens on 4 processes, each holding a contiguous quarter. How many times "
            "more (query, key) pairs does the last process score than the first?"),
    choices={"a": "the same: every process sees every block once", "b": "about 4 times",
             "c": "about 7 times"},
    answer="c",
    hints={
        "a": "Every block passes every process, but causally a query sees only earlier keys: the first quarter's "
             "queries see at most 1 024 keys, the last quarter's up to 4 096.",
        "b": "4 is the ratio of blocks touched (1 against 4); inside them the first process scores a triangle "
             "(about 1 024² / 2 pairs), the last three full squares and a triangle (3.5 x 1 024²).",
    },
    explanation=("First: 1 024 · 1 025 / 2 ≈ 0.5 M pairs; last: 3 x 1 024² + the triangle ≈ 3.67 M, a ratio of "
                 "2W - 1 = 7 as the sequence grows. Zig-zag sharding gives every process one early and one late "
                 "chunk, and equal work."),
))
