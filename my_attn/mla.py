"""Your MLA attention in the latent space (mirrors a step of attn_lib.mla; notebook 11, section 1)."""

from __future__ import annotations

import torch

from my_attn._todo import todo


def absorbed_attention(q_c: torch.Tensor, q_r: torch.Tensor, c_kv: torch.Tensor, k_r: torch.Tensor,
                       w_uk: torch.Tensor, w_uv: torch.Tensor, *, scale: float) -> torch.Tensor:
    """MLA's absorbed attention: W_UK folded into the query, W_UV applied after the softmax; the cache's latents
    c_KV are never expanded into per-head keys and values.

    score(i, j) = scale · ((q_C,i W_UK) · c_j + q_R,i · k_R,j); out_i = W_UV (Σ_j softmax_j(score) c_j). The L
    queries are the last L of the S positions: causal, bottom-right. Not in attn_lib as a function: attn_lib
    computes it in ``MultiHeadLatentAttention.forward(absorbed=True)`` (this piece replaces nothing).

    Args:
        q_c: (B, H, L, dn), q_r: (B, H, L, dr) (rotated). c_kv: (B, 1, S, r), k_r: (B, 1, S, dr) (rotated): one
        latent key for all heads. w_uk: (H, dn, r), w_uv: (H, dv, r). scale: the scores' factor.

    Returns:
        (B, H, L, dv), the heads' outputs before o_proj.
    """
    todo("absorbed_attention", "11", "1 · Multi-head latent attention (DeepSeek-V2, V3)")
