"""Notebook 09's exercise checks: a right answer passes, a stub says "not written yet", and each
typical wrong answer gets its own hint."""

from __future__ import annotations

import math

import torch

from attn_lib.course.exercises import check_causal_tiles, check_merge_states, check_online_softmax_update
from attn_lib.course.exercises import tiled as ex
from attn_lib.tiled import causal_tiles, online_softmax_update


from exercise_asserts import not_written as _stub


# ----------------------------------------------------------------------------------------------
# exercise 1
# ----------------------------------------------------------------------------------------------
def _update_variant(kind):
    def fn(m_old, l_old, acc_old, scores, values):
        tile_max = scores.amax(-1)
        m_new = tile_max if kind == "tile_max" else torch.maximum(m_old, tile_max)
        # a fully masked row has m_new = -inf: subtract 0 there ("naive", the old notebook solution, does not)
        m_safe = m_new if kind == "naive" else torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m_old - m_safe)
        if kind == "inverted":
            alpha = torch.exp(m_safe - m_old)
        ref = m_old if kind == "p_old_max" and not torch.isinf(m_old).any() else m_safe
        p = torch.exp(scores - ref[:, None])
        a_l = 1.0 if kind in ("no_rescale", "acc_only_l_missing") else alpha  # acc_only_l_missing: forgets l
        a_acc = 1.0 if kind in ("no_rescale", "l_only") else alpha[:, None]  # l_only: forgets acc
        return m_new, a_l * l_old + p.sum(-1), a_acc * acc_old + p @ values

    return fn


def test_update_right_answer_passes():
    result = check_online_softmax_update(online_softmax_update)
    assert result and "passed on 4 fresh inputs" in repr(result)
    assert check_online_softmax_update(_update_variant("right"))


def test_update_stub_says_not_written():
    result = check_online_softmax_update(_stub)
    assert not result and "not written yet" in repr(result)


def test_update_wrong_answers_get_their_hint():
    cases = {
        "no_rescale": ex.HINT_NO_RESCALE,
        "inverted": ex.HINT_INVERTED,
        "tile_max": ex.HINT_TILE_MAX,
        "l_only": ex.HINT_ACC_ONLY_L,
        "acc_only_l_missing": ex.HINT_L_ONLY_ACC,
        "p_old_max": ex.HINT_P_OLD_MAX,
        "naive": ex.HINT_MASKED_ROW,  # NaN for a fully masked row of the first block
    }
    for kind, hint in cases.items():
        result = check_online_softmax_update(_update_variant(kind))
        assert not result, kind
        assert hint in repr(result), (kind, repr(result))


def test_update_wrong_return_type_is_explained():
    result = check_online_softmax_update(lambda m, l, acc, s, v: acc)
    assert not result and "tuple of three tensors" in repr(result)


# ----------------------------------------------------------------------------------------------
# exercise 2
# ----------------------------------------------------------------------------------------------
def _merge_right(m_a, l_a, acc_a, m_b, l_b, acc_b):
    m = torch.maximum(m_a, m_b)
    a, b = torch.exp(m_a - m), torch.exp(m_b - m)
    return m, a * l_a + b * l_b, a[:, None] * acc_a + b[:, None] * acc_b


def test_merge_right_answer_passes():
    assert check_merge_states(_merge_right)
    assert check_merge_states(ex.merge_states_reference)


def test_merge_stub_and_wrong_answers():
    assert "not written yet" in repr(check_merge_states(_stub))

    def no_rescale(m_a, l_a, acc_a, m_b, l_b, acc_b):
        return torch.maximum(m_a, m_b), l_a + l_b, acc_a + acc_b

    def inverted(m_a, l_a, acc_a, m_b, l_b, acc_b):
        m = torch.maximum(m_a, m_b)
        a, b = torch.exp(m - m_a), torch.exp(m - m_b)
        return m, a * l_a + b * l_b, a[:, None] * acc_a + b[:, None] * acc_b

    def smaller_max(m_a, l_a, acc_a, m_b, l_b, acc_b):
        m = torch.minimum(m_a, m_b)
        a, b = torch.exp(m_a - m), torch.exp(m_b - m)
        return m, a * l_a + b * l_b, a[:, None] * acc_a + b[:, None] * acc_b

    for fn, words in [(no_rescale, "were not rescaled"), (inverted, "upside down"), (smaller_max, "larger of the two maxima")]:
        result = check_merge_states(fn)
        assert not result and words in repr(result), (fn.__name__, repr(result))


def test_merge_reference_gives_the_exact_output():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(3, 9, generator=g, dtype=torch.float64)
    v = torch.randn(9, 2, generator=g, dtype=torch.float64)
    m, l, acc = ex.merge_states_reference(*ex._state(s[:, :4], v[:4]), *ex._state(s[:, 4:], v[4:]))
    torch.testing.assert_close(acc / l[:, None], torch.softmax(s, -1) @ v)


# ----------------------------------------------------------------------------------------------
# exercise 3
# ----------------------------------------------------------------------------------------------
def test_causal_tiles_right_answer_passes():
    assert check_causal_tiles(causal_tiles)

    def brute_force(q_len, kv_len, bq, bk):
        allowed = torch.ones(q_len, kv_len, dtype=torch.bool).tril()
        return [(i, j) for i in range(math.ceil(q_len / bq)) for j in range(math.ceil(kv_len / bk))
                if allowed[i * bq:(i + 1) * bq, j * bk:(j + 1) * bk].any()]

    assert check_causal_tiles(brute_force)


def test_causal_tiles_wrong_answers_get_their_hint():
    assert "not written yet" in repr(check_causal_tiles(_stub))
    cases = [
        (ex._all_tiles, "entirely above the diagonal"),
        (ex._strictly_below, "cross the diagonal are missing"),
        (ex._bottom_right, "bottom-right"),
        (ex._unclamped, "may be shorter than block_q"),
    ]
    for fn, words in cases:
        result = check_causal_tiles(fn)
        assert not result and words in repr(result), (fn.__name__, repr(result))


def test_causal_tiles_other_mistakes_are_listed():
    def drop_first(q_len, kv_len, bq, bk):
        return causal_tiles(q_len, kv_len, bq, bk)[1:]

    result = check_causal_tiles(drop_first)
    assert not result and "missing tiles [(0, 0)]" in repr(result)
    result = check_causal_tiles(lambda *a: [(0, 99)])
    assert not result and "outside" in repr(result)
    result = check_causal_tiles(lambda *a: causal_tiles(*a) + [(0, 0)])
    assert not result and "appears twice" in repr(result)
