"""Your causal linear attention with a decay, in three forms, and the FFT long convolution (mirrors attn_lib.linear;
notebook 12, sections 1 and 4)."""

from __future__ import annotations

import torch

from my_attn._todo import todo


def decayed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, log_decay: torch.Tensor | None = None,
                      *, form: str = "parallel", chunk_size: int = 16, initial_state: torch.Tensor | None = None,
                      return_state: bool = False):
    """Causal attention without softmax, with a scalar decay per position:
    out_i = Σ_{j<=i} exp(g_{j+1} + ... + g_i) (q_i·k_j) v_j, g = log_decay (None: no decay, g = 0).

    The recurrent form: state_t = exp(g_t) state_{t-1} + k_t v_tᵀ (E × Ev), out_t = state_tᵀ q_t. The chunked form:
    inside each chunk of ``chunk_size`` positions the parallel (masked matrix) form, plus what the state carried
    from the earlier chunks gives; then the state moves to the chunk's end. All three forms are equal.

    Args:
        query, key: (..., L, E); value: (..., L, Ev); log_decay: (..., L) <= 0 or None.
        form: "parallel", "recurrent" or "chunked". chunk_size: int >= 1 (the last chunk may be shorter).
        initial_state: (..., E, Ev) or None (zeros), the state before position 0 (not for "parallel").
        return_state: also return the state after the last position (not for "parallel").

    Returns:
        out (..., L, Ev), or (out, state) with return_state; the inputs' dtype.
    """
    todo("decayed_attention", "12", "1 · Linear attention is an RNN")


def fft_long_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The causal long convolution y_t = Σ_{s=0..t} k_s u_{t-s}, computed through the FFT in O(L log L) (S4's
    convolution mode, Hyena's long filters): zero-pad the signal and the filter so that the FFT's circular product
    does not wrap around, multiply the two spectra, transform back, keep the causal part.

    Args:
        u: (..., L) signals, float32 or float64. k: (..., K) filters with 1 <= K <= L (a shorter filter is zero
            beyond K), of u's dtype; the leading dims broadcast against u's.

    Returns:
        y (..., L), u's dtype (real, not complex).
    """
    todo("fft_long_conv", "12", "4 · Long convolutions: S4's convolution mode and Hyena")
