"""MoBA's routing and NSA's gated sum, solved (notebook 13)."""

from __future__ import annotations

import torch


def moba_block_choice(query: torch.Tensor, key: torch.Tensor, *, block_size: int, topk: int) -> torch.Tensor:
    """The blocks each query reads: its own, and the best topk - 1 earlier ones by q · mean(K_j)."""
    B, H, L, E = query.shape
    S = key.shape[-2]
    n = -(-S // block_size)
    means = torch.stack([key[..., j * block_size:(j + 1) * block_size, :].mean(-2) for j in range(n)], dim=-2)
    gate = query @ means.transpose(-1, -2)  # (B, H, L, n)
    own = torch.arange(S - L, S, device=query.device) // block_size
    j = torch.arange(n, device=query.device)
    gate = gate.masked_fill(j > own[:, None], float("-inf")).masked_fill(j == own[:, None], float("inf"))
    top = gate.topk(min(topk, n), dim=-1)
    return torch.zeros_like(gate, dtype=torch.bool).scatter(-1, top.indices, top.values > float("-inf"))


def nsa_combine(o_cmp: torch.Tensor, o_slc: torch.Tensor, o_win: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    """Each branch weighed by its own gate, then added."""
    return gates[..., 0, None] * o_cmp + gates[..., 1, None] * o_slc + gates[..., 2, None] * o_win
