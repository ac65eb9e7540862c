"""The checks of the learner's pieces of notebook 13 (issue 36): MoBA's block routing and NSA's gated sum.

Each ``check_piece_*`` takes the learner's object and returns a :class:`CheckResult`, comparing it with attn_lib's
own (proven equal to float64 references written from the papers in tests/test_block_sparse.py) on fresh float64
inputs, with a hint for each typical mistake. ``moba_block_choice`` replaces attn_lib's (so ``moba_attention`` and
the recall model of notebook 13 run on it); NSA's gated sum exists in attn_lib only as the last line of
``NativeSparseAttention.forward``, so that piece replaces nothing.
"""

from __future__ import annotations

import torch

from attn_lib.course.exercises._core import CheckResult, call, expect_close, fresh_generator, run_check
from attn_lib.course.exercises.block_sparse import HINT_SOFTMAX_GATES, check_moba_block_choice
from attn_lib.course.exercises.pieces import Piece

__all__ = ["PIECES", "check_piece_moba_block_choice", "check_piece_nsa_combine"]

HINT_GATES_SUM = ("the gates are already in [0, 1] (sigmoids): multiply each branch by its own gate and add; do not "
                  "normalise them to sum to 1.")


def check_piece_moba_block_choice(fn) -> CheckResult:
    """my_attn.block_sparse.moba_block_choice against attn_lib's: query (B, H, L, E), key (B, H, S, E) float64,
    block_size and topk by keyword -> bool (B, H, L, n_blocks). Raises: nothing; a wrong answer is a failed
    CheckResult with a hint (own block not forced, a later block routed, topk + 1 blocks). Source: Lu et al. 2025
    (MoBA), §2.2."""
    return check_moba_block_choice(fn, name="moba_block_choice", keywords=True)


def check_piece_nsa_combine(fn) -> CheckResult:
    """my_attn.block_sparse.nsa_combine: o_cmp, o_slc, o_win (B, H, L, E) and gates (B, H, L, 3) in [0, 1], float64
    -> Σ_c gates[..., c] · o_c, (B, H, L, E), as the last line of attn_lib's ``NativeSparseAttention.forward``.
    Raises: nothing; a wrong answer is a failed CheckResult with a hint. Source: Yuan et al. 2025 (NSA), eq. 5."""
    def trials():
        for t, shape in enumerate(((1, 2, 5, 4), (2, 3, 1, 8))):
            g = fresh_generator("nsa_combine", t)
            outs = [torch.randn(*shape, generator=g, dtype=torch.float64) for _ in range(3)]
            gates = torch.rand(*shape[:-1], 3, generator=g, dtype=torch.float64)
            stack = torch.stack(outs, -1)
            want = (stack * gates[..., None, :]).sum(-1)
            wrong = [((stack * (gates / gates.sum(-1, keepdim=True))[..., None, :]).sum(-1), HINT_GATES_SUM),
                     ((stack * torch.softmax(gates, -1)[..., None, :]).sum(-1), HINT_SOFTMAX_GATES),
                     ((stack * torch.sigmoid(gates)[..., None, :]).sum(-1),
                      "the gates given are already sigmoids (in [0, 1]): do not apply a second sigmoid.")]
            got = call(lambda a, b, c, gg: fn(a, b, c, gg), {"o_cmp": outs[0], "o_slc": outs[1], "o_win": outs[2],
                                                          "gates": gates})
            expect_close(got, want, what=f"the gated sum of three {shape} outputs", wrong_answers=wrong, atol=1e-10,
                         rtol=0)
        return 2

    return run_check("nsa_combine", trials)


PIECES: tuple[Piece, ...] = (
    Piece("block_sparse", "moba_block_choice", "13", "2 · MoBA: route each query to a few blocks",
          check_piece_moba_block_choice),
    Piece("block_sparse", "nsa_combine", "13", "3 · NSA: three branches and a gate", check_piece_nsa_combine,
          replaces=False),  # attn_lib has it only inside NativeSparseAttention.forward
)
