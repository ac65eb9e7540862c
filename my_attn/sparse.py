"""Your top-k selection of DeepSeek sparse attention (mirrors a step of attn_lib.sparse; notebook 11, section 8)."""

from __future__ import annotations

import torch

from my_attn._todo import todo


def select_topk(scores: torch.Tensor, topk: int) -> torch.Tensor:
    """The keys each query keeps: its ``topk`` largest index scores, never a blocked key (score -inf).

    A query with fewer than ``topk`` causal keys keeps all of them. Not in attn_lib as a function: attn_lib's
    ``LightningIndexer.selected_mask`` does it (this piece replaces nothing).

    Args:
        scores: (B, L, S) floating, -inf where a key is blocked (the future). topk: int >= 1.

    Returns:
        (B, L, S) bool, True where query t keeps key s.
    """
    todo("select_topk", "11", "8 · DeepSeek sparse attention (DeepSeek-V3.2)")
