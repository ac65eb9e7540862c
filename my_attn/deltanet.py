"""Your gated delta-rule step (mirrors attn_lib.deltanet; notebook 12, section 3)."""

from __future__ import annotations

from my_attn._todo import todo


def delta_rule_step(state, query, key, value, log_decay, beta):
    """One token of the gated delta rule: decay, correct, read.

    S ← exp(log_decay) · S; then S ← S + β k (v - Sᵀk)ᵀ (the memory's prediction for k, corrected towards v);
    out = Sᵀ q with the new S. The (E, Ev) layout: state[e, f].

    Args:
        state: (..., E, Ev); query, key: (..., E); value: (..., Ev); log_decay: (...) <= 0; beta: (...) in [0, 1].

    Returns:
        (out, new_state): (..., Ev) and (..., E, Ev), the inputs' dtype.
    """
    todo("delta_rule_step", "12", "3 · Gated DeltaNet: the state as online regression")
