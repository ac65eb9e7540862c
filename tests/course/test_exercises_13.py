"""Notebook 13's exercise checks: a right answer passes (also one written differently), a stub says "not written
yet", and each typical wrong answer gets its hint. And the notebook's "predict, then check" answers, derived."""

from __future__ import annotations

import torch

from attn_lib.block_sparse import keys_read_per_query, moba_block_choice
from attn_lib.course.exercises import check_moba_block_choice, check_nsa_combine, check_nsa_keys_read
from attn_lib.course.exercises import block_sparse as ex
from attn_lib.course.exercises.concepts import QUESTIONS, questions_for
from exercise_asserts import fails_with
from exercise_asserts import not_written as _stub


def _moba(mistake=None):
    def fn(query, key, block_size, topk):
        B, H, L, E = query.shape
        S = key.shape[-2]
        n = -(-S // block_size)
        means = torch.stack([key[..., j * block_size:(j + 1) * block_size, :].mean(-2) for j in range(n)], -2)
        gate = query @ means.transpose(-1, -2)
        own = torch.arange(S - L, S) // block_size
        j = torch.arange(n)
        if mistake != "future":
            gate = gate.masked_fill(j > own[:, None], -torch.inf)
        if mistake != "not_forced":
            gate = gate.masked_fill(j == own[:, None], torch.inf)
        k = topk + 1 if mistake == "k_plus_one" else topk
        top = gate.topk(min(k, n), dim=-1)
        return torch.zeros_like(gate, dtype=torch.bool).scatter(-1, top.indices, top.values > -torch.inf)
    return fn


def test_moba_block_choice_check():
    assert check_moba_block_choice(lambda query, key, block_size, topk: moba_block_choice(
        query, key, block_size=block_size, topk=topk))
    assert check_moba_block_choice(_moba())  # written differently: a stack of block means
    assert "not written yet" in repr(check_moba_block_choice(_stub))
    fails_with(check_moba_block_choice(_moba("not_forced")), ex.HINT_NOT_FORCED)
    fails_with(check_moba_block_choice(_moba("future")), ex.HINT_FUTURE)
    fails_with(check_moba_block_choice(_moba("k_plus_one")), ex.HINT_K_PLUS_ONE)


def test_nsa_combine_check():
    def right(o_cmp, o_slc, o_win, gate_logits):
        g = torch.sigmoid(gate_logits)
        return g[..., :1] * o_cmp + g[..., 1:2] * o_slc + g[..., 2:] * o_win

    assert check_nsa_combine(right)
    assert check_nsa_combine(lambda a, b, c, gl: (torch.stack([a, b, c], -1) * gl.sigmoid()[..., None, :]).sum(-1))
    assert "not written yet" in repr(check_nsa_combine(_stub))
    fails_with(check_nsa_combine(
        lambda a, b, c, gl: (torch.stack([a, b, c], -1) * gl.softmax(-1)[..., None, :]).sum(-1)), ex.HINT_SOFTMAX_GATES)
    fails_with(check_nsa_combine(lambda a, b, c, gl: (torch.stack([a, b, c], -1) * gl[..., None, :]).sum(-1)),
               ex.HINT_NO_SIGMOID)


def test_nsa_keys_read_check():
    def right(seq_len, block_len, stride, select_size, num_select, window):
        cmp = (seq_len - block_len) // stride + 1 if seq_len >= block_len else 0
        return cmp + min(seq_len, num_select * select_size) + min(seq_len, window)

    assert check_nsa_keys_read(right)
    assert "not written yet" in repr(check_nsa_keys_read(_stub))
    fails_with(check_nsa_keys_read(lambda S, l, d, ls, n, w: right(S, l, d, ls, n, w) - min(S, w)), ex.HINT_NO_WINDOW)
    fails_with(check_nsa_keys_read(lambda S, l, d, ls, n, w: S // d + min(S, n * ls) + min(S, w)), ex.HINT_ALL_STRIDES)


def test_predictions_are_registered_and_derived():
    assert [q.id for q in questions_for(13)] == ["13.moba_keys", "13.fewest_keys"]
    # 13.moba_keys: blocks of 4, top-2, the query at position 13 (any queries and keys)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        q, k = torch.randn(1, 1, 1, 4, generator=g), torch.randn(1, 1, 14, 4, generator=g)
        chosen = moba_block_choice(q, k, block_size=4, topk=2)[0, 0, 0]
        assert int(chosen[torch.arange(14) // 4].sum()) == 6
    assert QUESTIONS["13.moba_keys"].answer == "b" and "6" in QUESTIONS["13.moba_keys"].choices["b"]
    # 13.fewest_keys: the counts at 2**20 tokens
    reads = {d: keys_read_per_query(d, 1 << 20) for d in ("moba", "nsa", "dsa")}
    assert min(reads, key=reads.get) == "dsa" and reads == {"moba": 4096, "nsa": 67071, "dsa": 2048}
    assert QUESTIONS["13.fewest_keys"].choices[QUESTIONS["13.fewest_keys"].answer] == "DSA"
