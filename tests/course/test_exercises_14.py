"""Notebook 14's exercise checks: a right answer passes (also one written differently), a stub says "not written
yet", and each typical wrong answer gets its hint. And the notebook's "predict, then check" answers, derived."""

from __future__ import annotations

import math

import torch

from attn_lib.course.exercises import check_block_lookup, check_merge_two, check_ring_step, check_verify_mask
from attn_lib.course.exercises import scale as ex
from attn_lib.course.exercises.concepts import QUESTIONS, questions_for
from attn_lib.paged import memory_waste
from attn_lib.ring import ring_work
from attn_lib.tiled import tiled_attention
from exercise_asserts import fails_with
from exercise_asserts import not_written as _stub


# ----------------------------------------------------------------------------------------------
# exercise 1: block lookup
# ----------------------------------------------------------------------------------------------
def test_block_lookup_right_answers_pass():
    assert check_block_lookup(lambda t, p, b: (t[p // b], p % b))
    assert check_block_lookup(lambda t, p, b: (lambda q, r: (t[q], r))(*divmod(p, b)))  # written differently


def test_block_lookup_wrong_answers():
    assert "not written yet" in repr(check_block_lookup(_stub))
    fails_with(check_block_lookup(lambda t, p, b: (p // b, p % b)), ex.HINT_NO_TABLE)
    fails_with(check_block_lookup(lambda t, p, b: (p % b, t[p // b])), ex.HINT_SWAPPED)
    fails_with(check_block_lookup(lambda t, p, b: (t[p % b], p // b)), "not by position % block_size")
    fails_with(check_block_lookup(lambda t, p, b: t[p // b]), "pair")


# ----------------------------------------------------------------------------------------------
# exercise 2: merge
# ----------------------------------------------------------------------------------------------
def _merge(kind):
    def fn(out_a, lse_a, out_b, lse_b):
        lse = torch.logaddexp(lse_a, lse_b)
        ref = torch.where(lse == -math.inf, torch.zeros_like(lse), lse)
        if kind == "nan":
            ref = lse
        wa, wb = torch.exp(lse_a - ref)[..., None], torch.exp(lse_b - ref)[..., None]
        out = wa * out_a + wb * out_b
        if kind == "average":
            out = (out_a + out_b) / 2
        if kind == "unnormalised":
            out = torch.exp(lse_a)[..., None] * out_a + torch.exp(lse_b)[..., None] * out_b
        if kind == "lse_max":
            lse = torch.maximum(lse_a, lse_b)
        if kind == "lse_sum":
            lse = lse_a + lse_b
        return out, lse

    return fn


def _merge_differently(out_a, lse_a, out_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    a, b = (lse_a - m).exp(), (lse_b - m).exp()
    total = a + b
    safe = torch.where(total == 0, torch.ones_like(total), total)
    return (a[..., None] * out_a + b[..., None] * out_b) / safe[..., None], m + total.log()


def test_merge_right_answers_pass():
    assert check_merge_two(_merge("right"))
    assert check_merge_two(_merge_differently)


def test_merge_wrong_answers():
    assert "not written yet" in repr(check_merge_two(_stub))
    fails_with(check_merge_two(_merge("average")), ex.HINT_AVERAGE)
    fails_with(check_merge_two(_merge("unnormalised")), ex.HINT_UNNORMALISED)
    fails_with(check_merge_two(_merge("lse_max")), ex.HINT_LSE_MAX)
    fails_with(check_merge_two(_merge("lse_sum")), ex.HINT_LSE_SUM)
    fails_with(check_merge_two(_merge("nan")), ex.HINT_NAN)


# ----------------------------------------------------------------------------------------------
# exercise 3: verify mask
# ----------------------------------------------------------------------------------------------
def test_verify_mask_answers():
    def right(cached, num_new):
        return torch.ones(num_new, cached + num_new, dtype=torch.bool).tril(diagonal=cached)

    def differently(cached, num_new):
        rows = torch.arange(num_new)[:, None] + cached
        return torch.arange(cached + num_new)[None, :] <= rows

    assert check_verify_mask(right) and check_verify_mask(differently)
    assert "not written yet" in repr(check_verify_mask(_stub))
    fails_with(check_verify_mask(lambda c, k: torch.ones(k, c + k, dtype=torch.bool).tril()), ex.HINT_TOP_LEFT)
    fails_with(check_verify_mask(lambda c, k: torch.ones(k, k, dtype=torch.bool).tril()), ex.HINT_SQUARE)
    fails_with(check_verify_mask(lambda c, k: torch.ones(k, c + k, dtype=torch.bool).tril(diagonal=c - 1)),
               ex.HINT_STRICT)


# ----------------------------------------------------------------------------------------------
# exercise 4: one ring step
# ----------------------------------------------------------------------------------------------
def _ring(kind):
    def fn(query, key, value, out, lse, q_pos, k_pos):
        visible = k_pos[None, :] <= q_pos[:, None]
        if kind == "no_mask":
            visible = torch.ones_like(visible)
        if not bool(visible.any()) and kind != "nan":
            return out, lse
        o, s = tiled_attention(query, key, value, attn_mask=visible, return_lse=True)
        if kind == "nan":
            o = torch.softmax((query @ key.mT / 2).masked_fill(~visible, -math.inf), -1) @ value
            s = torch.logsumexp((query @ key.mT / 2).masked_fill(~visible, -math.inf), -1)
        if kind == "replace":
            return o, s
        new = torch.logaddexp(lse, s)
        ref = torch.where(new == -math.inf, torch.zeros_like(new), new)
        return torch.exp(lse - ref)[..., None] * out + torch.exp(s - ref)[..., None] * o, new

    return fn


def test_ring_step_answers():
    assert check_ring_step(_ring("right"))
    assert "not written yet" in repr(check_ring_step(_stub))
    fails_with(check_ring_step(_ring("no_mask")), ex.HINT_NO_CAUSAL)
    fails_with(check_ring_step(_ring("replace")), ex.HINT_NO_MERGE)
    fails_with(check_ring_step(_ring("nan")), ex.HINT_FUTURE_BLOCK)


# ----------------------------------------------------------------------------------------------
# the predictions, derived
# ----------------------------------------------------------------------------------------------
def test_prediction_answers_are_computed():
    questions_for(14)
    waste = memory_waste([1000, 100, 10, 4000], max_len=4096, block_size=16)
    q = QUESTIONS["14.paged_waste"]
    # 4 sequences, at most 15 unused slots each out of 5 120 allocated: below 1 %
    assert waste["paged_waste"] < 0.01 and q.answer == "b"
    work = ring_work(4096, 4, "contiguous")
    assert 6.9 < int(work[-1]) / int(work[0]) < 7.0 and QUESTIONS["14.ring_imbalance"].answer == "c"
    assert int(work[0]) == 1024 * 1025 // 2 and int(work[-1]) == 3 * 1024**2 + 1024 * 1025 // 2
