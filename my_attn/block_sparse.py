"""Your block-sparse pieces: MoBA's routing and NSA's gated sum (mirrors attn_lib.block_sparse; notebook 13)."""

from __future__ import annotations

import torch

from my_attn._todo import todo


def moba_block_choice(query: torch.Tensor, key: torch.Tensor, *, block_size: int, topk: int) -> torch.Tensor:
    """The blocks each query reads in MoBA: its own block and the topk - 1 earlier blocks whose mean key scores
    highest against it (fewer when fewer exist); never a later block.

    Args:
        query: (B, H, L, E), the last L of the S positions. key: (B, H, S, E). block_size, topk: ints >= 1.

    Returns:
        (B, H, L, ceil(S / block_size)) bool, True where query t reads block j.
    """
    todo("moba_block_choice", "13", "2 · MoBA: route each query to a few blocks")


def nsa_combine(o_cmp: torch.Tensor, o_slc: torch.Tensor, o_win: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    """NSA's output: the three branches' outputs weighed by their gates and added (eq. 5 of the NSA paper).

    Not in attn_lib as a function: the last line of ``NativeSparseAttention.forward`` does it (this piece replaces
    nothing).

    Args:
        o_cmp, o_slc, o_win: (B, H, L, E), the compressed, selected and window branches' outputs.
        gates: (B, H, L, 3) in [0, 1], in that order.

    Returns:
        (B, H, L, E).
    """
    todo("nsa_combine", "13", "3 · NSA: three branches and a gate")
