"""Figures of attention weights: heatmaps (matplotlib), widgets (ipywidgets), bertviz views.

All colours are colour-blind safe: :data:`PALETTE` (Okabe & Ito 2008) for lines and bars,
:data:`SEQUENTIAL_CMAP` (viridis) for weights, :data:`DIVERGING_CMAP` (PuOr) for signed values.
They are defined once, in ``attn_lib._setup`` (which :func:`attn_lib.setup` uses for matplotlib's
defaults), and public here. Over 400 lines: one module for every figure and widget the
notebooks show, each a few short functions; splitting it would scatter the colour rules. Shapes use the legend of :mod:`attn_lib.attention` (L queries, S keys).
"""

from __future__ import annotations

from typing import Sequence

import torch

from attn_lib._checks import check_bool, check_int, check_number
from attn_lib._setup import DIVERGING_CMAP, PALETTE, SEQUENTIAL_CMAP

__all__ = [
    "PALETTE", "SEQUENTIAL_CMAP", "DIVERGING_CMAP", "plot_attention", "attention_stack", "select_head",
    "head_options", "explorer_figure", "attention_explorer", "head_view", "model_view",
    "softmax_temperature_demo", "temperature_figure", "temperature_explorer", "demo_mask", "mask_figure",
    "mask_explorer",
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
# explorer_figure) that tests/test_viz.py calls directly; attention_explorer only wires widgets.
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
    """
    check_int("num_heads", num_heads, minimum=1)
    return [("mean of heads", None)] + [(f"head {h}", h) for h in range(num_heads)]


def explorer_figure(stack: torch.Tensor, tokens: Sequence[str], layer: int, head: int | None, *,
                    key_tokens: Sequence[str] | None = None, annotate: bool = False):
    """The heatmap the explorer shows for (layer, head): :func:`plot_attention` with a title."""
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
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    stack = attention_stack(attentions, batch_index=batch_index)
    _check_token_counts(stack, tokens, key_tokens)
    layers, heads = stack.shape[:2]
    layer_w = widgets.IntSlider(value=0, min=0, max=layers - 1, description="layer", continuous_update=False)
    head_w = widgets.Dropdown(options=head_options(heads), value=0, description="head")
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


def head_view(attentions, tokens: Sequence[str], *, batch_index: int = 0, html_action: str = "view", **kwargs):
    """bertviz's head view (Vig 2019) of one sentence, after checking the input.

    Lines from each token to the tokens it attends to, one colour per head, one layer at a time.
    The view loads require.js and d3 from a CDN, so it needs internet in the browser;
    :func:`attention_explorer` works offline. Unlike calling bertviz directly, the view also draws
    on a first "Run All" in JupyterLab (see :func:`_wait_for_require`).

    Args:
        attentions: ``outputs.attentions`` (tuple of num_layers (B, H, L, L)) or (layers, H, L, L).
        tokens: the L tokens of the sentence (special tokens included).
        batch_index: which sentence of the batch (bertviz shows one).
        html_action: ``"view"`` displays it; ``"return"`` returns an ``IPython.display.HTML`` whose
            ``.data`` is the whole page (save it to a file, or test it). The weights in the page are
            rounded to 4 decimals.
        **kwargs: passed to ``bertviz.head_view`` (``layer``, ``heads``, ``include_layers``,
            ``sentence_b_start``, ``prettify_tokens``).

    Raises:
        ValueError: an empty tuple of attentions (the message says to load the model with eager
            attention); a token count that does not match the attention size (names both);
            an unknown html_action.
    """
    from bertviz import head_view as _head_view

    _check_html_action(html_action)
    page = _head_view(_bertviz_input(attentions, tokens, batch_index=batch_index), list(tokens),
                      html_action="return", **kwargs)
    return _deliver(_wait_for_require(page), html_action)


def model_view(attentions, tokens: Sequence[str], *, batch_index: int = 0, html_action: str = "view",
               display_mode: str = "light", **kwargs):
    """bertviz's model view of one sentence (a grid: one small view per layer and head), after checking the input.

    Needs internet in the browser for its scripts, like :func:`head_view`. Arguments, return value
    and errors as :func:`head_view`; ``display_mode`` is ``"light"`` or ``"dark"``; other keyword
    arguments (``include_layers``, ``include_heads``, ``sentence_b_start``) go to ``bertviz.model_view``.
    """
    from bertviz import model_view as _model_view

    _check_html_action(html_action)
    if display_mode not in ("light", "dark"):
        raise ValueError(f"display_mode must be 'light' or 'dark', got {display_mode!r}")
    page = _model_view(_bertviz_input(attentions, tokens, batch_index=batch_index), list(tokens),
                       html_action="return", display_mode=display_mode, **kwargs)
    return _deliver(_wait_for_require(page), html_action)


def _wait_for_require(page):
    """Make bertviz's inline script wait until require.js has loaded.

    bertviz puts a ``<script src=...require.js>`` tag and then its own inline script, which calls
    ``require`` at once. In JupyterLab the inline script runs before the CDN answers, and the view
    stays blank with "require is not defined" (bertviz issue #53). Wrapping the inline script in a
    function that retries every 50 ms until ``require`` exists fixes it. Returns a new
    ``IPython.display.HTML``.
    """
    from IPython.display import HTML

    start = '<script type="text/javascript">'
    data = page.data
    i = data.index(start) + len(start)
    j = data.rindex("</script>")
    wrapped = (data[:i] + "\n(function draw() { if (typeof require === 'undefined') { setTimeout(draw, 50); return; }\n"
               + data[i:j] + "\n})();\n" + data[j:])
    return HTML(wrapped)


def _deliver(page, html_action: str):
    """Show the page (html_action "view") or return it ("return")."""
    if html_action == "return":
        return page
    from IPython.display import display

    display(page)
    return None


# --------------------------------------------------------------------------------------------
# Notebooks 03 and 04: the d_k/temperature explorer and the mask explorer.
# Logic in plain functions (softmax_temperature_demo, temperature_figure, demo_mask, mask_figure),
# tested in tests/test_attention.py and tests/test_masks.py; the *_explorer functions only wire widgets.
# --------------------------------------------------------------------------------------------
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
    """
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    d_k_w = widgets.SelectionSlider(options=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], value=64,
                                    description="d_k", continuous_update=False)
    temp_w = widgets.FloatLogSlider(value=1.0, base=10, min=-1, max=1, step=0.1, description="temperature",
                                    continuous_update=False)
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
    """
    import matplotlib.pyplot as plt

    from attn_lib.attention import scaled_dot_product_attention

    mask = demo_mask(kind, q_len, kv_len, num_padding=num_padding)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(q_len, 16, generator=g), torch.randn(kv_len, 16, generator=g)
    _, weights = scaled_dot_product_attention(q, k, k, mask)
    empty = int((~mask).all(-1).sum())
    fig, (ax_m, ax_w) = plt.subplots(1, 2, figsize=(8.0, 3.2))
    ax_m.imshow(mask.numpy(), cmap="gray", vmin=0, vmax=1)
    ax_m.set_title("mask (white = may attend)", fontsize=9)
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
    :func:`mask_figure`. Returns an ``ipywidgets.VBox``."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    kind_w = widgets.Dropdown(options=list(MASK_KINDS), value="causal top-left", description="mask")
    q_w = widgets.IntSlider(value=4, min=1, max=10, description="queries", continuous_update=False)
    kv_w = widgets.IntSlider(value=6, min=1, max=10, description="keys", continuous_update=False)
    pad_w = widgets.IntSlider(value=0, min=0, max=6, description="padded keys", continuous_update=False)
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
