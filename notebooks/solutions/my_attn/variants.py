"""Soft-capping and the sink softmax, solved (notebook 11)."""

from __future__ import annotations

import torch


def softcap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """cap · tanh(scores / cap)."""
    return cap * torch.tanh(scores / cap)


def softmax_with_sink(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """exp(s_j) / (exp(sink_h) + Σ exp(s_j')), stable: every exp is of (logit - the row's max, sink included)."""
    sink = sinks.to(scores.dtype)[:, None, None]  # (H,) -> (H, 1, 1), broadcasts over (B, H, L)
    m = torch.maximum(scores.amax(-1, keepdim=True), sink)  # (B, H, L, 1), finite: the sink is
    e = (scores - m).exp()  # (B, H, L, S); a masked key gives exp(-inf) = 0
    return e / (e.sum(-1, keepdim=True) + (sink - m).exp())
