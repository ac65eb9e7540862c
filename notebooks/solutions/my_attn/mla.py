"""MLA's absorbed attention, solved (notebook 11)."""

from __future__ import annotations

import torch


def absorbed_attention(q_c: torch.Tensor, q_r: torch.Tensor, c_kv: torch.Tensor, k_r: torch.Tensor,
                       w_uk: torch.Tensor, w_uv: torch.Tensor, *, scale: float) -> torch.Tensor:
    """Attend over the latents; W_UK before, W_UV after."""
    L, S = q_c.shape[-2], c_kv.shape[-2]
    q_lat = torch.einsum("bhld,hdr->bhlr", q_c, w_uk)  # (B, H, L, r): the query in the latent space
    scores = (q_lat @ c_kv.transpose(-1, -2) + q_r @ k_r.transpose(-1, -2)) * scale  # (B, H, L, S)
    future = torch.arange(S)[None, :] > torch.arange(L)[:, None] + (S - L)  # (L, S), bottom-right
    weights = scores.masked_fill(future, float("-inf")).softmax(-1)
    return torch.einsum("bhlr,hvr->bhlv", weights @ c_kv, w_uv)  # (B, H, L, r) -> (B, H, L, dv)
