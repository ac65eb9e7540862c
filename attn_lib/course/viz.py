"""Figures of attention weights: heatmaps (matplotlib), widgets (ipywidgets), bertviz views.

All colours are colour-blind safe: :data:`PALETTE` (Okabe & Ito 2008) for lines and bars,
:data:`SEQUENTIAL_CMAP` (viridis) for weights, :data:`DIVERGING_CMAP` (PuOr) for signed values.
They are defined once, in ``attn_lib.course._setup`` (which :func:`attn_lib.setup` uses for matplotlib's
defaults), and public here. Over 400 lines: one module for every figure and widget the
notebooks show, each a few short functions; splitting it would scatter the colour rules. Shapes use the legend of :mod:`attn_lib.attention` (L queries, S keys).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Sequence

import torch

from attn_lib._checks import check_bool, check_int, check_number
from attn_lib.course.style import DIVERGING_CMAP, MASK_COLORS, PALETTE, SEQUENTIAL_CMAP

__all__ = [
    "PALETTE", "SEQUENTIAL_CMAP", "DIVERGING_CMAP", "plot_attention", "attention_stack", "select_head",
    "head_options", "explorer_figure", "attention_explorer", "head_view", "model_view",
    "softmax_temperature_demo", "temperature_figure", "temperature_explorer", "demo_mask", "mask_figure",
    "mask_explorer", "plot_online_softmax_step", "head_view_panels", "head_view_figure", "model_view_figure", "offline_page", "use_offline_bertviz",
]


def _as_2d_or_4d(weights) -> torch.Tensor:
    try:
        w = torch.as_tensor(weights)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"weights must be a tensor or array of attention weights, got {type(weights).__name__}") from None
    if w.dtype == torch.bool or w.is_complex():
        raise TypeError(f"weights must hold real numbers, got dtype {w.dtype}")
    w = w.detach().to("cpu", torch.float32)
    if w.dim() not in (2, 4):
        raise ValueError(
            f"weights must be (L, S) for one head or (layers, heads, L, S) for a grid; got shape {tuple(w.shape)}"
        )
    if w.shape[-1] == 0 or w.shape[-2] == 0 or w.numel() == 0:
        raise ValueError(f"weights must have at least one query and one key, got shape {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()):
        n = int((~torch.isfinite(w)).sum())
        raise ValueError(f"weights contain {n} NaN or infinite values (of shape {tuple(w.shape)}); expected finite "
                         f"attention weights -- a NaN usually means a query row with every key masked")
    if bool((w < 0).any()):
        raise ValueError(f"weights must be >= 0 (attention weights are probabilities), got a minimum of "
                         f"{float(w.min()):.4g}; for signed values (scores) use a diverging colormap with plt.imshow")
    return w


def _check_tokens(name: str, tokens) -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"{name} must be a list of str (one label per position), got {type(tokens).__name__} "
                        f"{tokens!r}"[:160])
    return [str(t) for t in tokens]


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
        ax: one matplotlib Axes for the single-head case; a new figure when None.
        title: figure or axes title.
        cmap: colormap name (default viridis, colour-blind safe).
        annotate: write each weight in its cell (single head only; readable up to ~12 tokens).
        vmax: top of the colour scale, a number > 0; default the largest weight.

    Returns:
        the matplotlib Figure.

    Raises:
        TypeError: weights not numeric; tokens not a list of str (None); vmax not a number ('auto');
            ax not one matplotlib Axes (a list or an array of them); annotate not a bool.
        ValueError: ``weights`` is not 2-D or 4-D, is empty, holds NaN, inf or negative values; the token
            counts do not match its last two dims (the message names both); ax given for a grid; vmax <= 0.

    Matches what ``bertviz``'s head view shows for one head, as a static matplotlib heatmap
    (rows = queries, as in Vaswani et al. 2017, Figure 3).

    Source: bertviz's head view (Vig 2019) as a static heatmap; Vaswani et al. 2017, Figure 3.
    """
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes

    w = _as_2d_or_4d(weights)
    tokens = _check_tokens("tokens", tokens)
    key_tokens = list(tokens) if key_tokens is None else _check_tokens("key_tokens", key_tokens)
    check_bool("annotate", annotate)
    if ax is not None and not isinstance(ax, Axes):
        raise TypeError(f"ax must be one matplotlib Axes (e.g. axes[0] of plt.subplots(1, 2)), got {type(ax).__name__}")
    if ax is not None and w.dim() == 4:
        raise ValueError("ax is for one head's (L, S) weights; a (layers, heads, L, S) grid draws its own figure")
    L, S = w.shape[-2:]
    if len(tokens) != L or len(key_tokens) != S:
        raise ValueError(
            f"weights are {L} queries x {S} keys but {len(tokens)} query tokens and "
            f"{len(key_tokens)} key tokens were given"
        )
    if vmax is None:
        vmax = float(w.max()) or 1.0  # an all-zero map still needs a colour scale
    elif check_number("vmax", vmax, minimum=0.0) == 0:
        raise ValueError(f"vmax must be a number > 0 (the top of the colour scale), got {vmax}")

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


# --------------------------------------------------------------------------------------------
# Notebook 05: an offline layer/head explorer (ipywidgets) and thin bertviz wrappers.
# The explorer's logic lives in plain functions (attention_stack, select_head, head_options,
# explorer_figure) that tests/course/test_viz.py calls directly; attention_explorer only wires widgets.
# --------------------------------------------------------------------------------------------
_EAGER_HINT = (
    "load the model with attn_implementation='eager' (attn_lib.load_pretrained() does) and call it "
    "with output_attentions=True; with transformers' default 'sdpa' attention the tuple is empty"
)


def attention_stack(attentions, *, batch_index: int = 0) -> torch.Tensor:
    """One sentence's attention weights of every layer as one tensor.

    Args:
        attentions: ``outputs.attentions`` of a HuggingFace model (a tuple of num_layers tensors,
            each (B, H, L, S)), or a (layers, H, L, S) tensor.
        batch_index: which sentence of the batch.

    Returns:
        float32 CPU tensor (layers, H, L, S).

    Raises:
        ValueError: an empty tuple (the message says to load the model with eager attention);
            a tensor that is not 4-D; layers of different shapes; batch_index out of range.

    ``attentions``: float tensors of any floating dtype (float32 from transformers); ``batch_index`` an int.

    Raises:
        TypeError: through torch for an entry that is not a tensor.

    Source: the layout of transformers' ``output_attentions=True`` (``outputs.attentions``).
    """
    if attentions is None or (isinstance(attentions, (tuple, list)) and len(attentions) == 0):
        raise ValueError(f"attentions is {attentions!r}: {_EAGER_HINT}")
    if isinstance(attentions, torch.Tensor):
        if attentions.dim() != 4:
            raise ValueError(f"an attention tensor must be (layers, H, L, S); got shape {tuple(attentions.shape)}")
        return attentions.detach().to("cpu", torch.float32)
    layers = []
    for i, a in enumerate(attentions):
        a = torch.as_tensor(a)
        if a.dim() != 4:
            raise ValueError(f"attentions[{i}] must be (B, H, L, S); got shape {tuple(a.shape)}")
        if not -a.shape[0] <= batch_index < a.shape[0]:
            raise ValueError(f"batch_index {batch_index} is out of range for batch size {a.shape[0]}")
        if layers and a.shape[1:] != layers[0].shape:
            raise ValueError(
                f"attentions[{i}] has shape {tuple(a.shape)}, unlike attentions[0] {tuple(attentions[0].shape)}"
            )
        layers.append(a[batch_index].detach().to("cpu", torch.float32))
    return torch.stack(layers)  # (layers, H, L, S)


def select_head(stack: torch.Tensor, layer: int, head: int | None) -> torch.Tensor:
    """The (L, S) weights of one layer and head of a (layers, H, L, S) stack; ``head=None``: mean over heads.

    Raises:
        ValueError: layer or head out of range (the message gives the valid range).

    Args:
        stack: (layers, H, L, S) float tensor (float32 from :func:`attention_stack`). layer: an int.
        head: an int, or None.

    Returns:
        an (L, S) tensor of stack's dtype.

    Source: the course's own: notebook 06 (the explorer's head selector; None = bertviz-free mean).
    """
    layers, heads = stack.shape[:2]
    if not 0 <= layer < layers:
        raise ValueError(f"layer must be in 0..{layers - 1}, got {layer}")
    if head is None:
        return stack[layer].mean(dim=0)
    if not 0 <= head < heads:
        raise ValueError(f"head must be None (mean of heads) or in 0..{heads - 1}, got {head}")
    return stack[layer, head]


def head_options(num_heads: int) -> list[tuple[str, int | None]]:
    """Choices of the explorer's head selector: (label, value) pairs, "mean of heads" first (value None).

    Raises:
        TypeError: num_heads not an int. ValueError: num_heads < 1 (no head to choose).

    No tensors: an int in, a list of (str, int or None) pairs out.

    Source: the course's own: notebook 06.
    """
    check_int("num_heads", num_heads, minimum=1)
    return [("mean of heads", None)] + [(f"head {h}", h) for h in range(num_heads)]


def explorer_figure(stack: torch.Tensor, tokens: Sequence[str], layer: int, head: int | None, *,
                    key_tokens: Sequence[str] | None = None, annotate: bool = False):
    """The heatmap the explorer shows for (layer, head): :func:`plot_attention` with a title.

    Args:
        stack: (layers, H, L, S) float tensor. tokens: L str (key_tokens: S str). layer: an int; head: an int
            or None (mean). annotate: a bool.

    Returns:
        the matplotlib Figure.

    Raises:
        TypeError / ValueError: as :func:`select_head` and :func:`plot_attention`.

    Source: the course's own: notebook 06.
    """
    which = "mean of heads" if head is None else f"head {head}"
    return plot_attention(select_head(stack, layer, head), tokens, key_tokens,
                          title=f"layer {layer}, {which}", annotate=annotate)


def attention_explorer(attentions, tokens: Sequence[str], *, key_tokens: Sequence[str] | None = None,
                       batch_index: int = 0, annotate: bool = False):
    """Interactive heatmap of one sentence's attention: pick a layer and a head (works offline).

    Args:
        attentions: ``outputs.attentions`` (tuple of (B, H, L, S)) or a (layers, H, L, S) tensor.
        tokens: the L query tokens (and keys, unless ``key_tokens``).
        key_tokens: the S key tokens, for cross-attention.
        batch_index: which sentence of the batch.
        annotate: write the weights in the cells.

    Returns:
        an ``ipywidgets.VBox``: a layer slider, a head dropdown ("mean of heads" or one head) and an
        ``Output`` with the heatmap. Display it as a cell's last expression.

    Raises:
        ValueError: as :func:`attention_stack`; a token count that does not match L or S (names both).

    ``attentions`` hold float tensors (float32 from transformers); tokens are str; batch_index an int;
    annotate a bool (TypeError otherwise, from :func:`plot_attention`).

    Source: the course's own: notebook 06 (a static, offline alternative to bertviz, Vig 2019).
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    stack = attention_stack(attentions, batch_index=batch_index)
    _check_token_counts(stack, tokens, key_tokens)
    layers, heads = stack.shape[:2]
    layer_w = widgets.IntSlider(value=0, min=0, max=layers - 1, description="layer", continuous_update=False, style=_LABEL_STYLE)
    head_w = widgets.Dropdown(options=head_options(heads), value=0, description="head", style=_LABEL_STYLE)
    out = widgets.Output()

    def show(_change=None):
        with out:
            out.clear_output(wait=True)
            fig = explorer_figure(stack, tokens, layer_w.value, head_w.value, key_tokens=key_tokens, annotate=annotate)
            display(fig)
            plt.close(fig)

    layer_w.observe(show, names="value")
    head_w.observe(show, names="value")
    show()
    return widgets.VBox([widgets.HBox([layer_w, head_w]), out])


def _check_token_counts(stack: torch.Tensor, tokens, key_tokens=None) -> None:
    L, S = stack.shape[-2:]
    n_q = len(tokens)
    n_k = n_q if key_tokens is None else len(key_tokens)
    if n_q != L or n_k != S:
        raise ValueError(
            f"the attention is {L} queries x {S} keys but {n_q} query tokens and {n_k} key tokens were given "
            "(pass the tokens of the same sentence, special tokens included: tokenizer.convert_ids_to_tokens(ids))"
        )


def _bertviz_input(attentions, tokens, *, batch_index: int = 0) -> tuple[torch.Tensor, ...]:
    stack = attention_stack(attentions, batch_index=batch_index)
    _check_token_counts(stack, tokens)
    # bertviz writes every weight into the page as JSON; 4 decimals (float64, so that they print short)
    # keep a 6-layer, 12-head view of a sentence under 100 kB instead of ~450 kB
    stack = torch.round(stack.double(), decimals=4)
    return tuple(layer[None] for layer in stack)  # bertviz wants (1, H, L, L) per layer


def _check_html_action(html_action) -> None:
    if html_action not in ("view", "return"):
        raise ValueError(f"html_action must be 'view' (show in the notebook) or 'return' (an HTML object), got {html_action!r}")


def head_view(attentions, tokens: Sequence[str], *, batch_index: int = 0, html_action: str = "view",
              static: bool = True, **kwargs):
    """bertviz's head view (Vig 2019) of one sentence, after checking the input; draws with no network.

    Lines from each token to the tokens it attends to, one colour per head, one layer at a time.
    The page carries its own d3 and jQuery (shipped with attn_lib, see :func:`offline_page`), so it
    draws offline in JupyterLab, in ``jupyter nbconvert --to html`` and on the course website, and
    also on a first "Run All". With ``html_action="view"`` it is followed by a static matplotlib
    figure of the same layer (:func:`head_view_figure`), for readers whose viewer runs no JavaScript.

    Args:
        attentions: ``outputs.attentions`` (tuple of num_layers (B, H, L, L)) or (layers, H, L, L).
        tokens: the L tokens of the sentence (special tokens included).
        batch_index: which sentence of the batch (bertviz shows one).
        html_action: ``"view"`` displays it; ``"return"`` returns an ``IPython.display.HTML`` whose
            ``.data`` is the whole page (save it to a file, or test it). The weights in the page are
            rounded to 4 decimals.
        static: with ``html_action="view"``, also show the static figure.
        **kwargs: passed to ``bertviz.head_view`` (``layer``, ``heads``, ``include_layers``,
            ``sentence_b_start``, ``prettify_tokens``).

    Raises:
        ValueError: an empty tuple of attentions (the message says to load the model with eager
            attention); a token count that does not match the attention size (names both);
            an unknown html_action.

    ``attentions`` are float tensors (float32 from transformers); tokens a list of str; html_action a str.
    """
    _check_html_action(html_action)
    page = _bertviz_original("head_view")(_bertviz_input(attentions, tokens, batch_index=batch_index),
                                          list(tokens), html_action="return", **kwargs)
    figure = None
    if static and html_action == "view":
        figure = lambda: head_view_figure(attentions, tokens, batch_index=batch_index,  # noqa: E731
                                          layer=kwargs.get("layer"), heads=kwargs.get("heads"))
    return _deliver(offline_page(page), html_action, figure)


def model_view(attentions, tokens: Sequence[str], *, batch_index: int = 0, html_action: str = "view",
               display_mode: str = "light", static: bool = True, **kwargs):
    """bertviz's model view of one sentence (a grid: one small view per layer and head), after checking the input.

    Draws with no network, like :func:`head_view`; with ``html_action="view"`` it is followed by a
    static grid of heatmaps (one per layer and head, :func:`model_view_figure`). Arguments, return
    value and errors as :func:`head_view`; ``display_mode`` is ``"light"`` or ``"dark"``; other keyword
    arguments (``include_layers``, ``include_heads``, ``sentence_b_start``) go to ``bertviz.model_view``.

    Shapes: ``attentions`` a tuple of num_layers float (B, H, L, L) tensors or one (layers, H, L, L)
    tensor; tokens a list of L str; display_mode a str.

    Raises:
        ValueError: as :func:`head_view`; display_mode neither "light" nor "dark".

    Source: bertviz's ``model_view`` (Vig 2019, "A Multiscale Visualization of Attention in the Transformer Model").
    """
    _check_html_action(html_action)
    if display_mode not in ("light", "dark"):
        raise ValueError(f"display_mode must be 'light' or 'dark', got {display_mode!r}")
    page = _bertviz_original("model_view")(_bertviz_input(attentions, tokens, batch_index=batch_index),
                                           list(tokens), html_action="return", display_mode=display_mode, **kwargs)
    figure = None
    if static and html_action == "view":
        figure = lambda: model_view_figure(attentions, tokens, batch_index=batch_index,  # noqa: E731
                                           include_layers=kwargs.get("include_layers"),
                                           include_heads=kwargs.get("include_heads"))
    return _deliver(offline_page(page), html_action, figure)


def _mosaic_figure(weights: torch.Tensor, panel_labels: Sequence[Sequence[str]], row_labels: Sequence[str],
                   tokens: Sequence[str], title: str, *, label_tokens: bool = True):
    """One image of a (R, C, L, S) grid of heatmaps, one blank pixel between them (three above a labelled lower row;
    NaN panels stay blank).

    One Axes for the whole grid (a grid of 72 Axes takes seconds to draw); panel and row labels are
    text; with ``label_tokens`` the tokens label the first panel's rows and the bottom-left panel's columns.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    R, C, L, S = weights.shape
    # rows below the first that carry panel labels get 3 blank pixels above them, room for the labels
    # (with 1, a lower row's "head h" would be drawn over the bottom of the panels above it)
    gap = 3 if any(label for row in panel_labels[1:] for label in row) else 1
    grid = np.full((R * (L + gap) - gap, C * (S + 1) - 1), np.nan)
    for r in range(R):
        for c in range(C):
            grid[r * (L + gap): r * (L + gap) + L, c * (S + 1): c * (S + 1) + S] = weights[r, c].numpy()
    cell = 0.13 if label_tokens else 0.07
    fig, ax = plt.subplots(figsize=(1.8 + cell * grid.shape[1], 1.4 + cell * grid.shape[0]))
    cmap = plt.get_cmap(SEQUENTIAL_CMAP).with_extremes(bad="white")
    im = ax.imshow(grid, cmap=cmap, vmin=0.0, vmax=float(np.nanmax(grid)), interpolation="nearest")
    if label_tokens:
        ax.set_yticks(range(L), list(tokens), fontsize=6)
        ax.set_xticks([j for j in range(S)], list(tokens), rotation=90, fontsize=6)
        ax.xaxis.set_ticks_position("bottom")
        ax.set_xlim(-0.5, grid.shape[1] - 0.5)
    else:
        ax.set_xticks([])
        ax.set_yticks([])
    for r, row in enumerate(panel_labels):
        for c, label in enumerate(row):
            ax.text(c * (S + 1) + (S - 1) / 2, r * (L + gap) - 0.8, label, ha="center", va="bottom", fontsize=7)
    for r, label in enumerate(row_labels):
        ax.text(-1.0, r * (L + gap) + (L - 1) / 2, label, ha="right", va="center", fontsize=7)
    for side in ax.spines.values():
        side.set_visible(False)
    fig.colorbar(im, ax=ax, fraction=0.025, pad=0.02, label="attention weight")
    ax.set_title(title, fontsize=9, pad=12)
    return fig


def head_view_panels(attentions, tokens: Sequence[str], *, layer: int | None = None, heads=None,
                     batch_index: int = 0, max_columns: int = 6) -> tuple[torch.Tensor, list[list[str]]]:
    """The grid :func:`head_view_figure` draws: (rows, columns, L, L) weights, heads in reading order
    (empty panels are NaN), and each panel's label ("head h", "" for an empty one).

    Args:
        attentions, tokens, batch_index: as :func:`head_view` (float (B, H, L, L) tensors, str tokens).
        layer: an int or None; heads: ints or None; max_columns: an int.

    Returns:
        (grid, labels): grid a float32 (rows, columns, L, L) tensor; labels rows of str.

    Raises:
        ValueError: as :func:`attention_stack`; a token count that is not L; a layer or head out of range.

    Source: the panels of bertviz's head view (Vig 2019), one heatmap per head; the course's own: notebook 06.
    """
    stack = attention_stack(attentions, batch_index=batch_index)
    _check_token_counts(stack, tokens)
    layer = 0 if layer is None else layer
    heads = list(range(stack.shape[1])) if heads is None else list(heads)
    panels = torch.stack([select_head(stack, layer, h) for h in heads])  # (n, L, L)
    n, L = panels.shape[0], panels.shape[-1]
    cols = min(n, max_columns)
    rows = -(-n // cols)
    grid = torch.full((rows * cols, L, L), float("nan"))
    grid[:n] = panels
    labels = [f"head {h}" for h in heads] + [""] * (rows * cols - n)
    return grid.reshape(rows, cols, L, L), [labels[r * cols:(r + 1) * cols] for r in range(rows)]


def head_view_figure(attentions, tokens: Sequence[str], *, layer: int | None = None, heads=None,
                     batch_index: int = 0, max_columns: int = 6):
    """The static counterpart of :func:`head_view`: one heatmap per head of one layer, in one image.

    Args:
        attentions, tokens, batch_index: as :func:`head_view`.
        layer: the layer the head view opens on (bertviz's ``layer``; None: layer 0).
        heads: the heads it shows (bertviz's ``heads``; None: all).
        max_columns: heads per row.

    Returns:
        the matplotlib Figure: the panels of :func:`head_view_panels`; in each, rows are queries and
        columns keys (as :func:`plot_attention`).

    Raises:
        ValueError: as :func:`head_view_panels`.

    Source: bertviz's head view (Vig 2019) as static matplotlib panels; the course's own: notebook 06.
    Types: float (B, H, L, L) attentions, str tokens, int layer/heads/max_columns.
    """
    grid, labels = head_view_panels(attentions, tokens, layer=layer, heads=heads, batch_index=batch_index,
                                    max_columns=max_columns)
    return _mosaic_figure(grid, labels, [], tokens,
                          f"layer {0 if layer is None else layer}: each head's weights (rows: query, columns: key)")


def model_view_figure(attentions, tokens: Sequence[str], *, include_layers=None, include_heads=None,
                      batch_index: int = 0):
    """The static counterpart of :func:`model_view`: a grid of heatmaps in one image, one row per layer,
    one column per head (in each panel rows are queries, columns keys).

    Args:
        attentions: a tuple of num_layers float (B, H, L, L) tensors or one (layers, H, L, L) tensor.
        tokens: L str. include_layers, include_heads: lists of int, or None (all). batch_index: an int.

    Returns:
        the matplotlib Figure.

    Raises:
        ValueError: as :func:`attention_stack`; a token count that is not L.

    Source: bertviz's ``model_view`` (Vig 2019), drawn as static heatmaps; the course's own: notebook 06.
    """
    stack = attention_stack(attentions, batch_index=batch_index)
    _check_token_counts(stack, tokens)
    layers = list(range(stack.shape[0])) if include_layers is None else list(include_layers)
    heads = list(range(stack.shape[1])) if include_heads is None else list(include_heads)
    labels = [[f"head {h}" for h in heads]] + [[""] * len(heads)] * (len(layers) - 1)
    return _mosaic_figure(stack[layers][:, heads], labels, [f"layer {i}" for i in layers], tokens,
                          "every layer (rows) and head (columns); in each, rows: query, columns: key",
                          label_tokens=False)


# bertviz loads require.js, d3 5.7.0 and jQuery 2.0.0 from cdnjs; the course ships d3 5.7.0 and jQuery
# 2.2.4 (the last 2.x on npm, same API) in attn_lib/course/static/ with their licences, and inlines them.
STATIC_DIR = Path(__file__).resolve().parent / "static"
_LIBRARIES = (("d3", "d3-5.7.0.min.js", "LICENSE-d3.txt"), ("jquery", "jquery-2.2.4.min.js", "LICENSE-jquery.txt"))
_CDN_SCRIPT_TAG = re.compile(r'<script src="https?://[^"]*require[^"]*"></script>')
_REQUIRE_CONFIG = re.compile(r"require\.config\(\{.*?\}\);", re.DOTALL)
_LEADING_COMMENT = re.compile(r"^\s*/\*.*?\*/", re.DOTALL)
_VIS_ID = re.compile(r'<div id="(bertviz-[0-9a-f]+)"')
_SCRIPT_START = '<script type="text/javascript">'


@functools.lru_cache(maxsize=None)
def _inline_libraries() -> str:
    """JavaScript that defines ``attnLibModules = {d3, jquery}`` without touching the page's globals.

    Each library is run inside a function whose ``define``, ``module`` and ``exports`` are undefined, so
    its UMD header takes the plain-browser branch: d3 attaches itself to ``this`` (our object), jQuery
    to ``window``, from which ``noConflict(true)`` takes it back (the page's own ``$`` is restored).
    """
    parts = ["var attnLibModules = {};"]
    for name, script, licence in _LIBRARIES:
        source = (STATIC_DIR / script).read_text(encoding="utf-8")
        notice = (STATIC_DIR / licence).read_text(encoding="utf-8").replace("*/", "* /")
        parts.append(f"/* {script}, shipped with attn_lib (attn_lib/course/static/{licence}):\n{notice}*/")
        parts.append(f"(function (define, module, exports) {{\n{source}\n}}).call(attnLibModules);")
    parts.append("attnLibModules.jquery = window.jQuery.noConflict(true);")
    return "\n".join(parts)


def offline_page(page):
    """bertviz's page (its ``html_action="return"`` HTML), rewritten to draw with no network.

    bertviz's page is a ``<script src=...cdnjs.../require.min.js>`` tag, the view's ``<div>``, and an
    inline script that sets ``require.config`` paths to cdnjs (d3 5.7.0, jQuery 2.0.0) and draws
    inside ``requirejs(['jquery', 'd3'], ...)``. Offline the view stays blank; in JupyterLab it is blank
    even online on a first Run All ("require is not defined", bertviz issue #53). Here the CDN tag
    and the ``require.config`` block are removed, d3 and jQuery are inlined (:func:`_inline_libraries`),
    and a local ``requirejs`` hands them to bertviz's unchanged drawing code, which runs once the
    view's ``<div>`` is in the document. The page is ~330 kB larger (the two libraries). The view sits in a
    ``<div>`` that scrolls sideways, and its SVG is exempt from the page's ``max-width: 100%`` on SVGs, so a view
    wider than the output (the model view's 12 heads) scrolls instead of being cut off.

    Args:
        page: an ``IPython.display.HTML`` (or its ``.data`` string) from bertviz with ``html_action="return"``.

    Returns:
        a new ``IPython.display.HTML``.

    Raises:
        ValueError: the page is not bertviz's (bertviz changed: the rewrite would not be sure to work).

    No tensors: an HTML object or a str in, an ``IPython.display.HTML`` out.

    Source: bertviz 1.4's page (``head_view(..., html_action="return")``); the course's own: notebook 06.
    """
    from IPython.display import HTML

    data = page if isinstance(page, str) else page.data
    data, n_tags = _CDN_SCRIPT_TAG.subn("", data)
    vis_id = _VIS_ID.search(data)
    if n_tags != 1 or vis_id is None or data.count(_SCRIPT_START) != 1:
        raise ValueError("page is not a bertviz 1.4 page (one require.js <script src> tag, one view <div>, "
                         "one inline script expected)")
    i = data.index(_SCRIPT_START) + len(_SCRIPT_START)
    j = data.rindex("</script>")
    script = _LEADING_COMMENT.sub("", data[i:j], count=1)
    script, n_config = _REQUIRE_CONFIG.subn("", script, count=1)
    if n_config != 1 or "requirejs([" not in script:
        raise ValueError("page's script has no require.config block or requirejs call (not bertviz 1.4)")
    wrapped = (
        "\n(function () {\n" + _inline_libraries()
        + "\nfunction requirejs(names, draw) { draw.apply(null, names.map(function (n) { return attnLibModules[n]; })); }\n"
        # JupyterLab may run an output's script before its HTML is attached to the page: wait for the div.
        + f"(function start(tries) {{ if (!document.getElementById({json.dumps(vis_id.group(1))})) {{\n"
        + "  if (tries < 400) { setTimeout(function () { start(tries + 1); }, 25); } return; }\n"
        + script + "\n})(0);\n})();\n"
    )
    # Fit or scroll, never clip: JupyterLab (and the website's theme) cap an output's <svg> at the output's width
    # (max-width: 100%), but the model view draws its 6 x 12 thumbnails at fixed sizes, so the heads on the right
    # were cut off on a 1366-pixel screen. The cap is lifted for this view's SVG, and the view scrolls sideways.
    root = vis_id.group(1)
    return HTML(f'<div class="attn-lib-bertviz" style="max-width: 100%; overflow-x: auto;">'
                f"<style>#{root} svg {{ max-width: none !important; }}</style>"
                + data[:i] + wrapped + data[j:] + "</div>")


def _bertviz_original(name: str):
    """bertviz's own ``head_view`` / ``model_view`` (from its submodule: :func:`use_offline_bertviz`
    replaces only the package's attributes)."""
    import importlib

    return getattr(importlib.import_module(f"bertviz.{name}"), name)


def _offline_bertviz_function(name: str):
    """``bertviz.<name>`` with its signature, drawing offline and followed by the static figure."""
    import functools as ft

    original = _bertviz_original(name)
    figure_of = {"head_view": head_view_figure, "model_view": model_view_figure}[name]
    options = {"head_view": ("layer", "heads"), "model_view": ("include_layers", "include_heads")}[name]

    @ft.wraps(original)
    def view(*args, html_action: str = "view", **kwargs):
        _check_html_action(html_action)
        page = original(*args, html_action="return", **kwargs)
        figure = None
        attention = kwargs.get("attention", args[0] if args else None)
        tokens = kwargs.get("tokens", args[1] if len(args) > 1 else None)
        if html_action == "view" and attention is not None and tokens is not None:
            chosen = {k: kwargs.get(k) for k in options}
            figure = lambda: figure_of(attention, tokens, **chosen)  # noqa: E731
        return _deliver(offline_page(page), html_action, figure)

    view.__doc__ = (f"bertviz.{name}, made to draw with no network by attn_lib (attn_lib.course.viz.use_offline_bertviz)"
                    " and followed by a static figure.\n\n" + (original.__doc__ or ""))
    view._attn_lib_offline = True
    return view


def use_offline_bertviz() -> None:
    """Make ``bertviz.head_view`` and ``bertviz.model_view`` draw with no network (``attn_lib.setup()`` calls it).

    Their output is then what :func:`head_view` / :func:`model_view` give (scripts inlined, no CDN,
    a static figure after the view), with bertviz's own arguments. If bertviz is not imported yet,
    this only registers an import hook (bertviz takes ~5 s to import, so it is not imported here);
    the functions are replaced when the learner imports bertviz. Idempotent.

    No tensors: no arguments, returns None.

    Raises:
        nothing of its own.

    Source: bertviz 1.4's ``head_view`` / ``model_view`` (patched, with their arguments unchanged);
    the course's own: notebook 06.
    """
    import sys

    module = sys.modules.get("bertviz")
    if module is not None:
        _patch_bertviz(module)
    elif not any(isinstance(f, _BertvizImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _BertvizImportHook())


def _patch_bertviz(module) -> None:
    for name in ("head_view", "model_view"):
        if not getattr(getattr(module, name, None), "_attn_lib_offline", False):
            setattr(module, name, _offline_bertviz_function(name))


class _BertvizImportHook:
    """A ``sys.meta_path`` finder that patches bertviz right after it is first imported, then retires."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "bertviz":
            return None
        import importlib.util
        import sys

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("bertviz")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch_bertviz(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def _deliver(page, html_action: str, figure=None):
    """Show the page (html_action "view"), then the static figure if one is given; or return the page."""
    if html_action == "return":
        return page
    from IPython.display import display

    display(page)
    if figure is not None:
        import matplotlib.pyplot as plt

        fig = figure()
        display(fig)
        plt.close(fig)
    return None


# --------------------------------------------------------------------------------------------
# Notebooks 03 and 04: the d_k/temperature explorer and the mask explorer.
# Logic in plain functions (softmax_temperature_demo, temperature_figure, demo_mask, mask_figure),
# tested in tests/test_attention.py and tests/test_masks.py; the *_explorer functions only wire widgets.
# --------------------------------------------------------------------------------------------
# Widget labels at their natural width: the default (a fixed width) cut "temperature" to "temperat…".
_LABEL_STYLE = {"description_width": "initial"}


def softmax_temperature_demo(d_k: int, temperature: float = 1.0, *, scaled: bool = True,
                             num_keys: int = 8, seed: int = 0) -> dict:
    """One query against ``num_keys`` random keys: how d_k, the 1/sqrt(d_k) scale and a temperature
    shape the softmax.

    q and the keys have i.i.d. N(0, 1) entries of dimension ``d_k`` (so q·k has variance d_k);
    the scores are ``q·k / sqrt(d_k) / temperature`` when ``scaled`` else ``q·k / temperature``.

    Returns:
        dict with ``scores`` and ``weights`` (float64 tensors (num_keys,)), ``max_weight`` (float),
        and ``gradient_norm``: the Frobenius norm of the softmax Jacobian d weights / d scores
        (= diag(p) - p pᵀ, computed with torch.autograd), which goes to 0 as the weights become one-hot.

    Raises:
        ValueError: d_k outside 1..4096, num_keys < 1, or temperature <= 0.

    Source: Vaswani et al. 2017, section 3.2.1 (footnote 4: q·k has variance d_k); d_k, num_keys, seed are
    ints, temperature a float, scaled a bool.
    """
    if isinstance(d_k, bool) or not isinstance(d_k, int) or not 1 <= d_k <= 4096:
        raise ValueError(f"d_k must be an int in 1..4096, got {d_k!r}")
    if isinstance(num_keys, bool) or not isinstance(num_keys, int) or num_keys < 1:
        raise ValueError(f"num_keys must be an int >= 1, got {num_keys!r}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    g = torch.Generator().manual_seed(seed)
    # draw 4096 coordinates and keep the first d_k: a larger d_k adds coordinates to the same vectors
    q = torch.randn(4096, generator=g, dtype=torch.float64)[:d_k]
    keys = torch.randn(num_keys, 4096, generator=g, dtype=torch.float64)[:, :d_k]
    scores = keys @ q  # (num_keys,) q·k_j
    if scaled:
        scores = scores / d_k ** 0.5
    scores = scores / temperature
    jac = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1), scores)  # (N, N)
    weights = torch.softmax(scores, dim=-1)
    return {"scores": scores, "weights": weights, "max_weight": float(weights.max()),
            "gradient_norm": float(torch.linalg.matrix_norm(jac))}


def temperature_figure(d_k: int, temperature: float = 1.0, *, num_keys: int = 8, seed: int = 0):
    """Bar charts of the weights of :func:`softmax_temperature_demo`, without and with 1/sqrt(d_k).

    Each panel's title gives the largest weight and the gradient norm. Returns the matplotlib Figure.

    Args:
        d_k: an int in 1..4096. temperature: a float > 0. num_keys: an int >= 1. seed: an int.
        No tensors in: the weights are (num_keys,) float64 tensors of :func:`softmax_temperature_demo`.

    Raises:
        ValueError: as :func:`softmax_temperature_demo`.

    Source: the course's own: notebook 03; Vaswani et al. 2017, section 3.2.1 (why 1/sqrt(d_k)).
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(8.0, 2.8), sharey=True)
    for ax, scaled in zip(axes, (False, True)):
        demo = softmax_temperature_demo(d_k, temperature, scaled=scaled, num_keys=num_keys, seed=seed)
        ax.bar(range(num_keys), demo["weights"].numpy(), color="#0072B2")
        ax.set_ylim(0, 1)
        ax.set_xlabel("key")
        what = "q·k / sqrt(d_k)" if scaled else "q·k (no scaling)"
        ax.set_title(f"{what}\nmax weight {demo['max_weight']:.2f}, gradient norm {demo['gradient_norm']:.3f}",
                     fontsize=9)
    axes[0].set_ylabel("attention weight")
    fig.suptitle(f"d_k = {d_k}, temperature = {temperature:g}", fontsize=10)
    fig.tight_layout()
    return fig


def temperature_explorer(*, num_keys: int = 8, seed: int = 0):
    """Widget: a d_k selector and a temperature slider redraw :func:`temperature_figure`.

    Returns an ``ipywidgets.VBox``; display it as a cell's last expression.

    No tensors in: num_keys and seed are ints (the weights drawn are (num_keys,) float64).

    Raises:
        ValueError: as :func:`softmax_temperature_demo` (num_keys < 1), on the first draw.

    Source: the course's own: notebook 03.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    d_k_w = widgets.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], value=64,
                                    description="d_k", continuous_update=False)
    temp_w = widgets.FloatLogSlider(value=1.0, base=10, min=-1, max=1, step=0.1, description="temperature",
                                    continuous_update=False, style=_LABEL_STYLE)
    out = widgets.Output()

    def show(_change=None):
        with out:
            out.clear_output(wait=True)
            fig = temperature_figure(d_k_w.value, temp_w.value, num_keys=num_keys, seed=seed)
            display(fig)
            plt.close(fig)

    d_k_w.observe(show, names="value")
    temp_w.observe(show, names="value")
    show()
    return widgets.VBox([widgets.HBox([d_k_w, temp_w]), out])


#: Mask kinds of the notebook-04 mask explorer.
MASK_KINDS = ("none", "causal top-left", "causal bottom-right")


def demo_mask(kind: str, q_len: int, kv_len: int, *, num_padding: int = 0) -> torch.Tensor:
    """The bool (q_len, kv_len) mask (True = may attend) the mask explorer shows.

    Args:
        kind: one of :data:`MASK_KINDS`: no causal mask, or ``attn_lib.masks.causal_mask`` aligned
            top-left or bottom-right.
        q_len, kv_len: numbers of queries and keys.
        num_padding: the last ``num_padding`` keys are padding (masked for every query), combined with
            the causal part by AND.

    Raises:
        ValueError: unknown kind, or num_padding outside 0..kv_len.

    Shapes: returns (L, S) = (q_len, kv_len), bool. Types: kind a str; q_len, kv_len, num_padding ints.
    Also TypeError / ValueError from :func:`attn_lib.masks.causal_mask` (a length not an int >= 0).

    Source: the course's own: notebook 04; ``attn_lib.masks.causal_mask`` (torch's is_causal / FlashAttention-2's
    bottom-right).
    """
    from attn_lib.masks import causal_mask, padding_mask

    if kind not in MASK_KINDS:
        raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
    if isinstance(num_padding, bool) or not isinstance(num_padding, int) or not 0 <= num_padding <= kv_len:
        raise ValueError(f"num_padding must be an int in 0..kv_len={kv_len}, got {num_padding!r}")
    if kind == "none":
        mask = torch.ones(q_len, kv_len, dtype=torch.bool)
    else:
        mask = causal_mask(q_len, kv_len, align=kind.split()[1].replace("-", "_"))
    real_keys = padding_mask([kv_len - num_padding], kv_len)  # (1, kv_len)
    return mask & real_keys


def mask_figure(kind: str, q_len: int, kv_len: int, *, num_padding: int = 0, seed: int = 0):
    """Two heatmaps: the mask of :func:`demo_mask` and the weights of attention with it.

    The weights come from :func:`attn_lib.attention.scaled_dot_product_attention` on random
    queries and keys (seeded); a fully masked query row shows weights 0. Returns the Figure.

    Args:
        kind: a str of :data:`MASK_KINDS`. q_len, kv_len: ints (L, S). num_padding, seed: ints.
        Draws the (L, S) bool mask and the (L, S) float32 weights of random (L, 16) queries and (S, 16) keys.

    Raises:
        TypeError / ValueError: as :func:`demo_mask`.

    Source: the course's own: notebook 04.
    """
    import matplotlib.pyplot as plt

    from attn_lib.attention import scaled_dot_product_attention

    mask = demo_mask(kind, q_len, kv_len, num_padding=num_padding)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(q_len, 16, generator=g), torch.randn(kv_len, 16, generator=g)
    _, weights = scaled_dot_product_attention(q, k, k, mask)
    empty = int((~mask).all(-1).sum())
    fig, (ax_m, ax_w) = plt.subplots(1, 2, figsize=(8.0, 3.2))
    from matplotlib.colors import ListedColormap

    ax_m.imshow(mask.numpy(), cmap=ListedColormap(MASK_COLORS), vmin=0, vmax=1)
    ax_m.set_title("mask (blue = may attend, grey = blocked)", fontsize=9)
    im = ax_w.imshow(weights.numpy(), cmap="viridis", vmin=0, vmax=1)
    ax_w.set_title("attention weights" + (f" ({empty} row(s) fully masked: 0)" if empty else ""), fontsize=9)
    for ax in (ax_m, ax_w):
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        ax.set_xticks(range(kv_len))
        ax.set_yticks(range(q_len))
    fig.colorbar(im, ax=ax_w, fraction=0.046, pad=0.04)
    fig.suptitle(f"{kind}, {q_len} queries, {kv_len} keys, {num_padding} padded", fontsize=10)
    fig.tight_layout()
    return fig


def mask_explorer(*, seed: int = 0):
    """Widget: choose the mask kind, the numbers of queries and keys and of padded keys; see
    :func:`mask_figure`. Returns an ``ipywidgets.VBox``.

    No tensors in: seed is an int; the figures show (L, S) bool masks and float32 weights.

    Raises:
        nothing of its own (the sliders keep every value valid).

    Source: the course's own: notebook 04.
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    kind_w = widgets.Dropdown(options=list(MASK_KINDS), value="causal top-left", description="mask", style=_LABEL_STYLE)
    q_w = widgets.IntSlider(value=4, min=1, max=10, description="queries", continuous_update=False, style=_LABEL_STYLE)
    kv_w = widgets.IntSlider(value=6, min=1, max=10, description="keys", continuous_update=False, style=_LABEL_STYLE)
    pad_w = widgets.IntSlider(value=0, min=0, max=6, description="padded keys", continuous_update=False, style=_LABEL_STYLE)
    out = widgets.Output()

    def show(_change=None):
        pad_w.max = kv_w.value
        with out:
            out.clear_output(wait=True)
            fig = mask_figure(kind_w.value, q_w.value, kv_w.value, num_padding=min(pad_w.value, kv_w.value), seed=seed)
            display(fig)
            plt.close(fig)

    for w in (kind_w, q_w, kv_w, pad_w):
        w.observe(show, names="value")
    show()
    return widgets.VBox([widgets.HBox([kind_w, q_w]), widgets.HBox([kv_w, pad_w]), out])


# ---------------------------------------------------------------------------------------------
# notebook 09: one step of the online softmax
# ---------------------------------------------------------------------------------------------
def plot_online_softmax_step(scores: torch.Tensor, values: torch.Tensor, block_k: int, step: int, *, ax=None):
    """Draw the online softmax of one query row after ``step`` blocks (the widget's figure).

    Left: the scores as bars, blocks already seen coloured, the running max as a line. Right: the
    running output ``acc / l`` after this step next to the exact softmax output over all keys.

    Args:
        scores: (S,), values: (S, Ev) as in :func:`online_softmax_trace` (float32 or float64).
        block_k: keys per block; step: 0-based index of the block just processed (ints).
        ax: optional pair of matplotlib Axes; created when None.

    Returns:
        The pair of Axes.

    Raises:
        TypeError: ``step`` not an int; what :func:`online_softmax_trace` raises for the other arguments.
        ValueError: ``step`` outside 0..number of blocks - 1.

    Source: the online softmax of Milakov & Gimelshein (2018), Algorithm 3, as FlashAttention-2 runs it per tile.
    """
    import matplotlib.pyplot as plt

    from attn_lib.tiled import online_softmax_trace

    trace = online_softmax_trace(scores, values, block_k)
    check_int("step", step, minimum=0, maximum=len(trace) - 1)
    st = trace[step]
    if ax is None:
        _, ax = plt.subplots(1, 2, figsize=(9, 3.2), gridspec_kw={"width_ratios": [3, 2]})
    a0, a1 = ax
    a0.clear()
    a1.clear()
    s = scores.detach().double()
    colours = [PALETTE[0] if c < st.start else PALETTE[1] if c < st.stop else "#BBBBBB" for c in range(len(s))]
    a0.bar(range(len(s)), s.tolist(), color=colours)
    a0.axhline(st.m, color=PALETTE[5], linestyle="--", label=f"running max m = {st.m:.3f}")
    a0.set_xlabel("key position")
    a0.set_ylabel("score")
    a0.set_title(f"block {st.tile}: keys {st.start}..{st.stop - 1}   l = {st.l:.3f}   rescale = {st.rescale:.3f}")
    a0.legend(loc="lower right", fontsize=8)
    exact = torch.softmax(s, dim=0) @ values.detach().double()
    x = torch.arange(values.shape[1])
    a1.bar(x - 0.2, st.output.tolist(), width=0.4, color=PALETTE[1], label="running acc / l")
    a1.bar(x + 0.2, exact.tolist(), width=0.4, color=PALETTE[2], label="softmax over all keys")
    a1.set_xlabel("output dimension")
    a1.set_title("output so far vs final")
    a1.legend(loc="best", fontsize=8)
    return ax


# ---------------------------------------------------------------------------------------------------------------
# Small matrices with their numbers: notebook 05 carries notebook 03's three tokens through multi-head attention.
# ---------------------------------------------------------------------------------------------------------------

__all__ += ["matrix_steps_figure"]

_PANEL_KEYS = {"name", "values", "rows", "cols", "heads", "first_head", "head_axis", "heat"}
_CELL = 0.42  # inches per matrix cell
_OP = 0.42  # inches for an operator between two panels


def _check_panel(where: str, panel) -> dict:
    if not isinstance(panel, dict) or not set(panel) <= _PANEL_KEYS or "values" not in panel:
        raise TypeError(f"{where} must be a str (an operator such as '@') or a dict with 'values' and optional keys "
                        f"{sorted(_PANEL_KEYS - {'values'})}, got {panel!r}"[:300])
    try:
        values = torch.as_tensor(panel["values"]).detach().to("cpu", torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{where}['values'] must be a 2-D tensor or array of numbers, "
                        f"got {type(panel['values']).__name__}") from None
    if values.dim() != 2 or not (1 <= values.shape[0] <= 8 and 1 <= values.shape[1] <= 8):
        raise ValueError(f"{where}['values'] must be a 2-D matrix of 1 to 8 rows and columns, got shape "
                         f"{tuple(values.shape)}")
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{where}['values'] must be finite numbers (they are printed in the cells)")
    out = {"values": values, "name": panel.get("name", "")}
    if not isinstance(out["name"], str):
        raise TypeError(f"{where}['name'] must be a str, got {type(out['name']).__name__}")
    for key, n in (("rows", values.shape[0]), ("cols", values.shape[1])):
        labels = panel.get(key)
        if labels is not None:
            labels = _check_tokens(f"{where}['{key}']", labels)
            if len(labels) != n:
                raise ValueError(f"{where}['{key}'] must hold {n} labels (one per {key[:-1]}), got {len(labels)}")
        out[key] = labels
    out["heads"] = check_int(f"{where}['heads']", panel.get("heads", 0), minimum=0, maximum=6)
    out["first_head"] = check_int(f"{where}['first_head']", panel.get("first_head", 0), minimum=0,
                                  maximum=6 - max(out["heads"], 1))
    axis = panel.get("head_axis", "cols")
    if axis not in ("rows", "cols"):
        raise ValueError(f"{where}['head_axis'] must be 'rows' or 'cols', got {axis!r}")
    out["head_axis"] = axis
    if out["heads"]:
        n = values.shape[1] if axis == "cols" else values.shape[0]
        if n % out["heads"]:
            raise ValueError(f"{where}['heads'] = {out['heads']} must divide the {n} {axis} (equal blocks, one per "
                             "head)")
    out["heat"] = check_bool(f"{where}['heat']", panel.get("heat", False))
    return out


def _number(v: float) -> str:
    r = round(v)
    return str(int(r)) if abs(v - r) < 5e-4 else f"{v:.2f}"


def matrix_steps_figure(rows, *, title: str | None = None):
    """Small matrices with every number printed, in rows of ``panel op panel op ...``: one step of a computation.

    Each row is a list whose items are panels (dicts) or operators (str, such as ``"@"``, ``"="`` or ``"→"``)
    drawn between them. A panel draws ``values`` (a 2-D matrix (R, C), 1 to 8 rows and columns, any real dtype,
    drawn as float64) cell by cell with its
    numbers (integers as such, others with 2 decimals) and optional ``name`` above, ``rows`` labels on the left,
    ``cols`` labels above. ``heads = H`` tints the columns (or, with ``head_axis="rows"``, the rows) in H equal
    blocks, block h in ``PALETTE[first_head + h]`` (``first_head`` 0 unless given: a panel holding head 1 alone is
    ``heads=1, first_head=1``), so a head's features keep their colour from figure to figure; ``heat=True``
    shades each cell by its value in viridis from 0 to 1 (attention weights). Untinted cells are light grey.

    Args:
        rows: a list of 1 to 4 rows, each a list of 1 to 9 items (panels and operators).
        title: an optional str drawn above the figure.

    Returns:
        a matplotlib Figure, colours from :data:`PALETTE` and :data:`SEQUENTIAL_CMAP`.

    Raises:
        TypeError: rows not a list of lists; an item neither a str nor a panel dict; values not numbers; labels
            not str; a non-bool ``heat``; a non-str title.
        ValueError: an empty row, a row of more than 9 items, values not 2-D or larger than 8 × 8 or not finite,
            label counts that differ from the matrix, ``heads`` outside 0..6 or not dividing the blocked axis,
            ``first_head + heads`` above 6, a
            ``head_axis`` other than "rows" or "cols".

    Source: the course's own drawing (notebook 05, after notebook 03's worked example), in the style of the
    step-by-step matrix figures of Raschka (2024), *Build a Large Language Model (From Scratch)*, chapter 3.
    """
    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, (list, tuple)) for r in rows):
        raise TypeError(f"rows must be a list of rows, each a list of panels and operators, got {rows!r}"[:200])
    if not 1 <= len(rows) <= 4:
        raise ValueError(f"rows must hold 1 to 4 rows, got {len(rows)}")
    if title is not None and not isinstance(title, str):
        raise TypeError(f"title must be a str or None, got {type(title).__name__}")
    checked = []
    for r, row in enumerate(rows):
        if not 1 <= len(row) <= 9:
            raise ValueError(f"rows[{r}] must hold 1 to 9 items, got {len(row)}")
        checked.append([item if isinstance(item, str) else _check_panel(f"rows[{r}][{i}]", item)
                        for i, item in enumerate(row)])

    def panel_width(p):
        return p["values"].shape[1] * _CELL + (0.62 if p["rows"] else 0.0)

    def item_width(item):
        return _OP if isinstance(item, str) else panel_width(item)

    def row_height(row):
        panels = [p for p in row if not isinstance(p, str)]
        n = max(p["values"].shape[0] for p in panels) if panels else 1
        return n * _CELL + 0.62  # the name and the column labels above

    width = max(0.3 + sum(item_width(i) + 0.12 for i in row) for row in checked) + 0.2
    heights = [row_height(row) for row in checked]
    top = 0.45 if title else 0.1
    height = sum(heights) + 0.15 * (len(heights) - 1) + top + 0.1
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0.0, width)
    ax.set_ylim(0.0, height)
    ax.set_axis_off()
    heat = colormaps[SEQUENTIAL_CMAP]
    if title:
        ax.text(0.15, height - 0.25, title, ha="left", va="center", fontsize=10)
    y_top = height - top
    for row, h in zip(checked, heights):
        x = 0.3
        grid_top = y_top - 0.55
        for item in row:
            if isinstance(item, str):
                ax.text(x + _OP / 2, grid_top - _CELL * 1.2, item, ha="center", va="center", fontsize=12)
                x += _OP + 0.12
                continue
            v, n_rows, n_cols = item["values"], item["values"].shape[0], item["values"].shape[1]
            x0 = x + (0.62 if item["rows"] else 0.0)
            ax.text(x0 + n_cols * _CELL / 2, y_top - 0.12, item["name"], ha="center", va="center", fontsize=9)
            for i in range(n_rows):
                for j in range(n_cols):
                    value = float(v[i, j])
                    if item["heat"]:
                        face, alpha = heat(min(max(value, 0.0), 1.0)), 1.0
                        ink = "white" if value < 0.55 else PALETTE[7]
                    elif item["heads"]:
                        n = n_cols if item["head_axis"] == "cols" else n_rows
                        block = (j if item["head_axis"] == "cols" else i) // (n // item["heads"])
                        face, alpha, ink = PALETTE[item["first_head"] + block], 0.32, PALETTE[7]
                    else:
                        face, alpha, ink = "#DDDDDD", 0.6, PALETTE[7]
                    y0 = grid_top - (i + 1) * _CELL
                    ax.add_patch(Rectangle((x0 + j * _CELL, y0), _CELL, _CELL, facecolor=face, alpha=alpha,
                                           edgecolor="white", linewidth=1.0))
                    ax.text(x0 + (j + 0.5) * _CELL, y0 + _CELL / 2, _number(value), ha="center", va="center",
                            fontsize=8, color=ink)
            if item["rows"]:
                for i, label in enumerate(item["rows"]):
                    ax.text(x0 - 0.06, grid_top - (i + 0.5) * _CELL, label, ha="right", va="center", fontsize=8)
            if item["cols"]:
                for j, label in enumerate(item["cols"]):
                    ax.text(x0 + (j + 0.5) * _CELL, grid_top + 0.1, label, ha="center", va="bottom", fontsize=8)
            x = x0 + n_cols * _CELL + 0.12
        y_top -= h + 0.15
    return fig
