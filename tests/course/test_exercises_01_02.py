"""The checks of notebooks 01 and 02: each accepts a right answer, says "not written yet" for the
unsolved stub, and rejects typical wrong answers with the hint that names the mistake."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from attn_lib.course.exercises import (
    check_alibi_slopes,
    check_apply_merges,
    check_input_vectors,
    check_most_frequent_pair,
    check_rope,
    check_sinusoidal,
)
from attn_lib.course.exercises import positional as P
from attn_lib.course.exercises import tokens as T


from exercise_asserts import fails_with as _assert_fails_with, not_written as _stub


# ---------------------------------------------------------------- notebook 01


def merges_right(word, merges):
    symbols = list(word)
    for a, b in merges:
        out, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                out.append(a + b)
                i += 2
            else:
                out.append(symbols[i])
                i += 1
        symbols = out
    return symbols


def merges_reversed(word, merges):
    return merges_right(word, merges[::-1])


def merges_longest_first(word, merges):
    return merges_right(word, sorted(merges, key=lambda m: -len(m[0] + m[1])))


def merges_first_occurrence_only(word, merges):
    symbols = list(word)
    for a, b in merges:
        for i in range(len(symbols) - 1):
            if symbols[i] == a and symbols[i + 1] == b:
                symbols[i: i + 2] = [a + b]
                break
    return symbols


def merges_none(word, merges):
    return list(word)


def test_check_apply_merges():
    result = check_apply_merges(merges_right)
    assert result and "passed on" in repr(result)
    _assert_fails_with(check_apply_merges(_stub), "not written yet")
    _assert_fails_with(check_apply_merges(merges_reversed), T.HINT_OUT_OF_ORDER)
    _assert_fails_with(check_apply_merges(merges_longest_first), T.HINT_LONGEST_FIRST)
    _assert_fails_with(check_apply_merges(merges_first_occurrence_only), T.HINT_FIRST_ONLY)
    _assert_fails_with(check_apply_merges(merges_none), T.HINT_NO_MERGES)
    _assert_fails_with(check_apply_merges(lambda w, m: "".join(w)), "list of str")


def _pair_counts(word_counts, weighted=True, as_set=False):
    counts = Counter()
    for word, freq in word_counts.items():
        pairs = list(zip(word, word[1:]))
        for pair in set(pairs) if as_set else pairs:
            counts[pair] += freq if weighted else 1
    return counts


def pair_right(word_counts):
    counts = _pair_counts(word_counts)
    return min(counts, key=lambda p: (-counts[p], p))


def pair_unweighted(word_counts):
    counts = _pair_counts(word_counts, weighted=False)
    return min(counts, key=lambda p: (-counts[p], p))


def pair_set_per_word(word_counts):
    counts = _pair_counts(word_counts, as_set=True)
    return min(counts, key=lambda p: (-counts[p], p))


def pair_last_on_tie(word_counts):
    counts = _pair_counts(word_counts)
    return max(counts, key=lambda p: (counts[p], p))


def pair_counter_most_common(word_counts):  # tie goes to whichever came first in the dict
    return _pair_counts(word_counts).most_common(1)[0][0]


def _pair_tie_by(key):
    """A most_frequent_pair with a wrong tie rule: the most frequent pairs, then the smallest ``key(pair)``."""
    def most_frequent_pair(word_counts):
        counts = _pair_counts(word_counts)
        top = max(counts.values())
        return min((p for p in counts if counts[p] == top), key=key)
    return most_frequent_pair


# Tie rules a learner plausibly writes instead of "the alphabetically first (left, right)". With symbols of
# one character each they all agree with it on some inputs; the check's multi-character ties separate them.
WRONG_TIE_RULES = {
    "joined string": _pair_tie_by(lambda p: "".join(p)),
    "right symbol first": _pair_tie_by(lambda p: (p[1], p[0])),
    "shortest pair first": _pair_tie_by(lambda p: (len("".join(p)), p)),
    "left symbol only, then dict order": _pair_tie_by(lambda p: p[0]),
}


@pytest.mark.parametrize("rule", sorted(WRONG_TIE_RULES))
def test_check_most_frequent_pair_rejects_every_wrong_tie_rule(rule):
    _assert_fails_with(check_most_frequent_pair(WRONG_TIE_RULES[rule]), T.HINT_TIE)


def test_check_most_frequent_pair():
    assert check_most_frequent_pair(pair_right)
    _assert_fails_with(check_most_frequent_pair(_stub), "not written yet")
    _assert_fails_with(check_most_frequent_pair(pair_unweighted), T.HINT_UNWEIGHTED)
    _assert_fails_with(check_most_frequent_pair(pair_set_per_word), T.HINT_SET_PER_WORD)
    _assert_fails_with(check_most_frequent_pair(pair_last_on_tie), T.HINT_TIE)
    _assert_fails_with(check_most_frequent_pair(pair_counter_most_common), T.HINT_TIE)


def vectors_right(ids, token_table, position_table):
    return token_table[ids] + position_table[torch.arange(ids.shape[1])]


def test_check_input_vectors():
    assert check_input_vectors(vectors_right)
    _assert_fails_with(check_input_vectors(_stub), "not written yet")
    _assert_fails_with(check_input_vectors(lambda i, t, p: t[i]), T.HINT_NO_POSITION)
    _assert_fails_with(check_input_vectors(lambda i, t, p: t[i] + p[i]), T.HINT_POSITION_BY_ID)
    _assert_fails_with(check_input_vectors(lambda i, t, p: t[i] + p[1: i.shape[1] + 1]), T.HINT_POSITION_FROM_1)
    _assert_fails_with(check_input_vectors(lambda i, t, p: t[i] * p[: i.shape[1]]), "differs from the reference")
    _assert_fails_with(check_input_vectors(lambda i, t, p: (t[i] + p[: i.shape[1]])[0]), "has shape")


# ---------------------------------------------------------------- notebook 02


def sinusoidal_right(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model)
    pos = torch.arange(num_positions, dtype=torch.float32)[:, None]
    div = 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe[:, 0::2] = torch.sin(pos / div)
    pe[:, 1::2] = torch.cos(pos / div)
    return pe


def sinusoidal_swapped(num_positions, d_model):
    pe = sinusoidal_right(num_positions, d_model)
    return torch.stack((pe[:, 1::2], pe[:, 0::2]), dim=-1).flatten(1)


def sinusoidal_halves(num_positions, d_model):
    pe = sinusoidal_right(num_positions, d_model)
    return torch.cat((pe[:, 0::2], pe[:, 1::2]), dim=1)


def sinusoidal_column_exponent(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model)
    for pos in range(num_positions):
        for j in range(d_model):
            angle = pos / 10000 ** (j / d_model)
            pe[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def sinusoidal_multiplied(num_positions, d_model):
    pe = torch.zeros(num_positions, d_model)
    pos = torch.arange(num_positions, dtype=torch.float32)[:, None]
    div = 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


def test_check_sinusoidal():
    assert check_sinusoidal(sinusoidal_right)
    _assert_fails_with(check_sinusoidal(_stub), "not written yet")
    _assert_fails_with(check_sinusoidal(sinusoidal_swapped), P.HINT_SWAPPED)
    _assert_fails_with(check_sinusoidal(sinusoidal_halves), P.HINT_HALVES)
    _assert_fails_with(check_sinusoidal(sinusoidal_column_exponent), P.HINT_COLUMN_EXPONENT)
    _assert_fails_with(check_sinusoidal(sinusoidal_multiplied), P.HINT_MULTIPLY)
    _assert_fails_with(check_sinusoidal(lambda n, d: sinusoidal_right(n + 1, d)[1:]), P.HINT_FROM_1)
    _assert_fails_with(check_sinusoidal(lambda n, d: sinusoidal_right(n, d + 2)), "has shape")


def rope_right(x, positions, interleaved=False, sign=1.0, two=2):
    head_dim = x.shape[-1]
    half = head_dim // 2
    theta = 10000.0 ** (-two * torch.arange(half, dtype=torch.float64) / head_dim)
    angle = sign * positions[:, None].double() * theta  # (seq, half)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


def test_check_rope():
    assert check_rope(rope_right)
    _assert_fails_with(check_rope(_stub), "not written yet")
    _assert_fails_with(check_rope(lambda x, p: rope_right(x, p, interleaved=True)), P.HINT_INTERLEAVED)
    _assert_fails_with(check_rope(lambda x, p: rope_right(x, p, sign=-1.0)), P.HINT_WRONG_WAY)
    _assert_fails_with(check_rope(lambda x, p: rope_right(x, torch.arange(x.shape[-2]))), P.HINT_POSITIONS_IGNORED)
    _assert_fails_with(check_rope(lambda x, p: rope_right(x, p, two=1)), P.HINT_ROPE_EXPONENT)
    _assert_fails_with(check_rope(lambda x, p: x), "differs from the reference")


def slopes_right(num_heads):
    def power_of_2(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(num_heads).is_integer():
        return torch.tensor(power_of_2(num_heads))
    closest = 2 ** math.floor(math.log2(num_heads))
    return torch.tensor(power_of_2(closest) + slopes_right(2 * closest).tolist()[0::2][: num_heads - closest])


def test_check_alibi_slopes():
    assert check_alibi_slopes(slopes_right)
    _assert_fails_with(check_alibi_slopes(_stub), "not written yet")
    _assert_fails_with(check_alibi_slopes(lambda n: 2.0 ** (-8 / n * torch.arange(1, n + 1))), P.HINT_NOT_POW2)
    _assert_fails_with(check_alibi_slopes(lambda n: slopes_right(n).flip(0)), P.HINT_REVERSED)
    _assert_fails_with(check_alibi_slopes(lambda n: [2.0 ** -(k + 1) for k in range(n)]), P.HINT_FIXED)
    _assert_fails_with(check_alibi_slopes(lambda n: slopes_right(n)[:-1]), "has shape")


@pytest.mark.parametrize("check", [check_apply_merges, check_most_frequent_pair, check_input_vectors,
                                   check_sinusoidal, check_rope, check_alibi_slopes])
def test_a_crashing_function_is_reported_not_raised(check):
    def crash(*args):
        return [][1]

    result = check(crash)
    assert not result and "IndexError" in repr(result)
