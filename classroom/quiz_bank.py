"""The quiz bank: new questions per notebook, each a template that draws its numbers and derives its answer.

These are not the notebooks' "predict, then check" questions (those are the notebooks' own, and a student has
already seen their answers): each template here asks a new question on the same ideas, usually with numbers drawn
at random, and computes its answer from those numbers. ``tests/test_quiz_bank.py`` recomputes every numeric answer
another way (torch, or the course's own ``attn_lib`` functions, which the course proves equal to torch and
transformers) for several draws.

A template is a function ``(random.Random) -> Item``; ``TEMPLATES`` maps its id (``"03.by_hand_weight"``: the
notebook's two digits, a dot, a name) to it. :mod:`classroom.quizzes` builds a quiz per lab and per student from
these templates (deterministic given the student id), the answer keys and the Moodle XML export.

Standard library only (the teacher's grading venv needs nothing more).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Callable


@dataclass(frozen=True)
class Item:
    """One question as a student sees it, with its answer.

    ``kind`` is "choice" (``choices``, ``answer`` the index of the right one) or "number" (``answer`` the value,
    ``tolerance`` the absolute error accepted). ``explanation`` is the derivation shown in the answer key;
    ``params`` the drawn numbers (the tests recompute the answer from them).
    """

    qid: str
    kind: str
    text: str
    answer: float | int
    explanation: str
    choices: tuple[str, ...] = ()
    tolerance: float = 0.0
    params: dict = field(default_factory=dict)

    def shuffled(self, rng: random.Random) -> "Item":
        """The same question with its choices in another order (a number question is returned as it is)."""
        if self.kind != "choice":
            return self
        order = list(range(len(self.choices)))
        rng.shuffle(order)
        return replace(self, choices=tuple(self.choices[i] for i in order), answer=order.index(self.answer))

    @property
    def answer_text(self) -> str:
        if self.kind == "choice":
            return f"{'abcdefgh'[self.answer]}) {self.choices[self.answer]}"
        return _fmt(self.answer)


def _fmt(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}".replace(",", " ")
    return f"{x:.6g}"


TEMPLATES: dict[str, Callable[[random.Random], Item]] = {}


def template(qid: str):
    def register(fn):
        if qid in TEMPLATES:
            raise ValueError(f"quiz template {qid!r} is registered twice")
        TEMPLATES[qid] = lambda rng, _fn=fn, _id=qid: _fn(rng, _id)
        return fn

    return register


def number(qid, text, answer, why, *, tol=0.0, decimals=None, **params) -> Item:
    if decimals is not None:
        text += f" (give {decimals} decimal{'s' if decimals != 1 else ''})"
        tol = max(tol, 0.6 * 10**-decimals)
    return Item(qid, "number", text, answer, why, tolerance=tol, params=params)


def choice(qid, text, right, wrong, why, **params) -> Item:
    """``right`` first; :meth:`Item.shuffled` puts the choices in a student's order."""
    return Item(qid, "choice", text, 0, why, choices=(right, *wrong), params=params)


def softmax(xs):
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


# ---------------------------------------------------------------- 00, 01: attention's row, tokens and embeddings
@template("00.softmax_weight")
def _(r, qid):
    s = [r.randint(-2, 3) for _ in range(3)]
    w = softmax(s)[0]
    return number(
        qid,
        f"A query's scores for three keys are {s}. What weight does softmax give the first key?",
        w,
        f"e^{s[0]} / (e^{s[0]} + e^{s[1]} + e^{s[2]}) = {w:.4f}.",
        decimals=3,
        scores=s,
    )


@template("00.shift_scores")
def _(r, qid):
    c = r.choice([5, 10, 100])
    return choice(
        qid,
        f"Add {c} to every score of one query's row. Its attention weights ...",
        "do not change",
        ["all grow", "become uniform", f"are multiplied by e^{c}"],
        f"softmax(s + {c}) = e^{c} e^s / (e^{c} Σ e^s): the factor cancels. This is why softmax may subtract "
        "the row's maximum first without changing the result.",
        c=c,
    )


@template("01.pair_count")
def _(r, qid):
    n = {w: r.randint(2, 9) for w in ("low", "lower", "newest", "widest")}
    text = (
        "A corpus has the words "
        + ", ".join(f"{w} ({c} times)" for w, c in n.items())
        + ", split into characters. How many times does the pair e + s occur, counted as byte-pair encoding counts it?"
    )
    ans = n["newest"] + n["widest"]
    return number(
        qid,
        text,
        ans,
        "e s occurs once in newest and once in widest, weighted by each word's count: "
        f"{n['newest']} + {n['widest']} = {ans}. (lower has e r, not e s.)",
        counts=n,
    )


@template("01.embedding_params")
def _(r, qid):
    v, d = r.choice([30522, 32000, 50257, 151936]), r.choice([384, 768, 1024, 4096])
    return number(
        qid,
        f"A model has a vocabulary of {v} tokens and d_model = {d}. How many parameters does its embedding table hold?",
        v * d,
        f"One row of d_model numbers per token id: {v} × {d} = {v * d}.",
        vocab=v,
        d_model=d,
    )


@template("01.byte_level")
def _(r, qid):
    return choice(
        qid,
        "Why can a byte-level BPE tokenizer encode any string without an unknown token?",
        "its base vocabulary holds all 256 byte values, and every string is a sequence of bytes",
        [
            "it stores every word of the training corpus",
            "it falls back to whole words",
            "it learns a merge for every character of Unicode",
        ],
        "Merges only join bytes that are already in the vocabulary; a string never seen in training is "
        "still encoded, in the worst case byte by byte.",
    )


# ---------------------------------------------------------------- 02: positions
@template("02.sinusoid_value")
def _(r, qid):
    pos = r.randint(1, 60)
    val = math.sin(pos / 100)
    return number(
        qid,
        "The sinusoidal encoding with d_model = 4 and base 10000: PE(pos, 2i) = sin(pos / 10000^(2i/d)). "
        f"What is PE({pos}, 2), the sine of pair i = 1?",
        val,
        f"10000^(2/4) = 100, so PE({pos}, 2) = sin({pos}/100) = {val:.4f}.",
        decimals=4,
        pos=pos,
    )


@template("02.wavelength")
def _(r, qid):
    d_model = r.choice([16, 32, 64])
    pair = r.randint(1, d_model // 4)
    wavelength = 2 * math.pi * 10000 ** (2 * pair / d_model)
    return number(
        qid,
        f"The sinusoidal table with d_model = {d_model} and base 10000: columns 2i and 2i + 1 hold sin and cos of "
        f"pos · 10000^(-2i/{d_model}). After how many positions does pair i = {pair} complete one full wave?",
        wavelength,
        f"The frequency is 10000^(-{2 * pair}/{d_model}), so the wavelength is 2π · 10000^({2 * pair}/{d_model}) "
        f"= {wavelength:.1f} positions.",
        decimals=1,
        d_model=d_model,
        pair=pair,
    )


@template("02.shift_dot")
def _(r, qid):
    k = r.randint(1, 6)
    return number(
        qid,
        "The sinusoidal table with d_model = 2 has one pair, PE[pos] = (sin pos, cos pos). For any position pos, "
        f"what is the dot product PE[pos] · PE[pos + {k}]?",
        math.cos(k),
        f"sin(a)sin(a + {k}) + cos(a)cos(a + {k}) = cos({k}) = {math.cos(k):.4f}, whatever a is: the dot product of "
        "two position vectors depends only on their distance.",
        decimals=4,
        k=k,
    )


@template("02.stripes")
def _(r, qid):
    return choice(
        qid,
        "The heatmap of the sinusoidal table (positions down, columns across) shows thin vertical stripes from one "
        "column to the next, even on the right where the waves are slow. Why?",
        "columns 2i and 2i + 1 are the sine and the cosine of one wave: where one is near 0 the other is near ±1",
        ["the table is random noise added to the waves", "every column has a different base",
         "odd columns hold the positions of the previous token"],
        "The columns come in (sin, cos) pairs of the same frequency, side by side (interleaved); on the right, "
        "every sine stays near 0 and every cosine near 1.",
    )


@template("02.learned_limit")
def _(r, qid):
    n = r.choice([128, 512, 1024])
    return choice(
        qid,
        f"A model adds learned position embeddings from a table of {n} rows. What happens to a sequence of "
        f"{n + r.randint(1, 50)} tokens?",
        f"its positions beyond {n - 1} have no vector: the table must grow, or the input be cut",
        ["the extra positions reuse row 0", "the extra positions get sinusoidal vectors automatically",
         "nothing: positions beyond the table get the zero vector and the model is unchanged"],
        "A learned table has one trained row per position and nothing beyond its last row (attn_lib's "
        "LearnedPositionalEmbedding raises a ValueError).",
    )


# ---------------------------------------------------------------- 03: scaled dot-product attention
def _by_hand(r):
    q = [r.randint(-2, 2), r.randint(-2, 2)]
    while q == [0, 0]:
        q = [r.randint(-2, 2), r.randint(-2, 2)]
    keys = [[r.randint(-2, 2), r.randint(-2, 2)] for _ in range(2)]
    values = [r.randint(-5, 5), r.randint(-5, 5)]
    scores = [(q[0] * k[0] + q[1] * k[1]) / math.sqrt(2) for k in keys]
    return q, keys, values, scores, softmax(scores)


@template("03.by_hand_weight")
def _(r, qid):
    q, keys, values, scores, w = _by_hand(r)
    return number(
        qid,
        f"Query q = {q}, keys k1 = {keys[0]}, k2 = {keys[1]} (d_k = 2). With the scale 1/√d_k, what "
        "weight does q give k1?",
        w[0],
        f"Scores q·k/√2 = {scores[0]:.4f}, {scores[1]:.4f}; softmax gives {w[0]:.4f} and {w[1]:.4f}.",
        decimals=3,
        q=q,
        keys=keys,
        values=values,
    )


@template("03.by_hand_output")
def _(r, qid):
    q, keys, values, scores, w = _by_hand(r)
    out = w[0] * values[0] + w[1] * values[1]
    return number(
        qid,
        f"Query q = {q}, keys k1 = {keys[0]}, k2 = {keys[1]} (d_k = 2, scale 1/√d_k), values v1 = "
        f"{values[0]}, v2 = {values[1]} (one number each). What is the attention output?",
        out,
        f"Weights {w[0]:.4f}, {w[1]:.4f}; output {w[0]:.4f}·({values[0]}) + {w[1]:.4f}·({values[1]}) = {out:.4f}.",
        decimals=2,
        q=q,
        keys=keys,
        values=values,
    )


@template("03.score_spread")
def _(r, qid):
    d = r.choice([16, 64, 256, 1024])
    return number(
        qid,
        f"Queries and keys have d_k = {d} independent entries of mean 0 and variance 1. What is the "
        "standard deviation of an unscaled score q·k?",
        math.sqrt(d),
        f"q·k is a sum of {d} independent products of variance 1: variance {d}, standard deviation "
        f"√{d} = {math.sqrt(d):g}. Dividing by √d_k brings it back to 1.",
        decimals=1,
        d_k=d,
    )


@template("03.score_cost")
def _(r, qid):
    n, d = r.choice([128, 512, 1024, 4096]), r.choice([64, 128])
    return number(
        qid,
        f"One head, n = {n} tokens, d_k = {d}. How many multiply-adds does the score matrix QKᵀ take?",
        n * n * d,
        f"n × n scores, each a dot product of d_k terms: {n}² × {d} = {n * n * d}.",
        n=n,
        d_k=d,
    )


@template("03.equal_keys")
def _(r, qid):
    return choice(
        qid,
        "Every key of a row is the same vector. The attention output for that query is ...",
        "the mean of the values",
        ["the first value", "zero", "the value with the largest norm"],
        "Equal keys give equal scores, softmax turns them into equal weights 1/S, and the output is "
        "Σ v / S: the mean of the values, whatever the query.",
    )


# ---------------------------------------------------------------- 04: masks
@template("04.causal_count")
def _(r, qid):
    n = r.randint(4, 40)
    return number(
        qid,
        f"A causal mask for {n} tokens (True = may attend). How many entries are True?",
        n * (n + 1) // 2,
        f"Query i may attend to keys 0 … i: 1 + 2 + … + {n} = {n}·{n + 1}/2 = {n * (n + 1) // 2}.",
        n=n,
    )


@template("04.bottom_right")
def _(r, qid):
    k = r.randint(6, 30)
    q = r.randint(1, k - 1)
    ans = q * (k - q) + q * (q + 1) // 2
    return number(
        qid,
        f"Decoding with a KV cache: {q} new queries attend over {k} keys (the {k - q} cached ones, then "
        "their own). With the causal mask aligned bottom-right, how many (query, key) pairs may attend?",
        ans,
        f"New query j (0 … {q - 1}) sees the {k - q} cached keys and j + 1 new ones: "
        f"{q}·{k - q} + {q}·{q + 1}/2 = {ans}.",
        q_len=q,
        kv_len=k,
    )


@template("04.causal_and_padding")
def _(r, qid):
    n = r.randint(5, 16)
    p = r.randint(1, n - 2)
    real = n - p
    ans = real * (real + 1) // 2 + p * real
    return number(
        qid,
        f"A sequence of {n} positions: {real} real tokens, then {p} [PAD]s (right padding). The mask is "
        f"causal AND 'the key is a real token'. How many True entries does the {n}×{n} mask have?",
        ans,
        f"Real queries i < {real} see keys 0 … i: {real}·{real + 1}/2; each of the {p} padded queries sees "
        f"the {real} real keys: {p}·{real}. Total {ans}.",
        n=n,
        pad=p,
    )


@template("04.fill_value")
def _(r, qid):
    s = r.choice([4, 6, 8])
    return choice(
        qid,
        f"A query row whose {s} keys are all masked, with the blocked scores filled with -1e9 (not -inf). "
        "Its weights are ...",
        f"uniform, 1/{s} each: a silent wrong answer",
        ["NaN", "all zero", "one at the first key, zero elsewhere"],
        f"All {s} scores are filled with the same -1e9, so softmax sees equal scores and returns 1/{s} "
        "each; -inf would give 0/0 = NaN instead, which at least shows the bug.",
        keys=s,
    )


@template("04.torch_bool_mask")
def _(r, qid):
    return choice(
        qid,
        "In nn.MultiheadAttention's boolean attn_mask, True at (i, j) means ...",
        "query i may NOT attend to key j",
        ["query i may attend to key j", "key j is padding in every row", "the weight is set to 1"],
        "PyTorch's nn.MultiheadAttention marks blocked positions with True; the course (and "
        "scaled_dot_product_attention) mark allowed ones. Invert with ~mask when passing one to the other.",
    )


@template("04.rope_angle")
def _(r, qid):
    m = r.randint(1, 40)
    ang = m / 10
    return number(
        qid,
        "RoPE with head_dim = 8 and base 10000 rotates pair i by the angle m · 10000^(-2i/8). At "
        f"position m = {m}, by how many radians is pair i = 1 rotated?",
        ang,
        f"10000^(-2/8) = 10000^(-1/4) = 0.1, so the angle is {m} × 0.1 = {ang:g} rad.",
        decimals=2,
        pos=m,
    )


@template("04.alibi_slope")
def _(r, qid):
    h_total = r.choice([8, 16])
    h = r.randint(1, h_total)
    s = 2 ** (-8 * h / h_total)
    return number(
        qid,
        f"ALiBi with {h_total} heads gives head h (h = 1 … {h_total}) the slope 2^(-8h/{h_total}). What is the "
        f"slope of head {h}? (3 significant digits)",
        s,
        f"2^(-8·{h}/{h_total}) = 2^{-8 * h / h_total:g} = {s:.6g}.",
        tol=s * 6e-3,
        num_heads=h_total,
        head=h,
    )


@template("04.permute_no_positions")
def _(r, qid):
    return choice(
        qid,
        "Self-attention without any positional information: swap the tokens at positions 2 and 5 of the "
        "input. The outputs ...",
        "at positions 2 and 5 swap; every other output is unchanged",
        ["all change", "do not change at all", "at positions 2 and 5 become equal"],
        "Without positions, self-attention is permutation-equivariant: each output depends on its own "
        "token and on the set of all tokens, which a swap does not change.",
    )


@template("04.rope_relative")
def _(r, qid):
    m, n, k = r.randint(5, 20), r.randint(0, 4), r.randint(3, 30)
    return choice(
        qid,
        f"With RoPE, a query at position {m} scores a key at position {n}. Which pair of positions gives "
        "the same score for the same query and key vectors?",
        f"{m + k} and {n + k}",
        [f"{n} and {m}", f"{m + k} and {n}", f"{2 * m} and {2 * n}"],
        f"The score depends only on the signed offset m − n = {m - n}; ({m + k}, {n + k}) keeps it, "
        f"({n}, {m}) flips its sign.",
        m=m,
        n=n,
        k=k,
    )


# ---------------------------------------------------------------- 05: multi-head attention
@template("05.mha_params")
def _(r, qid):
    d = r.choice([256, 384, 768, 1024])
    h = r.choice([4, 8, 16])
    ans = 4 * (d * d + d)
    return number(
        qid,
        f"nn.MultiheadAttention(embed_dim={d}, num_heads={h}) with biases: how many parameters?",
        ans,
        f"W_Q, W_K, W_V, W_O are each {d}×{d} with a bias of {d}: 4·({d}² + {d}) = {ans}, whatever the "
        "number of heads.",
        d_model=d,
        num_heads=h,
    )


@template("05.head_scores_cost")
def _(r, qid):
    n, d, h = r.choice([64, 256, 1024]), r.choice([512, 768]), r.choice([4, 8, 16])
    return number(
        qid,
        f"n = {n} tokens, d_model = {d}, {h} heads of head_dim {d // h}. How many multiply-adds do "
        "the score matrices of all heads take together?",
        n * n * d,
        f"Each head: {n}² × {d // h}; {h} heads: {n}² × {d} = {n * n * d}, as many as one head of width {d}.",
        n=n,
        d_model=d,
        num_heads=h,
    )


@template("05.ffn_params")
def _(r, qid):
    d = r.choice([256, 384, 512, 768])
    ff = 4 * d
    ans = 2 * d * ff + ff + d
    return number(
        qid,
        f"An encoder layer's feed-forward network: Linear({d}, {ff}), an activation, Linear({ff}, {d}), "
        "both with biases. How many parameters?",
        ans,
        f"{d}·{ff} + {ff} + {ff}·{d} + {d} = {ans}: about twice the attention's 4·{d}².",
        d_model=d,
    )


@template("05.merge_heads")
def _(r, qid):
    return choice(
        qid,
        "After each head has computed its output, multi-head attention ...",
        "concatenates the heads' outputs and multiplies by W_O",
        [
            "averages the heads' outputs",
            "keeps the head with the largest weights",
            "adds the heads' outputs, then applies softmax",
        ],
        "(B, H, T, head_dim) is transposed and reshaped back to (B, T, d_model) and mixed by W_O; it "
        "is W_O that lets heads combine.",
    )


@template("05.split_shape")
def _(r, qid):
    b, t, d, h = r.randint(2, 8), r.randint(5, 50), r.choice([256, 512, 768]), r.choice([4, 8, 12])
    while d % h:
        h = r.choice([4, 8])
    return choice(
        qid,
        f"x has shape ({b}, {t}, {d}) (batch, tokens, d_model). After splitting into {h} heads, the "
        "tensor attention works on has shape ...",
        f"({b}, {h}, {t}, {d // h})",
        [f"({b}, {t}, {h}, {d // h})", f"({b}, {h}, {t}, {d})", f"({b * h}, {t}, {d})"],
        f"view as ({b}, {t}, {h}, {d // h}), then transpose tokens and heads, so that each head's "
        f"({t}, {d // h}) block is contiguous in the last two dimensions.",
        b=b,
        t=t,
        d_model=d,
        h=h,
    )


# ---------------------------------------------------------------- 06: heads of a real model
@template("06.uniform_entropy")
def _(r, qid):
    n = r.randint(3, 40)
    return number(
        qid,
        f"A head spreads a query's weight evenly over {n} keys. What is the entropy of that row, in nats?",
        math.log(n),
        f"-Σ (1/{n}) ln(1/{n}) = ln {n} = {math.log(n):.4f}: the most a row of {n} can have.",
        decimals=3,
        n=n,
    )


@template("06.two_key_entropy")
def _(r, qid):
    p = r.choice([0.1, 0.2, 0.25, 0.3, 0.4])
    h = -p * math.log(p) - (1 - p) * math.log(1 - p)
    return number(
        qid,
        f"A row puts {p:g} of its weight on one key and {1 - p:g} on another (zero elsewhere). Its entropy, in nats?",
        h,
        f"-{p:g} ln {p:g} - {1 - p:g} ln {1 - p:g} = {h:.4f} (ln 2 = 0.693 would be an even split).",
        decimals=3,
        p=p,
    )


@template("06.bonferroni")
def _(r, qid):
    heads, roles = 72, r.choice([2, 3, 4, 5])
    alpha = 0.05 / (heads * roles)
    return number(
        qid,
        f"You test each of {heads} heads for each of {roles} roles, at a family-wise level of 0.05. With the "
        "Bonferroni correction, below which p-value is one test significant? (3 significant digits)",
        alpha,
        f"0.05 / ({heads} × {roles}) = {alpha:.3g}.",
        tol=alpha * 6e-3,
        tests=heads * roles,
    )


@template("06.permutation_p")
def _(r, qid):
    n = r.choice([99, 199, 999])
    k = r.randint(0, 20)
    p = (k + 1) / (n + 1)
    return number(
        qid,
        f"A permutation test: {n} shuffles, and {k} of them give a statistic at least as large as the "
        "observed one. What p-value do you report (counting the observed arrangement as one of the "
        "possible ones)?",
        p,
        f"(k + 1) / (N + 1) = ({k} + 1) / ({n} + 1) = {p:.4g}; never 0.",
        tol=1e-4,
        shuffles=n,
        beaten=k,
    )


@template("06.weight_vs_influence")
def _(r, qid):
    w, small = r.choice([0.8, 0.9]), r.choice([0.05, 0.1])
    big = r.choice([2, 4, 5])
    return choice(
        qid,
        f"A head gives {w:g} of a query's weight to [CLS], whose value vector has norm {small:g}, and "
        f"{1 - w:.1f} to a word whose value vector has norm {big}. Which adds more to the output?",
        "the word",
        ["[CLS]", "both the same", "neither: weights of a head do not add"],
        f"Contributions are weight × value: at most {w:g}·{small:g} = {w * small:.2f} for [CLS], "
        f"{1 - w:.1f}·{big} = {(1 - w) * big:.1f} for the word. Weight is not influence.",
        w=w,
        small=small,
        big=big,
    )


# ---------------------------------------------------------------- 07: cross-attention
@template("07.cross_pairs")
def _(r, qid):
    s, p, t = r.randint(6, 14), r.randint(0, 4), r.randint(4, 12)
    return number(
        qid,
        f"An encoder–decoder batch: the source has {s} real characters and {p} <pad>s, the decoder input "
        f"{t} characters. How many (query, key) pairs of one cross-attention head may get a weight above "
        "zero?",
        t * s,
        "Every decoder position may read every real source character (no causal mask "
        f"on cross-attention), only the {p} padding keys are masked: {t} × {s} = {t * s}.",
        src=s,
        pad=p,
        tgt=t,
    )


@template("07.all_pairs")
def _(r, qid):
    s, t = r.randint(4, 12), r.randint(3, 10)
    ans = s * s + t * (t + 1) // 2 + t * s
    return number(
        qid,
        f"No padding: a source of {s} tokens, a decoder input of {t}. Count the allowed (query, key) pairs "
        "of the three attentions together: encoder self-attention, decoder self-attention, cross-attention.",
        ans,
        f"Encoder: {s}² = {s * s} (no mask); decoder: causal, {t}·{t + 1}/2 = {t * (t + 1) // 2}; cross: "
        f"{t}·{s} = {t * s}. Total {ans}.",
        src=s,
        tgt=t,
    )


@template("07.teacher_forcing")
def _(r, qid):
    word = r.choice(["2024-03-01", "1999-12-31", "2001-07-04"])
    return choice(
        qid,
        f"The target is '{word}' followed by <eos>. During training, the decoder's input is ...",
        f"<sos> then '{word}'",
        [f"'{word}' then <eos>", f"'{word}' reversed", "only <sos>, then its own outputs"],
        "Teacher forcing: the target shifted right by one, starting with <sos>; position t predicts target "
        "character t from the true characters before it.",
        target=word,
    )


@template("07.which_causal")
def _(r, qid):
    return choice(
        qid,
        "Which of an encoder–decoder's attentions needs a causal mask?",
        "the decoder's self-attention only",
        ["all three", "cross-attention only", "the encoder's self-attention and cross-attention"],
        "The decoder must not see the characters it is about to predict; the source is known in full, so the "
        "encoder and cross-attention mask only padding.",
    )


# ---------------------------------------------------------------- 08: GQA and the KV cache
_MODELS = [  # (layers, kv heads, head_dim)
    (32, 8, 128),
    (32, 32, 128),
    (28, 4, 128),
    (40, 8, 128),
    (80, 8, 128),
    (26, 4, 256),
]


@template("08.cache_gib")
def _(r, qid):
    layers, hkv, hd = r.choice(_MODELS)
    s, b = r.choice([4096, 8192, 32768]), r.choice([1, 4, 8])
    nbytes = 2 * layers * hkv * hd * s * b * 2
    gib = nbytes / 2**30
    return number(
        qid,
        f"A model with {layers} layers, {hkv} key/value heads of head_dim {hd}, in bfloat16 (2 bytes). How many "
        f"GiB does its KV cache take for a batch of {b} sequence{'s' if b > 1 else ''} of {s} tokens?",
        gib,
        f"2 (K and V) × {layers} × {hkv} × {hd} × {s} × {b} × 2 bytes = {nbytes} bytes = {gib:.3f} GiB.",
        decimals=2,
        num_layers=layers,
        num_kv_heads=hkv,
        head_dim=hd,
        seq_len=s,
        batch=b,
    )


@template("08.gqa_ratio")
def _(r, qid):
    h = r.choice([16, 32, 64])
    hkv = r.choice([1, 2, 4, 8])
    return number(
        qid,
        f"A layer has {h} query heads and {hkv} key/value head{'s' if hkv > 1 else ''}. How many times smaller is "
        "its KV cache than the same layer's with multi-head attention?",
        h / hkv,
        f"The cache stores num_kv_heads heads: {h} / {hkv} = {h // hkv} times smaller; all {h} query heads still "
        f"attend, {h // hkv} per key/value head.",
        num_heads=h,
        num_kv_heads=hkv,
    )


@template("08.int8_dequant")
def _(r, qid):
    m = r.choice([2.54, 1.27, 5.08, 0.635])
    x = round(r.uniform(-m, m), 3)
    scale = m / 127
    deq = round(x / scale) * scale
    return number(
        qid,
        f"Absmax int8 quantization per token: a token's keys have largest |value| {m:g}, so scale = {m:g}/127. "
        f"What value comes back for the entry {x:g} after quantizing and dequantizing?",
        deq,
        f"round({x:g} / {scale:.5g}) = {round(x / scale)}; × {scale:.5g} = {deq:.5g}. The error is at most "
        "half a step, scale / 2.",
        decimals=4,
        absmax=m,
        x=x,
    )


@template("08.cache_exact")
def _(r, qid):
    return choice(
        qid,
        "Greedy decoding with a KV cache gives exactly the tokens of decoding without one (in exact arithmetic). Why?",
        "keys and values of past tokens do not change when a token is added, because a "
        "causal model's earlier positions never see later ones",
        [
            "the cache stores the softmax weights",
            "the cache is recomputed every step",
            "it is not exact: the cache approximates old keys",
        ],
        "With a causal mask, position i's keys and values depend on tokens 0 … i only; appending a token "
        "leaves them unchanged, so storing them loses nothing (the new query's causal mask sits bottom-right).",
    )


@template("08.decode_reads")
def _(r, qid):
    return choice(
        qid,
        "Why does decoding one token at a time get faster with fewer key/value heads, even though the "
        "number of multiply-adds barely changes?",
        "each step reads the whole KV cache from memory, and that read, not the arithmetic, limits the speed",
        ["fewer heads mean fewer layers", "the softmax is skipped", "the query heads are dropped"],
        "At decode time one query row meets the whole cache: few operations per byte read, so the time is "
        "memory traffic, proportional to the cache's size.",
    )


# ---------------------------------------------------------------- 09: tiled and flash attention
@template("09.online_sum")
def _(r, qid):
    a = [r.randint(-3, 3) for _ in range(2)]
    b = [r.randint(-3, 5) for _ in range(2)]
    m = max(a + b)
    ell = sum(math.exp(x - m) for x in a + b)
    return number(
        qid,
        f"The online softmax reads scores in two tiles, {a} then {b}, keeping a running maximum m and a running "
        "sum ℓ = Σ e^(s − m), rescaled when m changes. What is ℓ after the second tile?",
        ell,
        f"m ends at {m}; ℓ = Σ e^(s − {m}) over all four scores = {ell:.4f}, the same as computing it in one pass.",
        decimals=3,
        tile1=a,
        tile2=b,
    )


@template("09.rescale")
def _(r, qid):
    m_old = r.randint(-2, 3)
    m_new = m_old + r.randint(1, 4)
    f = math.exp(m_old - m_new)
    return number(
        qid,
        f"The running maximum of a row goes from {m_old} to {m_new} when a new tile arrives. By what factor is "
        "the running sum (and the running output) multiplied?",
        f,
        f"e^(m_old − m_new) = e^{m_old - m_new} = {f:.4f}: the old terms were e^(s − {m_old}), they must become "
        f"e^(s − {m_new}).",
        decimals=4,
        m_old=m_old,
        m_new=m_new,
    )


@template("09.merge")
def _(r, qid):
    s1, s2 = r.randint(-2, 3), r.randint(-2, 3)
    v1, v2 = r.randint(-4, 4), r.randint(-4, 4)
    w = softmax([s1, s2])
    out = w[0] * v1 + w[1] * v2
    return number(
        qid,
        f"Two halves of a row were computed separately: half 1 has one key with score {s1} and value {v1}; "
        f"half 2 one key with score {s2} and value {v2}. Merged with their maxima and sums, what is the "
        "row's output?",
        out,
        f"Each half's (m, ℓ, o) = ({s1}, 1, {v1}) and ({s2}, 1, {v2}); weights e^(m_i − m)/Σ = "
        f"{w[0]:.4f}, {w[1]:.4f}: output {out:.4f}, as the full softmax gives.",
        decimals=3,
        scores=[s1, s2],
        values=[v1, v2],
    )


@template("09.score_matrix_mib")
def _(r, qid):
    n = r.choice([4096, 8192, 16384, 32768])
    mib = n * n * 4 / 2**20
    return number(
        qid,
        f"Naive attention materialises one head's n × n score matrix in float32. For n = {n}, how many MiB is that?",
        mib,
        f"{n}² × 4 bytes = {n * n * 4} bytes = {mib:g} MiB; tiled attention keeps one tile of it at a time.",
        n=n,
    )


@template("09.exact")
def _(r, qid):
    return choice(
        qid,
        "FlashAttention's output, compared with the usual softmax(QKᵀ/√d)V in exact arithmetic, is ...",
        "identical: the online softmax's rescaling is exact",
        [
            "an approximation with a bounded error",
            "identical only for causal attention",
            "identical only when the tiles are square",
        ],
        "Multiplying by e^(m_old − m_new) turns each earlier term into the term it would have been with the "
        "final maximum; only floating-point rounding differs.",
    )


# ---------------------------------------------------------------- 10: the capstone
@template("10.uniform_loss")
def _(r, qid):
    v = r.choice([16, 32, 100, 1000])
    return number(
        qid,
        f"A model that gives all {v} words of its vocabulary the same probability. What is its "
        "cross-entropy loss, in nats?",
        math.log(v),
        f"-ln(1/{v}) = ln {v} = {math.log(v):.4f}.",
        decimals=3,
        vocab=v,
    )


@template("10.temperature")
def _(r, qid):
    a, b = r.randint(1, 4), r.randint(-2, 1)
    t = r.choice([0.5, 2.0])
    p = softmax([a / t, b / t])[0]
    return number(
        qid,
        f"Two logits, {a} and {b}, sampled at temperature {t:g}. What is the probability of the first?",
        p,
        f"softmax([{a}/{t:g}, {b}/{t:g}]) → {p:.4f}. Below 1 the distribution sharpens, above 1 it flattens.",
        decimals=3,
        logits=[a, b],
        temperature=t,
    )


@template("10.top_k")
def _(r, qid):
    logits = r.sample(range(-3, 6), 5)
    top = sorted(logits, reverse=True)[:2]
    p = softmax(top)[0]
    return number(
        qid,
        f"Logits {logits}, top-k sampling with k = 2 at temperature 1. What is the probability of the most "
        "likely token?",
        p,
        f"Keep the two largest, {top[0]} and {top[1]}, and renormalise: "
        f"e^{top[0]} / (e^{top[0]} + e^{top[1]}) = {p:.4f}.",
        decimals=3,
        logits=logits,
        k=2,
    )


@template("10.gqa_projection_params")
def _(r, qid):
    d, h = r.choice([64, 128, 256]), 4
    hkv = r.choice([1, 2, 4])
    hd = d // h
    ans = 2 * d * d + 2 * d * hkv * hd
    return number(
        qid,
        f"A decoder's attention, without biases: d_model = {d}, {h} query heads, {hkv} key/value head"
        f"{'s' if hkv > 1 else ''}, head_dim = {hd}. How many parameters do W_Q, W_K, W_V and W_O hold?",
        ans,
        f"W_Q and W_O: {d}×{d} each; W_K and W_V: {d}×({hkv}·{hd}) each: 2·{d * d} + 2·{d * hkv * hd} = {ans}.",
        d_model=d,
        num_heads=h,
        num_kv_heads=hkv,
    )


@template("10.greedy_limit")
def _(r, qid):
    return choice(
        qid,
        "As the sampling temperature goes to 0, sampling becomes ...",
        "greedy decoding (the argmax)",
        ["uniform sampling", "top-k with k = 2", "impossible: the softmax is undefined"],
        "Dividing the logits by T → 0 multiplies their gaps without bound: all the probability goes to the "
        "largest logit.",
    )


# ---------------------------------------------------------------- 11: modern attention
@template("11.mla_ratio")
def _(r, qid):
    h, hd = r.choice([(16, 128), (32, 128), (64, 128)])
    c, rope = r.choice([256, 512]), 64
    ratio = 2 * h * hd / (c + rope)
    return number(
        qid,
        f"An MLA layer caches a latent of {c} plus one RoPE key of {rope} per token. A multi-head layer with "
        f"{h} heads caches keys and values of head_dim {hd}. How many times more does the multi-head layer "
        "cache per token?",
        ratio,
        f"2 × {h} × {hd} = {2 * h * hd} against {c} + {rope} = {c + rope}: {ratio:.2f} times.",
        decimals=1,
        num_heads=h,
        head_dim=hd,
        latent=c,
        rope=rope,
    )


@template("11.ring_after")
def _(r, qid):
    w = r.choice([4, 8, 16, 4096])
    p = r.randint(w + 1, 5 * w)
    slot = r.randint(0, w - 1)
    held = p - ((p - slot) % w)
    return number(
        qid,
        f"A sliding-window layer keeps keys in a ring buffer of {w} slots (position p goes to slot p mod "
        f"{w}). After the keys of positions 0 … {p} have been written, which position does slot {slot} hold?",
        held,
        f"The latest position ≤ {p} that is ≡ {slot} (mod {w}): {p} − (({p} − {slot}) mod {w}) = {held}.",
        window=w,
        last=p,
        slot=slot,
    )


@template("11.softcap")
def _(r, qid):
    s = r.choice([10, 30, 50, 80, 120])
    c = 50
    v = c * math.tanh(s / c)
    return number(
        qid,
        f"Logit soft-capping with cap {c} maps a score s to {c}·tanh(s/{c}). What does a score of {s} become?",
        v,
        f"{c}·tanh({s}/{c}) = {v:.4f}: near s for small scores, never above {c}.",
        decimals=2,
        score=s,
        cap=c,
    )


@template("11.window_pairs")
def _(r, qid):
    n, w = r.randint(8, 30), r.randint(2, 7)
    ans = sum(min(i + 1, w) for i in range(n))
    return number(
        qid,
        f"Causal sliding-window attention, window {w} (each query sees itself and the {w - 1} keys before it), "
        f"over {n} tokens. How many (query, key) pairs may attend?",
        ans,
        f"Query i sees min(i + 1, {w}) keys: Σ = {ans} (full causal attention would have {n * (n + 1) // 2}).",
        n=n,
        window=w,
    )


@template("11.qk_norm")
def _(r, qid):
    return choice(
        qid,
        "QK-norm normalises each head's queries and keys (RMSNorm with a learned scale) before the dot "
        "product. What does it bound?",
        "the size of the attention scores, so no logit can grow without limit",
        ["the number of keys a query can see", "the size of the values", "the KV cache's memory"],
        "After RMSNorm, |q| and |k| are fixed by the learned scales, so |q·k| is bounded (Cauchy–Schwarz): "
        "the softmax cannot saturate from exploding logits during training.",
    )


# ---------------------------------------------------------------- 12: linear attention, SSMs, hybrids
@template("12.state_vs_cache")
def _(r, qid):
    d = r.choice([64, 128, 256])
    return number(
        qid,
        f"One head: a linear-attention state of d × d numbers (d = {d}), against a KV cache of 2·d numbers per "
        "token. At what context length do both hold the same number of values?",
        d / 2,
        f"{d}² = 2·{d}·n gives n = {d}/2 = {d // 2} tokens; beyond it the state is smaller, and it never grows.",
        head_dim=d,
    )


@template("12.recurrent_output")
def _(r, qid):
    ks = [[r.randint(0, 2), r.randint(0, 2)] for _ in range(2)]
    while any(k == [0, 0] for k in ks):
        ks = [[r.randint(0, 2), r.randint(0, 2)] for _ in range(2)]
    vs = [r.randint(-3, 3) for _ in range(2)]
    q = [r.randint(1, 2), r.randint(1, 2)]
    num = sum((q[0] * k[0] + q[1] * k[1]) * v for k, v in zip(ks, vs))
    den = sum(q[0] * k[0] + q[1] * k[1] for k in ks)
    out = num / den
    return number(
        qid,
        "Linear attention with the identity feature map: the state S = Σ k vᵀ and the normaliser z = Σ k "
        f"over two tokens with keys {ks[0]}, {ks[1]} and values {vs[0]}, {vs[1]}. What is the output "
        f"(q·S)/(q·z) for the query q = {q}?",
        out,
        f"q·S = Σ (q·k) v = {num}, q·z = Σ q·k = {den}: {num}/{den} = {out:.4f}, equal to the parallel form "
        "Σ (q·k) v / Σ q·k.",
        decimals=3,
        keys=ks,
        values=vs,
        q=q,
    )


@template("12.decay")
def _(r, qid):
    g, n = r.choice([0.9, 0.95, 0.99]), r.choice([5, 10, 20])
    f = g**n
    return number(
        qid,
        f"A gated state decays by a factor {g:g} at every token. After {n} more tokens, by what factor has the "
        "first token's contribution been scaled?",
        f,
        f"{g:g}^{n} = {f:.4g}: a decaying state forgets "
        "geometrically, which is why it cannot recall an arbitrary old token exactly.",
        decimals=3,
        gate=g,
        steps=n,
    )


@template("12.ssm_mask")
def _(r, qid):
    return choice(
        qid,
        "Written as masked attention, a scalar-decay state-space model (Mamba-2's SSD) multiplies the "
        "(query, key) scores by which mask?",
        "a lower-triangular matrix whose (i, j) entry is the product of the decays a_{j+1} … a_i",
        ["the all-ones causal mask", "a banded mask of width 4", "a random mask resampled every step"],
        "Token j's contribution to the state is multiplied by every decay after it, up to token i; entries "
        "above the diagonal are 0 (causal). With all decays 1 it is linear attention's causal mask.",
    )


@template("12.per_token_cost")
def _(r, qid):
    return choice(
        qid,
        "Decoding one token with linear attention's recurrent form, as the context grows from 1 000 to "
        "100 000 tokens, the work per token ...",
        "stays the same",
        ["grows linearly", "grows quadratically", "shrinks"],
        "The step updates a fixed d × d state and reads it once: constant work and memory per token, where "
        "softmax attention reads a cache that grows with the context.",
    )


# ---------------------------------------------------------------- 13, 14: written ahead of their notebooks
# (13 sparse and compressed attention, 14 attention at scale); the labs of both notebooks draw them now
# (tests/test_quiz_bank.py checks their answers).
@template("13.local_global_pairs")
def _(r, qid):
    n, w, g = r.randint(10, 24), r.randint(1, 3), r.randint(1, 2)
    ans = sum(1 for i in range(n) for j in range(n) if abs(i - j) <= w or i < g or j < g)
    return number(
        qid,
        f"A Longformer-style mask over {n} tokens: each token attends to the keys within distance {w} of it (both"
        f" sides, itself included), and the first {g} token{'s are' if g > 1 else ' is'} global (attends to every"
        " token and is attended by every token). How many (query, key) pairs may attend?",
        ans,
        f"Count the pairs with |i − j| ≤ {w}, or i < {g}, or j < {g}: {ans}, against {n * n} for full attention; the"
        " local band grows as n·(2w + 1), the global rows and columns as 2·g·n.",
        n=n,
        window=w,
        num_global=g,
    )


@template("13.topk_ratio")
def _(r, qid):
    n, k = r.choice([4096, 8192, 32768]), r.choice([256, 512, 1024, 2048])
    return number(
        qid,
        f"Each of {n} queries attends only to its {k} selected keys (top-k sparse attention). How many times fewer"
        " multiply-adds does the attention itself (scores and weighted sum) take than full attention over all"
        f" {n} keys?",
        n / k,
        f"Full: n·n·d per product; selected: n·k·d: {n}/{k} = {n / k:g} times fewer. Choosing the keys costs extra"
        " (an indexer scores every key cheaply), which this count leaves out.",
        n=n,
        k=k,
    )


@template("13.block_fraction")
def _(r, qid):
    b = r.choice([64, 128])
    blocks = r.choice([16, 32, 64])
    k = r.randint(2, 8)
    return number(
        qid,
        f"Block-sparse attention over {blocks * b} tokens in blocks of {b}: every query block reads {k} key blocks."
        " What fraction of the full score matrix is computed?",
        k / blocks,
        f"{blocks} query blocks × {k} key blocks out of {blocks} × {blocks}: {k}/{blocks} = {k / blocks:.4g}.",
        decimals=4,
        blocks=blocks,
        k=k,
        block=b,
    )


@template("13.eviction_exact")
def _(r, qid):
    return choice(
        qid,
        "A KV cache keeps only the keys with the largest accumulated attention and evicts the rest. Decoding with it,"
        " compared with the full cache, is ...",
        "an approximation: the evicted keys' weights are lost and the kept ones renormalised",
        [
            "exact, because evicted keys had small weights",
            "exact whenever the cache is half full",
            "identical to a sliding window",
        ],
        "Softmax renormalises over the keys that remain; a key with weight 0.01 still moved the output, and a key"
        " that was unimportant so far may matter to a later query. Windows and sinks are exact only for the mask they"
        " define.",
    )


@template("14.paged_slots")
def _(r, qid):
    page = r.choice([16, 32])
    lengths = [r.randint(1, 200) for _ in range(3)]
    pages = sum(-(-n // page) for n in lengths)
    return number(
        qid,
        f"A paged KV cache with pages of {page} tokens holds three sequences of {lengths[0]}, {lengths[1]} and"
        f" {lengths[2]} tokens. How many pages are in use?",
        pages,
        f"Each sequence takes ceil(length / {page}) pages: "
        + " + ".join(str(-(-n // page)) for n in lengths)
        + f" = {pages}; at most {page} − 1 slots per sequence stay empty, instead of a whole maximum-length buffer.",
        page=page,
        lengths=lengths,
    )


@template("14.ring_transfers")
def _(r, qid):
    devices = r.choice([2, 4, 8, 16])
    return number(
        qid,
        f"Ring attention over {devices} devices: the sequence is split into {devices} blocks, each device keeps its"
        " query block and passes key/value blocks around the ring until every query block has met every key block."
        " How many key/value blocks does each device receive?",
        devices - 1,
        f"It starts with its own block and needs the other {devices - 1}, one per step around the ring.",
        devices=devices,
    )


@template("14.decode_bound")
def _(r, qid):
    weights_gb, cache_gb = r.choice([14, 16, 140]), r.choice([1, 2, 8])
    bandwidth = r.choice([1000, 2000, 4800])
    tps = bandwidth / (weights_gb + cache_gb)
    return number(
        qid,
        f"Decoding one sequence, every step reads the model's weights ({weights_gb} GB) and its KV cache"
        f" ({cache_gb} GB) from memory at {bandwidth} GB/s. Memory-bound, at most how many tokens per second?",
        tps,
        f"{bandwidth} / ({weights_gb} + {cache_gb}) = {tps:.3g} tokens/s: the arithmetic per step is small, so the"
        " reads set the pace; batching sequences shares the weight reads.",
        decimals=1,
        weights_gb=weights_gb,
        cache_gb=cache_gb,
        bandwidth=bandwidth,
    )


@template("14.batching")
def _(r, qid):
    return choice(
        qid,
        "A memory-bound decoder serves 1 sequence, then 8 sequences of the same length in one batch. Its tokens per"
        " second ...",
        "grow, but less than 8 times: the weights are read once per step for all 8, each sequence's KV cache is read"
        " on its own",
        [
            "stay the same: the GPU is already busy",
            "grow exactly 8 times",
            "fall: batching adds padding",
        ],
        "Per step the weight reads are shared by the batch and the cache reads are not; as the caches grow the step"
        " time approaches the sum of the caches, and the gain from batching shrinks.",
    )
