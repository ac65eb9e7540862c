"""The gated delta-rule step, solved (notebook 12)."""

from __future__ import annotations

import torch


def delta_rule_step(state, query, key, value, log_decay, beta):
    """Decay, correct towards v, read with the new state."""
    state = log_decay.exp()[..., None, None] * state  # (..., E, Ev)
    predicted = torch.einsum("...ef,...e->...f", state, key)  # Sᵀ k: (..., Ev)
    state = state + torch.einsum("...e,...f->...ef", key, beta[..., None] * (value - predicted))
    return torch.einsum("...ef,...e->...f", state, query), state
