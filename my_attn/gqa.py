"""Your grouped-query attention (mirrors attn_lib.gqa; notebook 08).

Shapes: B batch, Hq query heads, Hkv key/value heads (Hkv divides Hq), G = Hq / Hkv query heads per group,
L queries, S keys, E head_dim of query and key, Ev head_dim of value.
"""

from __future__ import annotations

import torch

from my_attn._todo import todo


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(..., Hkv, S, D) -> (..., Hkv·n_rep, S, D): each key/value head repeated n_rep times, the copies side by side.

    Head h of x becomes heads h·n_rep ... h·n_rep + n_rep - 1, so query head j reads key/value head j // n_rep
    (HuggingFace's repeat_kv, torch's enable_gqa). n_rep = 1 returns x unchanged.

    Returns:
        a tensor of x's dtype, shape (..., Hkv·n_rep, S, D).
    """
    todo("repeat_kv", "08", "The same attention, three ways")


def grouped_query_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attn_mask: torch.Tensor | None = None, *, is_causal: bool = False,
                            scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped-query attention without copying the keys and values.

    Stack the G query heads of a group as extra query rows of their one key/value head:
    (..., Hkv·G, L, E) -> (..., Hkv, G·L, E), attend, and unstack. Same answer as torch's
    ``scaled_dot_product_attention(..., enable_gqa=True)``. Do not repeat key or value, and do not call torch's
    scaled_dot_product_attention: write softmax(Q·Kᵀ·scale + mask)·V yourself.

    Args:
        query: (..., Hq, L, E). key: (..., Hkv, S, E). value: (..., Hkv, S, Ev).
        attn_mask: None, a bool mask (True = may attend) or a float mask (added to the scores), broadcastable to
            (..., Hq, L, S).
        is_causal: top-left causal mask (query i sees keys 0..i), as torch's.
        scale: score multiplier, default 1/sqrt(E).

    Returns:
        (output (..., Hq, L, Ev), weights (..., Hq, L, S)), in query's dtype. A query whose keys are all masked
        gets weights 0 and output 0 (not NaN).
    """
    todo("grouped_query_attention", "08", "Why MQA and GQA decode faster")
