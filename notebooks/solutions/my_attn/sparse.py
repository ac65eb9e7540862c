"""Top-k selection, solved (notebook 11)."""

from __future__ import annotations

import torch


def select_topk(scores: torch.Tensor, topk: int) -> torch.Tensor:
    """The k largest finite scores of each row, as a bool mask (B, L, S)."""
    order = scores.argsort(dim=-1, descending=True)  # (B, L, S): key indices, best first
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(scores.shape[-1]).expand_as(order))
    return (rank < topk) & (scores > float("-inf"))
