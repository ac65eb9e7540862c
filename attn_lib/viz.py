"""Figures of attention weights: heatmaps (matplotlib), widgets (ipywidgets), bertviz views.

All colormaps are colour-blind safe (viridis by default).
"""

from __future__ import annotations

from typing import Sequence

import torch

from attn_lib._setup import SEQUENTIAL_CMAP


def _as_2d_or_4d(weights) -> torch.Tensor:
    w = torch.as_tensor(weights).detach().to("cpu", torch.float32)
    if w.dim() not in (2, 4):
        raise ValueError(
            f"weights must be (L, S) for one head or (layers, heads, L, S) for a grid; got shape {tuple(w.shape)}"
        )
    return w


def plot_attention(
    weights,
    tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    *,
    ax=None,
    title: str | None = None,
    cmap: str = SEQUENTIAL_CMAP,
    annotate: bool = False,
    vmax: float | None = None,
):
    """Heatmap of attention weights with token labels: rows are queries, columns keys.

    Args:
        weights: (L, S) for one head, or (layers, heads, L, S) for a grid of small heatmaps
            (one row per layer, one column per head). Tensor or array, any float dtype.
        tokens: the L query tokens (also the key tokens when ``key_tokens`` is None).
        key_tokens: the S key tokens, for cross-attention.
        ax: matplotlib Axes for the single-head case; a new figure when None.
        title: figure or axes title.
        cmap: colormap name (default viridis, colour-blind safe).
        annotate: write each weight in its cell (single head only; readable up to ~12 tokens).
        vmax: top of the colour scale; default the largest weight.

    Returns:
        the matplotlib Figure.

    Raises:
        ValueError: ``weights`` is not 2-D or 4-D, or the token counts do not match its last two
            dims (the message names both).
    """
    import matplotlib.pyplot as plt

    w = _as_2d_or_4d(weights)
    key_tokens = list(tokens) if key_tokens is None else list(key_tokens)
    tokens = list(tokens)
    L, S = w.shape[-2:]
    if len(tokens) != L or len(key_tokens) != S:
        raise ValueError(
            f"weights are {L} queries x {S} keys but {len(tokens)} query tokens and "
            f"{len(key_tokens)} key tokens were given"
        )
    vmax = float(w.max()) if vmax is None else vmax

    if w.dim() == 2:
        if ax is None:
            fig, ax = plt.subplots(figsize=(1.0 + 0.45 * S, 0.8 + 0.4 * L))
        else:
            fig = ax.figure
        im = ax.imshow(w.numpy(), cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
        ax.set_xticks(range(S), key_tokens, rotation=60, ha="right")
        ax.set_yticks(range(L), tokens)
        ax.set_xlabel("key (attended to)")
        ax.set_ylabel("query (attending)")
        if annotate:
            for i in range(L):
                for j in range(S):
                    value = float(w[i, j])
                    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                            color="black" if value > 0.6 * vmax else "white")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
        if title:
            ax.set_title(title)
        return fig

    layers, heads = w.shape[:2]
    fig, axes = plt.subplots(layers, heads, figsize=(1.2 * heads, 1.2 * layers), squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            a = axes[layer][head]
            a.imshow(w[layer, head].numpy(), cmap=cmap, vmin=0.0, vmax=vmax)
            a.set_xticks([])
            a.set_yticks([])
            if layer == 0:
                a.set_title(f"head {head}", fontsize=8)
            if head == 0:
                a.set_ylabel(f"layer {layer}", fontsize=8)
    if title:
        fig.suptitle(title)
    return fig
