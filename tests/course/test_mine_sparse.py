"""The learner's pieces of notebook 13 (#36): each check rejects the typical wrong answers with its hint and accepts
a differently written right answer; the switch runs attn_lib's MoBA on the learner's routing."""

from __future__ import annotations

import torch

from attn_lib.course import mine
from attn_lib.course.exercises import pieces_sparse as ps
from attn_lib.course.exercises.block_sparse import HINT_FUTURE, HINT_K_PLUS_ONE, HINT_NOT_FORCED

from exercise_asserts import SOLVED, restore_attn_lib  # noqa: F401 - an autouse fixture
from exercise_asserts import fails_with as _fails_with


def _moba(mistake=None):
    def fn(query, key, *, block_size, topk):
        S, L = key.shape[-2], query.shape[-2]
        n = -(-S // block_size)
        pad = torch.nn.functional.pad(key, (0, 0, 0, n * block_size - S))
        sizes = torch.tensor([min(block_size, S - j * block_size) for j in range(n)], dtype=key.dtype)
        gate = query @ (pad.unflatten(-2, (n, block_size)).sum(-2) / sizes[:, None]).transpose(-1, -2)
        own = torch.arange(S - L, S) // block_size
        j = torch.arange(n)
        if mistake != "future":
            gate = gate.masked_fill(j > own[:, None], -torch.inf)
        if mistake != "not_forced":
            gate = gate.masked_fill(j == own[:, None], torch.inf)
        top = gate.topk(min(topk + (mistake == "k_plus_one"), n), dim=-1)
        return torch.zeros_like(gate, dtype=torch.bool).scatter(-1, top.indices, top.values > -torch.inf)
    return fn


def test_moba_block_choice_piece_rejects_the_typical_mistakes_and_accepts_another_writing():
    assert ps.check_piece_moba_block_choice(_moba()).passed  # padded sums, not a stack of means
    _fails_with(ps.check_piece_moba_block_choice(_moba("not_forced")), HINT_NOT_FORCED)
    _fails_with(ps.check_piece_moba_block_choice(_moba("future")), HINT_FUTURE)
    _fails_with(ps.check_piece_moba_block_choice(_moba("k_plus_one")), HINT_K_PLUS_ONE)


def test_nsa_combine_piece_rejects_the_typical_mistakes_and_accepts_another_writing():
    assert ps.check_piece_nsa_combine(lambda a, b, c, g: torch.einsum("...ec,...c->...e",
                                                                      torch.stack([a, b, c], -1), g)).passed
    _fails_with(ps.check_piece_nsa_combine(lambda a, b, c, g: (torch.stack([a, b, c], -1) * (
        g / g.sum(-1, keepdim=True))[..., None, :]).sum(-1)), ps.HINT_GATES_SUM)
    _fails_with(ps.check_piece_nsa_combine(lambda a, b, c, g: (torch.stack([a, b, c], -1) * g.sigmoid()[
        ..., None, :]).sum(-1)), "second sigmoid")


def test_the_switch_runs_moba_attention_on_the_learners_routing():
    import attn_lib.block_sparse as bs

    original = bs.moba_block_choice
    statuses = mine.use_mine(SOLVED)
    mine_pieces = {s.piece.name: s.status for s in statuses if s.piece.notebook == "13"}
    assert mine_pieces == {"moba_block_choice": "passes", "nsa_combine": "passes"}
    import my_attn.block_sparse as theirs

    assert bs.moba_block_choice is theirs.moba_block_choice
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 10, 4, generator=g, dtype=torch.float64) for _ in range(3))
    ours = bs.moba_attention(q, k, v, block_size=3, topk=2)  # runs on the learner's routing now
    torch.testing.assert_close(ours, bs.moba_reference(q, k, v, block_size=3, topk=2), rtol=0, atol=1e-12)
    mine.use_attn_lib()
    assert bs.moba_block_choice is original
