"""Causal linear attention with a decay, in three forms, and the FFT long convolution, solved (notebook 12)."""

from __future__ import annotations

import torch


def _within(q, k, cum):
    """(q_i·k_j) exp(cum_i - cum_j) for j <= i, else 0: (..., n, n)."""
    n = q.shape[-2]
    gap = cum[..., :, None] - cum[..., None, :]  # (..., n, n)
    lower = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    return (q @ k.transpose(-1, -2)) * gap.masked_fill(~lower, float("-inf")).exp()


def decayed_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, log_decay: torch.Tensor | None = None,
                      *, form: str = "parallel", chunk_size: int = 16, initial_state: torch.Tensor | None = None,
                      return_state: bool = False):
    """Parallel: one masked matrix. Recurrent: the state, token by token. Chunked: parallel inside, state across."""
    if form not in ("parallel", "recurrent", "chunked"):
        raise ValueError(f"form must be 'parallel', 'recurrent' or 'chunked', got {form!r}")
    if form == "parallel" and (initial_state is not None or return_state):
        raise ValueError("form='parallel' keeps no state: use 'recurrent' or 'chunked'")
    L, E, Ev = key.shape[-2], key.shape[-1], value.shape[-1]
    g = torch.zeros(key.shape[:-1], dtype=key.dtype, device=key.device) if log_decay is None else log_decay
    if form == "parallel":
        return _within(query, key, g.cumsum(-1)) @ value
    state = initial_state if initial_state is not None else key.new_zeros(*key.shape[:-2], E, Ev)  # (..., E, Ev)
    outs = []
    if form == "recurrent":
        for t in range(L):
            state = g[..., t, None, None].exp() * state + key[..., t, :, None] * value[..., t, None, :]
            outs.append((query[..., t, None, :] @ state))  # (..., 1, Ev)
    else:
        for s in range(0, L, chunk_size):
            q, k, v = (x[..., s:s + chunk_size, :] for x in (query, key, value))
            cum = g[..., s:s + chunk_size].cumsum(-1)  # (..., n): decay from the chunk's start
            outs.append((q * cum.exp()[..., None]) @ state + _within(q, k, cum) @ v)
            to_end = (cum[..., -1:] - cum).exp()[..., None]  # (..., n, 1)
            state = cum[..., -1, None, None].exp() * state + (k * to_end).transpose(-1, -2) @ v
    out = torch.cat(outs, -2)
    return (out, state) if return_state else out


def fft_long_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Zero-pad both to 2L points (no wrap-around), multiply the spectra, transform back, keep the first L values."""
    L = u.shape[-1]
    n = 2 * L  # >= L + K - 1: the whole linear convolution fits, so the circular product equals it
    spectrum = torch.fft.rfft(u, n=n) * torch.fft.rfft(k, n=n)  # rfft(x, n) pads x with zeros to n points
    return torch.fft.irfft(spectrum, n=n)[..., :L].to(u.dtype)
