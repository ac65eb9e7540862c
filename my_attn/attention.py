"""Your scaled dot-product attention (mirrors attn_lib.attention; notebook 03).

Shapes: query (..., L, E), key (..., S, E), value (..., S, Ev); L queries, S keys.
"""

from __future__ import annotations

import torch

from my_attn._todo import todo


def softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax along ``dim``, written by hand and numerically stable: exp(s - max) / sum(exp(s - max)).

    Must not call torch.softmax, torch.nn.functional.softmax, Tensor.softmax or log_softmax. Scores of 1000 must not
    overflow; a row whose entries are all -inf has no valid answer (return NaN there, as torch does).

    Args:
        scores: a floating tensor of any shape. dim: the axis to normalise.

    Returns:
        a tensor of scores' shape and dtype, non-negative, summing to 1 along ``dim``.
    """
    todo("softmax", "03", "Exercise 1 · The weights, with a softmax you write")


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, *, is_causal: bool = False,
                                 dropout_p: float = 0.0, scale: float | None = None,
                                 enable_gqa: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q·Kᵀ·scale + mask)·V (Vaswani et al. 2017, §3.2.1), with torch's arguments.

    Args:
        query (..., L, E), key (..., S, E), value (..., S, Ev): floating tensors of one dtype.
        attn_mask: None; a bool tensor broadcastable to (..., L, S), True = may attend; or a float tensor added to
            the scaled scores.
        is_causal: query i attends to keys 0..i (top-left alignment, as torch); not together with attn_mask.
        dropout_p: the probability of setting each weight to 0 (after the softmax); the weights that survive are
            divided by 1 - dropout_p, and the output uses the dropped weights (notebook 04).
        scale: the factor on Q·Kᵀ; None means 1/sqrt(E).
        enable_gqa: key and value may have fewer heads, Hkv dividing H (dim -3): key/value head h serves query
            heads h·G ... h·G + G - 1, G = H / Hkv (notebook 08).

    Returns:
        (output (..., L, Ev), weights (..., L, S)) in query's dtype. A query row whose keys are all masked gets
        weights 0 and output 0 (attn_lib's rule; softmax alone would give 0/0 = NaN). float16 and bfloat16 inputs
        are computed in float32. Use your own ``softmax``; do not call torch's scaled_dot_product_attention.
    """
    todo("scaled_dot_product_attention", "03", "The reference function: batches and both results")
