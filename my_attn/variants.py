"""Your soft-capping and sink softmax (mirrors attn_lib.variants; notebook 11, sections 3 and 5)."""

from __future__ import annotations

import torch

from my_attn._todo import todo


def softcap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """Logit soft-capping (Gemma 2): cap · tanh(scores / cap). Smooth, ~identity for |s| << cap, bounded by ±cap.

    Args:
        scores: floating tensor of any shape, e.g. (B, H, L, S). cap: a number > 0 (Gemma 2: 50.0).

    Returns:
        the capped scores, the shape and dtype of ``scores``.
    """
    todo("softcap", "11", "5 · Logit soft-capping (Gemma 2)")


def softmax_with_sink(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """gpt-oss's softmax with a learned sink: one extra logit per head in the denominator, that gives back nothing.

    weights[b, h, i, j] = exp(scores[b, h, i, j]) / (exp(sinks[h]) + Σ_j' exp(scores[b, h, i, j'])). A score of
    -inf (a masked key) gets weight 0; a row whose keys are all masked gives all its weight to the sink (zeros).
    Stable for scores and sinks near 1000 (subtract each row's maximum, the sink included). Not in attn_lib as a
    function: attn_lib computes it inside ``VariantAttention.attend`` (this piece replaces nothing).

    Args:
        scores: (B, H, L, S) floating. sinks: (H,) of the scores' dtype, one logit per head.

    Returns:
        (B, H, L, S), the dtype of ``scores``; each row sums to less than 1.
    """
    todo("softmax_with_sink", "11", "3 · Attention sinks (gpt-oss, StreamingLLM)")
