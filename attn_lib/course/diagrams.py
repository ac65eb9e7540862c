"""Drawn schematics of the machinery (matplotlib): no data, only boxes, arrows and labelled shapes.

Each function returns a :class:`matplotlib.figure.Figure` drawn in :data:`attn_lib.course.style.PALETTE` (Okabe & Ito,
colour-blind safe), readable at 110 dpi. A notebook shows the figure and, beside it, a sentence that says in
words what the figure draws. The shapes use attn_lib's letters (the legend of :mod:`attn_lib.attention`: B, H,
Hkv, L, S, E, Ev; d_model, num_heads, head_dim).

Sections: the diagrams of notebooks 03-05 (data flow, masks, heads, blocks) and those of notebooks 08-09 (the KV
cache, the tiling loop).
"""

from __future__ import annotations

from attn_lib._checks import check_int
from attn_lib.course.style import MASK_COLORS, PALETTE  # noqa: F401  used by the drawing functions

__all__: list[str] = []


# ---------------------------------------------------------------------------------------------------------------
# Notebooks 03-05: the Q/K/V data flow, the mask shapes, the head split, pre-LN against post-LN.
# ---------------------------------------------------------------------------------------------------------------

__all__ += ["MIN_FONT_SIZE", "qkv_flow_figure", "mask_shapes_figure", "head_split_figure", "transformer_block_figure"]

#: The smallest font size (points) any text of these diagrams uses: readable at 110 dpi, the notebooks' size.
MIN_FONT_SIZE = 8.0

_FONT = 9.0  # box labels
_TITLE = 10.0  # titles
_BLOCKED = MASK_COLORS[0]  # a blocked mask cell: light grey (True cells are MASK_COLORS[1], blue)


def _inch_canvas(width: float, height: float):
    """A figure of ``width`` x ``height`` inches whose one axes measures in inches (no ticks, no frame)."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0.0, width)
    ax.set_ylim(0.0, height)
    ax.set_axis_off()
    return fig, ax


def _box(ax, cx: float, cy: float, w: float, h: float, text: str, colour: str, *, fontsize: float = _FONT):
    """A rounded box centred at (cx, cy), filled with a light tint of ``colour``, its label in black."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((cx - w / 2, cy - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.06",
                                facecolor=colour, alpha=0.28, edgecolor="none"))
    ax.add_patch(FancyBboxPatch((cx - w / 2, cy - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.06",
                                facecolor="none", edgecolor=colour, linewidth=1.4))
    ax.text(cx, cy, text, ha="center", va="center", fontsize=fontsize, color=PALETTE[7], linespacing=1.25)


def _arrow(ax, start, end, *, colour: str = PALETTE[7], style: str = "-|>", connection: str = "arc3"):
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle=style, color=colour, linewidth=1.2,
                                                          shrinkA=0, shrinkB=0, connectionstyle=connection))


def qkv_flow_figure(seq_len: int = 7, d_model: int = 8, d_k: int = 4, d_v: int | None = None):
    """The data flow of one attention head (self-attention), every tensor labelled with its shape.

    x (L, d_model) is multiplied by W_Q, W_K (d_model, E) and W_V (d_model, Ev) into Q (L, E), K (S, E) and
    V (S, Ev) (S = L: the keys are the same tokens); the scores Q Kᵀ / √E are (L, S); the softmax over the keys
    turns them into weights (L, S) whose rows sum to 1; weights @ V is the output (L, Ev). Each label gives the
    letters and the numbers for the arguments (E = d_k, Ev = d_v). No tensors are computed: it is a drawing.

    Args:
        seq_len: L (= S), an int in [1, 9999]. d_model: an int in [1, 9999]. d_k: E, an int in [1, 9999].
        d_v: Ev, an int in [1, 9999], or None for d_k.

    Returns:
        a matplotlib Figure, 8 x 3.6 inches, colours from :data:`attn_lib.course.style.PALETTE`.

    Raises:
        TypeError: an argument that is not an int (``d_v`` may be None).
        ValueError: an int out of its range.

    Source: Vaswani et al. (2017), "Attention Is All You Need", §3.2.1 and Figure 2 (left); the course's own
    drawing (notebook 03).
    """
    L = check_int("seq_len", seq_len, minimum=1, maximum=9999)
    D = check_int("d_model", d_model, minimum=1, maximum=9999)
    E = check_int("d_k", d_k, minimum=1, maximum=9999)
    Ev = E if d_v is None else check_int("d_v", d_v, minimum=1, maximum=9999)
    blue, orange, green, purple, _sky, vermillion = PALETTE[:6]
    fig, ax = _inch_canvas(8.0, 3.6)
    col = [0.56 + 1.145 * i for i in range(7)]
    w, h = 1.0, 0.8
    top, mid, low = 2.72, 1.72, 0.72
    _box(ax, col[0], mid, w, h, f"x\n(L, d_model)\n({L}, {D})", PALETTE[7])
    rows = (("Q", "E", top, blue), ("K", "E", mid, orange), ("V", "Ev", low, green))
    for name, width_letter, y, colour in rows:
        n = E if width_letter == "E" else Ev
        _box(ax, col[1], y, w, h, f"W_{name}\n(d_model, {width_letter})\n({D}, {n})", colour)
        _arrow(ax, (col[0] + w / 2, mid), (col[1] - w / 2, y))
        seq = "L" if name == "Q" else "S"
        _box(ax, col[2], y, w, h, f"{name} = x W_{name}\n({seq}, {width_letter})\n({L}, {n})", colour)
        _arrow(ax, (col[1] + w / 2, y), (col[2] - w / 2, y))
    sy = (top + mid) / 2
    _box(ax, col[3], sy, w, h, f"scores\nQ Kᵀ / √E\n(L, S)\n({L}, {L})", purple)
    _arrow(ax, (col[2] + w / 2, top), (col[3] - w / 2, sy + 0.15))
    _arrow(ax, (col[2] + w / 2, mid), (col[3] - w / 2, sy - 0.15))
    _box(ax, col[4], sy, w, h, f"weights =\nsoftmax (keys)\n(L, S)\n({L}, {L})", purple)
    _arrow(ax, (col[3] + w / 2, sy), (col[4] - w / 2, sy))
    oy = 1.22
    _box(ax, col[5], oy, w, h, "weights @ V\n(L, S) (S, Ev)", vermillion)
    _arrow(ax, (col[4], sy - h / 2), (col[5] - w / 2, oy + 0.15))
    _arrow(ax, (col[2] + w / 2, low), (col[5] - w / 2, oy - 0.15))
    _box(ax, col[6], oy, w, h, f"output\n(L, Ev)\n({L}, {Ev})", vermillion)
    _arrow(ax, (col[5] + w / 2, oy), (col[6] - w / 2, oy))
    ax.text(0.06, 3.42, f"one attention head: L = {L} queries, S = L = {L} keys (self-attention), "
            f"E = d_k = {E}, Ev = d_v = {Ev}", ha="left", va="center", fontsize=_TITLE)
    ax.text(col[4], 0.62, "each row of the weights\nsums to 1", ha="center", va="center", fontsize=MIN_FONT_SIZE,
            color=PALETTE[7], style="italic")
    return fig


def _mask_grid(ax, mask, title: str, *, row_label: str, col_label: str = "key j", row_ticks=None):
    """Draw a bool (rows, cols) mask as cells: True blue with "1", False grey with "0"."""
    from matplotlib.colors import ListedColormap

    m = mask.to(dtype=__import__("torch").int64)
    rows, cols = m.shape
    ax.imshow(m.numpy(), cmap=ListedColormap(MASK_COLORS), vmin=0, vmax=1, aspect="equal")
    for i in range(rows):
        for j in range(cols):
            ax.text(j, i, "1" if m[i, j] else "0", ha="center", va="center", fontsize=MIN_FONT_SIZE,
                    color="white" if m[i, j] else PALETTE[7])
    ax.set_xticks(range(cols), [str(j) for j in range(cols)], fontsize=MIN_FONT_SIZE)
    ax.set_yticks(range(rows), row_ticks or [str(i) for i in range(rows)], fontsize=MIN_FONT_SIZE)
    ax.tick_params(length=0, pad=3)
    ax.set_xlabel(col_label, fontsize=MIN_FONT_SIZE, labelpad=3)
    ax.set_ylabel(row_label, fontsize=MIN_FONT_SIZE, labelpad=4)
    ax.set_title(title, fontsize=_FONT, pad=4)
    for spine in ax.spines.values():
        spine.set_visible(False)


def mask_shapes_figure(lengths=(4, 2)):
    """The shapes of attn_lib's masks for a right-padded batch, drawn cell by cell (1 = True = may attend).

    Left: the causal mask (L, S), True on and below the diagonal (key j <= query i); below it the padding mask
    (B, S), True on the real tokens. Middle: the padding mask viewed as (B, 1, 1, S) broadcasts over the L
    queries (and the heads) to (B, 1, L, S): every query row of sentence b blocks the same padded keys. Right:
    both combined with ``&`` (B, 1, L, S): causal AND real. One convention throughout: True = may attend /
    real token, the convention of :mod:`attn_lib.masks`, of torch's bool ``attn_mask`` and of HuggingFace's
    ``attention_mask``. The masks drawn are computed by :func:`attn_lib.masks.causal_mask` and
    :func:`attn_lib.masks.padding_mask` (bool tensors).

    Args:
        lengths: the real lengths of the B sentences, a list or tuple of 1 to 3 ints in [0, S], where
            S = L = max(lengths), which must be in [1, 8].

    Returns:
        a matplotlib Figure, 8 inches wide, colours from :data:`attn_lib.course.style.PALETTE`.

    Raises:
        TypeError: ``lengths`` not a list or tuple of ints.
        ValueError: no length, more than 3, a negative one, or a longest length outside [1, 8].

    Source: the course's own drawing (notebook 04); the convention of torch's
    ``scaled_dot_product_attention`` (bool ``attn_mask``, True = take part in attention).
    """
    import matplotlib.pyplot as plt

    from attn_lib.masks import causal_mask, padding_mask

    if not isinstance(lengths, (list, tuple)):
        raise TypeError(f"lengths must be a list or tuple of ints (the real length of each sentence), "
                        f"got {type(lengths).__name__} {lengths!r}"[:200])
    if not 1 <= len(lengths) <= 3:
        raise ValueError(f"lengths must hold 1 to 3 lengths (one per sentence drawn), got {len(lengths)}")
    lengths = [check_int(f"lengths[{b}]", n, minimum=0) for b, n in enumerate(lengths)]
    S = max(lengths)
    if not 1 <= S <= 8:
        raise ValueError(f"the longest of lengths must be in [1, 8] (the cells are drawn one by one), got {S}")
    B, L = len(lengths), S
    causal = causal_mask(L, S)  # (L, S)
    pad = padding_mask(lengths, S)  # (B, S)
    broadcast = pad[:, None, None, :].expand(B, 1, L, S)  # (B, 1, L, S)
    combined = pad[:, None, None, :] & causal  # (B, 1, L, S)
    rows = max(B, 2)
    height = 1.1 + 1.75 * rows
    fig = plt.figure(figsize=(8.0, height))
    grid = fig.add_gridspec(rows, 3, left=0.08, right=0.99, top=1 - 0.9 / height, bottom=0.45 / height,
                            wspace=0.3, hspace=0.85)
    _mask_grid(fig.add_subplot(grid[0, 0]), causal, f"causal_mask(L, S): ({L}, {S})", row_label="query i")
    _mask_grid(fig.add_subplot(grid[1, 0]), pad, f"padding_mask(lengths): ({B}, {S}), 1 = real", row_label="sentence b",
               col_label="token j")
    for b in range(B):
        _mask_grid(fig.add_subplot(grid[b, 1]), broadcast[b, 0], f"padding as (B, 1, L, S), b = {b}",
                   row_label="query i")
        _mask_grid(fig.add_subplot(grid[b, 2]), combined[b, 0], f"padding & causal, b = {b}", row_label="query i")
    fig.text(0.01, 1 - 0.3 / height,
             f"lengths {lengths}: 1 = True = may attend / real token, 0 = False = blocked (B = {B}, L = S = {S})",
             ha="left", va="center", fontsize=_TITLE)
    return fig


def head_split_figure(d_model: int = 8, num_heads: int = 2, tokens=("the", "cat", "sat")):
    """Splitting into heads and merging back, for a batch of one sentence, with every shape labelled.

    Left: x (B, L, d_model), one row per token, one cell per feature, coloured by the head it goes to and
    numbered as ``torch.arange(L * d_model).view(1, L, d_model)`` holds it: token i's feature f is
    i·d_model + f, so every number appears once and each can be followed through the reshapes. Middle: ``view(B, L, H, E)`` cuts each row into H blocks of E = d_model / H features (no data moves).
    Right: ``transpose(1, 2)`` gives (B, H, L, E): head h owns an (L, E) matrix of features h·E .. (h+1)·E - 1.
    The arrow back is the merge, ``transpose(1, 2)`` then ``reshape(B, L, H·E)``, with H·E = d_model. The same
    steps as :func:`attn_lib.mha.split_heads` and :func:`attn_lib.mha.merge_heads` (no tensors are computed).

    Args:
        d_model: an int in [1, 12]. num_heads: H, an int in [1, 6] that divides d_model.
        tokens: the L row labels, a list or tuple of 1 to 4 str.

    Returns:
        a matplotlib Figure, at most 8.6 inches wide, colours from :data:`attn_lib.course.style.PALETTE`.

    Raises:
        TypeError: a non-int d_model or num_heads, or tokens not a list or tuple of str.
        ValueError: out of range, or num_heads not dividing d_model.

    Source: Vaswani et al. (2017), §3.2.2 (multi-head attention); the reshape of torch's
    ``torch.nn.MultiheadAttention``; the course's own drawing (notebook 05).
    """
    D = check_int("d_model", d_model, minimum=1, maximum=12)
    H = check_int("num_heads", num_heads, minimum=1, maximum=6)
    if D % H:
        raise ValueError(f"num_heads must divide d_model: d_model={D} is not divisible by num_heads={H} "
                         f"(each head gets d_model / num_heads features)")
    if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
        raise TypeError(f"tokens must be a list or tuple of str (one label per row), got {tokens!r}"[:200])
    if not 1 <= len(tokens) <= 4:
        raise ValueError(f"tokens must hold 1 to 4 labels, got {len(tokens)}")
    L, E = len(tokens), D // H
    gap, arrow = 0.5, 3.6  # between head blocks; room for an arrow and its label
    x1 = 0.0
    x2 = x1 + D + arrow
    x3 = x2 + D + (H - 1) * gap + arrow
    right = x3 + E + 2.6
    block_h = H * L + (H - 1) * 1.0
    top_pad, bottom_pad = 3.6, 2.6
    units_w, units_h = right + 1.8, block_h + top_pad + bottom_pad
    unit = min(0.30, 8.6 / units_w)
    width = max(units_w * unit, 6.8)  # room for the captions when the drawing is small
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width, units_h * unit))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(-1.8, -1.8 + width / unit)
    ax.set_ylim(-bottom_pad, block_h + top_pad)
    ax.set_axis_off()
    from matplotlib.patches import Rectangle

    def cell(x, y, token, feature):
        head = feature // E
        colour = PALETTE[head % 6]
        ax.add_patch(Rectangle((x, y), 1, 1, facecolor=colour, alpha=0.35, edgecolor=colour, linewidth=1.0))
        ax.text(x + 0.5, y + 0.5, str(token * D + feature), ha="center", va="center", fontsize=MIN_FONT_SIZE,
                color=PALETTE[7])  # the value arange(L * D).view(L, D) holds at (token, feature)

    row_y = [block_h - (i + 1) for i in range(L)]  # token i's row (bottom edge), top to bottom
    for i, tok in enumerate(tokens):
        ax.text(x1 - 0.2, row_y[i] + 0.5, tok, ha="right", va="center", fontsize=MIN_FONT_SIZE + 1)
        for f in range(D):
            cell(x1 + f, row_y[i], i, f)
            cell(x2 + f + (f // E) * gap, row_y[i], i, f)
    for h in range(H):
        base = block_h - h * (L + 1.0)
        for i in range(L):
            for e in range(E):
                cell(x3 + e, base - (i + 1), i, h * E + e)
        ax.text(x3 + E + 0.3, base - L / 2, f"head {h}", ha="left", va="center", fontsize=MIN_FONT_SIZE + 1,
                color=PALETTE[h % 6] if h % 6 not in (4, 6) else PALETTE[7])
    ty = block_h + 1.3
    ax.text(x1 + D / 2, ty, f"x: (B, L, d_model)\n= (1, {L}, {D})", ha="center", va="center", fontsize=_FONT)
    ax.text(x2 + (D + (H - 1) * gap) / 2, ty, f"(B, L, H, E)\n= (1, {L}, {H}, {E})", ha="center", va="center",
            fontsize=_FONT)
    ax.text(x3 + E / 2, ty, f"(B, H, L, E)\n= (1, {H}, {L}, {E})", ha="center", va="center", fontsize=_FONT)
    ay = block_h - L / 2
    for xa, xb, label in ((x1 + D, x2, "view"), (x2 + D + (H - 1) * gap, x3, "transpose\n(1, 2)")):
        _arrow(ax, (xa + 0.3, ay), (xb - 0.3, ay))
        ax.text((xa + xb) / 2, ay + 0.4, label, ha="center", va="bottom", fontsize=MIN_FONT_SIZE)
    low = -0.9
    ax.plot([x3 + E / 2, x3 + E / 2, x1 + D / 2], [-0.15, low, low], color=PALETTE[7], linewidth=1.2)
    _arrow(ax, (x1 + D / 2, low), (x1 + D / 2, block_h - L - 0.15))
    ax.text(-1.8 + width / unit / 2, low - 0.75,
            f"merge back: transpose(1, 2), then reshape(B, L, H·E); H·E = {H}·{E} = {D} = d_model",
            ha="center", va="center", fontsize=_FONT)
    ax.text(-1.7, block_h + top_pad - 0.45, f"split into H = {H} heads: E = d_model / H = {D} / {H} = {E}",
            ha="left", va="center", fontsize=_TITLE)
    return fig


def transformer_block_figure(*, d_model: int = 384, d_ff: int = 1536):
    """One Transformer encoder block two ways, side by side: post-LN (left) and pre-LN (right).

    Post-LN (the original Transformer, BERT): each sublayer F (multi-head attention, then the feed-forward
    network) is followed by the residual addition and a LayerNorm, h = LayerNorm(x + F(x)), so the residual
    path itself passes through every LayerNorm. Pre-LN (GPT-2 and most models since): the LayerNorm moves to
    the sublayer's input, h = x + F(LayerNorm(x)), and the residual path from x to the output is untouched
    (a final LayerNorm follows the last block). Xiong et al. show that post-LN's gradients near the output
    are large at initialisation (so it needs a learning-rate warm-up) and pre-LN's are not. Every arrow
    carries a (B, L, d_model) tensor; the FFN's hidden layer is (B, L, d_ff). No tensors are computed.

    Args:
        d_model: an int in [1, 65536]. d_ff: the feed-forward width, an int in [1, 262144].

    Returns:
        a matplotlib Figure, 8 x 5.4 inches, colours from :data:`attn_lib.course.style.PALETTE`.

    Raises:
        TypeError: a non-int argument. ValueError: out of range.

    Source: Xiong et al. (2020), "On Layer Normalization in the Transformer Architecture", Figure 1
    (arXiv:2002.04745); Vaswani et al. (2017), Figure 1; the course's own drawing (notebook 05).
    """
    D = check_int("d_model", d_model, minimum=1, maximum=65536)
    F = check_int("d_ff", d_ff, minimum=1, maximum=262144)
    blue, orange, green = PALETTE[0], PALETTE[1], PALETTE[2]
    fig, ax = _inch_canvas(8.0, 5.4)
    w, h, r = 2.0, 0.42, 0.16  # box width and height, radius of an Add circle
    ys = [0.55 + 0.56 * i for i in range(8)]  # bottom to top

    def add(cx, cy):
        from matplotlib.patches import Circle

        ax.add_patch(Circle((cx, cy), r, facecolor="white", edgecolor=PALETTE[7], linewidth=1.2))
        ax.text(cx, cy, "+", ha="center", va="center", fontsize=_TITLE + 1)

    def residual(cx, y_from, y_to, side):
        xs = cx + side
        ax.plot([cx, xs, xs], [y_from, y_from, y_to], color=PALETTE[7], linewidth=1.2)
        _arrow(ax, (xs, y_to), (cx + r, y_to))

    def column(cx, pre: bool):
        attn = "multi-head\nattention"
        ffn = f"feed-forward\n{D} → {F} → {D}"
        if pre:
            items = [("x (B, L, d_model)", None), ("LayerNorm", orange), (attn, blue), ("+", None),
                     ("LayerNorm", orange), (ffn, green), ("+", None), ("output (next block)", None)]
        else:
            items = [("x (B, L, d_model)", None), (attn, blue), ("+", None), ("LayerNorm", orange),
                     (ffn, green), ("+", None), ("LayerNorm", orange), ("output (next block)", None)]
        for i, (label, colour) in enumerate(items):
            y = ys[i]
            if label == "+":
                add(cx, y)
            elif colour is None:
                ax.text(cx, y, label, ha="center", va="center", fontsize=_FONT)
            else:
                _box(ax, cx, y, w, h, label, colour)
            if i:
                below = ys[i - 1] + (r if items[i - 1][0] == "+" else (h / 2 if items[i - 1][1] else 0.12))
                above = y - (r if label == "+" else (h / 2 if colour else 0.12))
                _arrow(ax, (cx, below), (cx, above))
        adds = [i for i, (label, _) in enumerate(items) if label == "+"]
        # the residual leaves the stream just above the item before the sublayer (pre-LN: before the LayerNorm)
        starts = [0, adds[0]] if pre else [0, adds[0] + 1]
        for start, end in zip(starts, adds):
            y_from = ys[start] + (r if items[start][0] == "+" else (h / 2 if items[start][1] else 0.12)) + 0.1
            residual(cx, y_from, ys[end], 1.25)

    column(2.0, pre=False)
    column(6.0, pre=True)
    ax.text(2.0, 5.1, "post-LN: h = LayerNorm(x + F(x))", ha="center", va="center", fontsize=_TITLE)
    ax.text(2.0, 4.82, "original Transformer, BERT", ha="center", va="center", fontsize=_FONT)
    ax.text(6.0, 5.1, "pre-LN: h = x + F(LayerNorm(x))", ha="center", va="center", fontsize=_TITLE)
    ax.text(6.0, 4.82, "GPT-2 and later; one more LayerNorm after the last block", ha="center", va="center", fontsize=_FONT)
    ax.text(4.0, 0.16, "Xiong et al. (2020), On Layer Normalization in the Transformer Architecture: "
            "pre-LN trains without warm-up", ha="center", va="center", fontsize=MIN_FONT_SIZE, style="italic")
    return fig


# ---------------------------------------------------------------------------------------------------------------
# Notebooks 08-09: the KV cache as it grows, the tiling loop.
# ---------------------------------------------------------------------------------------------------------------

__all__ += ["kv_cache_diagram", "tiling_diagram"]

# The two figures of this section draw in inches (_inch_canvas, above): one Axes fills the figure and its data
# units are inches, so a cell, a gap and an 8-pt line of text keep their size whatever the arguments (8 pt is
# 0.11 inch; no text is smaller).
_LINE = 0.2  # inches per line of 8-pt text


def _cells(ax, x: float, y: float, n: int, width: float, height: float, colour: str, *, edge: str = "white"):
    """``n`` cells side by side, lower-left corner at (x, y); returns the x where they end."""
    from matplotlib.patches import Rectangle

    for k in range(n):
        ax.add_patch(Rectangle((x + k * width, y), width, height, facecolor=colour, edgecolor=edge, lw=0.8))
    return x + n * width


def _check_tokens(tokens) -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, (list, tuple)):
        raise TypeError(f"tokens must be a list or tuple of str, got {type(tokens).__name__} {tokens!r}"[:160])
    for k, t in enumerate(tokens):
        if not isinstance(t, str):
            raise TypeError(f"tokens[{k}] must be a str, got {type(t).__name__} {t!r}")
    return list(tokens)


def kv_cache_diagram(tokens=("the", "cat", "sat", "on", "the", "mat"), prompt_len: int = 3, *, num_layers: int = 2,
                     batch_size: int = 1, num_heads: int = 8, num_kv_heads: int = 2, head_dim: int = 64,
                     bytes_per_element: float = 2):
    """The KV cache as it grows during decoding, and what GQA/MQA shrink: a drawn schematic.

    The first ``prompt_len`` tokens are the prompt, already in the cache; decoding step t = 1, 2, ... feeds token
    ``prompt_len + t`` (one column per step). In each layer (one row of panels per layer) the new token's query is
    one row of H cells (q, shape (B, H, 1, E)), and its key and value are appended as one new row (orange) to the
    cached K and V, each (B, Hkv, S, E) with S = prompt_len + t; the rows are labelled with their tokens and the
    cells of a row are its Hkv key/value heads. Below, one token's row of one layer's cache for MHA (Hkv = H),
    the given GQA and MQA (Hkv = 1): 2·Hkv·E values, ``bytes_per_element`` bytes each. GQA and MQA narrow every
    row (fewer KV heads); they change neither S nor E nor the number of query heads.

    Args:
        tokens: the token strings (list or tuple of str), prompt first; 1 to 4 decoding steps, 8 tokens at most.
        prompt_len: int >= 0, the number of prompt tokens.
        num_layers: int in [1, 3], the layers drawn. batch_size: int >= 1, B (a label only).
        num_heads: H, int in [1, 64]. num_kv_heads: Hkv, dividing H. head_dim: E, int >= 1 (a label only).
        bytes_per_element: 2 for fp16/bf16, 1 for int8, 0.5 for int4 (a number > 0).

    Returns:
        a matplotlib Figure (about 8.6 inches wide), colours from :data:`attn_lib.course.style.PALETTE`.

    Raises:
        TypeError: tokens is not a list/tuple of str, or a count is not an int (see :mod:`attn_lib._checks`).
        ValueError: a count out of range, num_kv_heads does not divide num_heads, or there are not 1-4 steps.

    No tensors: ints and strs in, a Figure out. Source: the course's own drawing of the cache of
    :class:`attn_lib.kv_cache.KVCache` (HuggingFace's DynamicCache layout (B, Hkv, S, E)); GQA and MQA as in
    Ainslie et al. (2023), §2.2, and Shazeer (2019).
    """
    from attn_lib._checks import check_heads, check_int, check_number

    tokens = _check_tokens(tokens)
    prompt_len = check_int("prompt_len", prompt_len, minimum=0)
    num_layers = check_int("num_layers", num_layers, minimum=1, maximum=3)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    check_int("num_heads", num_heads, minimum=1, maximum=64)
    check_heads(num_heads, num_kv_heads)
    head_dim = check_int("head_dim", head_dim, minimum=1)
    bytes_per_element = check_number("bytes_per_element", bytes_per_element, minimum=0.0)
    if bytes_per_element <= 0:
        raise ValueError(f"bytes_per_element must be a number > 0, got {bytes_per_element}")
    if len(tokens) > 8:
        raise ValueError(f"tokens must hold at most 8 tokens (the rows drawn), got {len(tokens)}")
    steps = len(tokens) - prompt_len
    if not 1 <= steps <= 4:
        raise ValueError(f"tokens must hold prompt_len + 1 to prompt_len + 4 tokens (1 to 4 decoding steps), got "
                         f"{len(tokens)} tokens with prompt_len={prompt_len}")

    cached, new, query, ink = PALETTE[0], PALETTE[1], PALETTE[2], PALETTE[7]
    H, Hkv, B, E = num_heads, num_kv_heads, batch_size, head_dim
    cell = min(0.18, 1.44 / H)  # one head's cell: the query row is at most 1.44 inches wide
    kv_cell = max(cell, 0.14)  # K and V keep legible cells even for MHA with many heads
    label_w = max(0.45, 0.075 * max(len(t) for t in tokens) + 0.1)
    kv_w = min(Hkv * kv_cell, 0.72)
    kv_cell = kv_w / Hkv
    col_w = max(label_w + 2 * kv_w + 0.35, label_w + H * cell, 2.1) + 0.3  # 2.4: the shape labels
    left = 0.85  # the layer names
    S_max = len(tokens)
    panel_h = _LINE + 0.12 + _LINE + S_max * _LINE + 0.3  # q row, the "K  V" line, the rows, a gap
    header_h = 3 * _LINE + 0.25
    variants = sorted({H, Hkv, 1}, reverse=True)
    bottom_h = 0.45 + len(variants) * 0.32 + 0.45
    width = left + steps * col_w + 0.15
    width = max(width, 7.4)
    height = header_h + num_layers * panel_h + bottom_h
    fig, ax = _inch_canvas(width, height)

    top = height - 0.12
    for t in range(1, steps + 1):
        x0 = left + (t - 1) * col_w
        S = prompt_len + t
        ax.text(x0, top, f"step t = {t}: feed “{tokens[S - 1]}”", fontsize=9, fontweight="bold", va="top")
        ax.text(x0, top - 1.15 * _LINE, f"K, V each (B, Hkv, S, E) = ({B}, {Hkv}, {S}, {E})", fontsize=8, va="top")
        ax.text(x0, top - 2.15 * _LINE, f"q (B, H, 1, E) = ({B}, {H}, 1, {E})", fontsize=8, va="top", color=ink)
        for layer in range(num_layers):
            y_top = height - header_h - layer * panel_h
            y_q = y_top - _LINE
            ax.text(x0 + label_w - 0.06, y_q + _LINE / 2, "q", fontsize=8, ha="right", va="center")
            _cells(ax, x0 + label_w, y_q + 0.02, H, cell, _LINE - 0.04, query)
            y_kv_label = y_q - 0.12 - _LINE / 2
            x_k, x_v = x0 + label_w, x0 + label_w + kv_w + 0.35
            ax.text(x_k + kv_w / 2, y_kv_label, "K", fontsize=8, ha="center", va="center")
            ax.text(x_v + kv_w / 2, y_kv_label, "V", fontsize=8, ha="center", va="center")
            for r in range(S):
                y = y_kv_label - _LINE / 2 - (r + 1) * _LINE
                colour = new if r == S - 1 else cached
                ax.text(x0 + label_w - 0.06, y + _LINE / 2, tokens[r], fontsize=8, ha="right", va="center")
                _cells(ax, x_k, y + 0.01, Hkv, kv_cell, _LINE - 0.02, colour)
                _cells(ax, x_v, y + 0.01, Hkv, kv_cell, _LINE - 0.02, colour)
            if t == 1:
                ax.text(0.12, y_top - panel_h / 2 + 0.1, f"layer {layer + 1}", fontsize=9, va="center")

    # the legend, then one token's row of one layer's cache for MHA, GQA, MQA
    y = bottom_h - 0.3
    x = 0.12
    for colour, text in ((cached, "cached at earlier steps"), (new, "appended at this step"),
                         (query, "the new token's query (not cached)")):
        _cells(ax, x, y - 0.07, 1, 0.16, 0.14, colour)
        ax.text(x + 0.22, y, text, fontsize=8, va="center")
        x += 0.32 + 0.068 * len(text)
    ax.text(0.12, y - 0.34, "What GQA and MQA shrink: the width of every row, 2 · Hkv · E values per token and layer",
            fontsize=8, va="center", fontweight="bold")
    row_cell = min(0.16, 1.2 / H)  # K and V rows of MHA: 2.4 inches at most
    for k, hkv in enumerate(variants):
        yy = y - 0.72 - k * 0.32
        name = "MHA" if hkv == H else "MQA" if hkv == 1 else "GQA"
        ax.text(0.12, yy, f"{name}, Hkv = {hkv}", fontsize=8, va="center")
        _cells(ax, 1.45, yy - 0.08, hkv, row_cell, 0.16, cached)  # K
        _cells(ax, 1.45 + H * row_cell + 0.15, yy - 0.08, hkv, row_cell, 0.16, cached)  # V
        values = 2 * hkv * E
        ax.text(1.45 + 2 * H * row_cell + 0.4, yy,
                f"K + V: 2 · {hkv} · {E} = {values} values = {values * bytes_per_element:g} bytes",
                fontsize=8, va="center")
    return fig


def tiling_diagram(q_len: int = 12, kv_len: int = 12, block_q: int = 4, block_k: int = 4, *, head_dim: int = 64,
                   is_causal: bool = True, step=None):
    """FlashAttention-2's loop, drawn: query blocks outside, key/value blocks inside, and where each tile lives.

    Left, the L x S score matrix cut into tiles: the outer loop walks the query blocks i (downwards; on a GPU, one
    program each), the inner loop the key/value blocks j (to the right). The tile being computed, ``step = (i,
    j)``, is orange; tiles already done are sky blue; those still to do are white; with ``is_causal`` the tiles
    wholly above the diagonal are skipped (grey, hatched, never computed) and those crossing it are computed with
    a mask (marked "mask"). Right, what the program holds in on-chip SRAM (the tiles Q_i, K_j, V_j, S_ij and the
    running max m, running sum ℓ and accumulator O, rescaled by exp(m_old - m_new) at every step), what it reads
    from HBM (Q_i once per i; K_j and V_j at every j) and what it writes back (O_i and LSE_i, once, after the
    last j). The labels give the shapes for the arguments, e.g. Q_i (Bq, E), and the count of tiles computed and
    skipped (:func:`attn_lib.tiled.causal_tiles`).

    Args:
        q_len: L, kv_len: S, block_q: Bq, block_k: Bk: ints >= 1, at most 6 blocks each way.
        head_dim: E, an int >= 1 (a label only). is_causal: bool, causal (top-left aligned, like torch's).
        step: the (i, j) tile being computed, a tile that is computed; None: the last query block's
            second-last computed tile (or its only one).

    Returns:
        a matplotlib Figure (9 inches wide), colours from :data:`attn_lib.course.style.PALETTE`.

    Raises:
        TypeError: a count is not an int, is_causal not a bool, step not a pair of ints.
        ValueError: a count < 1, more than 6 blocks, or step not a computed tile (the message lists them).

    No tensors: ints in, a Figure out. Source: Dao (2023), FlashAttention-2, Algorithm 1 (forward pass) and §3.1-3.2
    (loop order, causal tiles skipped); the loop of :func:`attn_lib.tiled.tiled_attention`.
    """
    import math

    from matplotlib.patches import FancyArrowPatch, Rectangle

    from attn_lib._checks import check_bool, check_int
    from attn_lib.tiled import causal_tiles

    q_len, kv_len = check_int("q_len", q_len, minimum=1), check_int("kv_len", kv_len, minimum=1)
    block_q, block_k = check_int("block_q", block_q, minimum=1), check_int("block_k", block_k, minimum=1)
    head_dim = check_int("head_dim", head_dim, minimum=1)
    is_causal = check_bool("is_causal", is_causal)
    n_i, n_j = math.ceil(q_len / block_q), math.ceil(kv_len / block_k)
    for name, n, length, block in (("query", n_i, "q_len", "block_q"), ("key", n_j, "kv_len", "block_k")):
        if n > 6:
            raise ValueError(f"{length} / {block} must give at most 6 {name} blocks to draw, got {n}")
    computed = causal_tiles(q_len, kv_len, block_q, block_k) if is_causal else [
        (i, j) for i in range(n_i) for j in range(n_j)]
    if step is None:
        last = [tile for tile in computed if tile[0] == n_i - 1]
        step = last[-2] if len(last) > 1 else last[-1]
    if (not isinstance(step, tuple) or len(step) != 2
            or any(isinstance(s, bool) or not isinstance(s, int) for s in step)):
        raise TypeError(f"step must be a tuple (i, j) of two ints, got {type(step).__name__} {step!r}")
    if step not in computed:
        raise ValueError(f"step must be one of the computed tiles {computed}, got {step}")
    skipped = n_i * n_j - len(computed)
    masked = [(i, j) for i, j in computed if is_causal and min((j + 1) * block_k, kv_len) - 1 > i * block_q]
    order = {tile: k for k, tile in enumerate(computed)}  # the loop's order: i outer, j inner
    now = order[step]

    fig, ax = _inch_canvas(9.0, 4.9)
    ink, done, current, skip, sram, hbm = PALETTE[7], PALETTE[4], PALETTE[1], "#BBBBBB", PALETTE[2], PALETTE[0]
    grid = 3.0  # inches for the longer side of the score matrix
    unit = grid / max(q_len, kv_len)
    gx, gy_top = 0.95, 4.05  # the grid's top-left corner
    ax.text(0.1, 4.75, f"Tiles of the {q_len} × {kv_len} score matrix (Bq = {block_q}, Bk = {block_k})",
            fontsize=9, fontweight="bold", va="top")
    for i in range(n_i):
        r0, r1 = i * block_q, min((i + 1) * block_q, q_len)
        for j in range(n_j):
            c0, c1 = j * block_k, min((j + 1) * block_k, kv_len)
            x, y = gx + c0 * unit, gy_top - r1 * unit
            w, h = (c1 - c0) * unit, (r1 - r0) * unit
            if (i, j) not in order:
                face, hatch, text = skip, "//", "skip"
            elif order[(i, j)] < now:
                face, hatch, text = done, None, "done"
            elif order[(i, j)] == now:
                face, hatch, text = current, None, "now"
            else:
                face, hatch, text = "white", None, ""
            ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor=ink, lw=1.0, hatch=hatch))
            label = f"({i},{j})" + (f"\n{text}" if text else "") + ("\nmask" if (i, j) in masked else "")
            if w >= 0.45 and h >= 0.45:
                ax.text(x + w / 2, y + h / 2, label, fontsize=8, ha="center", va="center", linespacing=1.1,
                        bbox=dict(facecolor="white", edgecolor="none", pad=0.5, alpha=0.85) if hatch else None)
    gw, gh = kv_len * unit, q_len * unit
    ax.add_patch(FancyArrowPatch((gx, gy_top + 0.12), (gx + gw, gy_top + 0.12), arrowstyle="-|>",
                                 mutation_scale=10, color=ink, lw=1.0))
    ax.text(gx, gy_top + 0.2, f"inner loop: key/value blocks j = 0 … {n_j - 1}", fontsize=8, va="bottom")
    ax.add_patch(FancyArrowPatch((gx - 0.12, gy_top), (gx - 0.12, gy_top - gh), arrowstyle="-|>",
                                 mutation_scale=10, color=ink, lw=1.0))
    ax.text(gx - 0.2, gy_top - gh / 2, f"outer loop: query blocks i = 0 … {n_i - 1}", fontsize=8, rotation=90,
            ha="right", va="center")
    count = f"{n_i} × {n_j} = {n_i * n_j} tiles: {len(computed)} computed"
    if is_causal:
        count += f" ({len(masked)} with a mask), {skipped} skipped"
    ax.text(0.1, 0.55, count, fontsize=8, va="center")
    ax.text(0.1, 0.3, "done (sky blue), now (orange), to do (white), skipped (grey)", fontsize=8, va="center")

    # right: the program's SRAM, the GPU's HBM, the traffic between them
    i, j = step
    Bq, Bk = min((i + 1) * block_q, q_len) - i * block_q, min((j + 1) * block_k, kv_len) - j * block_k
    E = head_dim
    sx, sw = 4.75, 4.1
    ax.add_patch(Rectangle((sx, 2.2), sw, 2.45, facecolor="white", edgecolor=sram, lw=2))
    ax.text(sx + 0.1, 4.55, f"SRAM, on chip: program i = {i}, at step j = {j}", fontsize=9, fontweight="bold",
            va="top", color=ink)
    sram_lines = [
        f"tiles: Q_i ({Bq}, {E}),  K_j and V_j ({Bk}, {E}) each,  S_ij = Q_i K_jᵀ ({Bq}, {Bk})",
        f"running state, one entry or row per query: m ({Bq},),  ℓ ({Bq},),  O ({Bq}, {E})",
        "m_new = max(m, rowmax(S_ij));   P = exp(S_ij − m_new)",
        "ℓ ← exp(m − m_new) · ℓ + rowsum(P)",
        "O ← exp(m − m_new) · O + P V_j       (then m ← m_new)",
    ]
    for k, line in enumerate(sram_lines):
        ax.text(sx + 0.1, 4.2 - k * 0.36, line, fontsize=8, va="center", color=ink)
    ax.add_patch(Rectangle((sx, 0.2), sw, 1.05, facecolor="white", edgecolor=hbm, lw=2))
    ax.text(sx + 0.1, 1.15, "HBM, the GPU's main memory", fontsize=9, fontweight="bold", va="top", color=ink)
    ax.text(sx + 0.1, 0.72, f"Q ({q_len}, {E}),  K and V ({kv_len}, {E}),  O ({q_len}, {E}),  LSE ({q_len},)",
            fontsize=8, va="center", color=ink)
    ax.text(sx + 0.1, 0.42, "(per batch entry and head; the L × S scores are never stored)", fontsize=8,
            va="center", color=ink)
    for x, up, text in ((sx + 0.25, True, "read Q_i\nonce per i"), (sx + 1.35, True, "read K_j, V_j\nat every j"),
                        (sx + 2.55, False, "write O_i = O / ℓ and\nLSE_i = m + log ℓ,\nonce, after the last j")):
        a, b = (x, 1.27), (x, 2.18)
        ax.add_patch(FancyArrowPatch(a if up else b, b if up else a, arrowstyle="-|>", mutation_scale=12,
                                     color=ink, lw=1.2))
        ax.text(x + 0.08, 1.72, text, fontsize=8, va="center", linespacing=1.1)
    return fig


__all__ += ["plot_groups"]


# Which query heads share which key/value head (notebook 08; the figure of attn_lib.gqa).
def plot_groups(num_heads: int, num_kv_heads: int, *, ax=None):
    """Draw query heads (top row) connected to the key/value head they read (bottom row), coloured by group.

    The picture of the GQA paper's Figure 2 (Ainslie et al. 2023) for any H and Hkv, colours from viridis
    (colour-blind safe).

    Args:
        num_heads: H. num_kv_heads: Hkv, dividing H. ax: a matplotlib Axes, or None for a new figure.

    Returns:
        the matplotlib Axes.

    Raises:
        TypeError / ValueError: as :func:`attn_lib.gqa.kv_head_for_query_head`.

    No tensors: two ints in, a matplotlib Axes out.
    """
    import matplotlib.pyplot as plt

    from attn_lib.gqa import kv_head_for_query_head

    owner = kv_head_for_query_head(num_heads, num_kv_heads)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6.0, num_heads * 0.28), 2.4))
    cmap = plt.get_cmap("viridis")
    colour = [cmap(h / max(1, num_kv_heads - 1) * 0.9) for h in range(num_kv_heads)]
    kv_x = [(h + 0.5) * num_heads / num_kv_heads - 0.5 for h in range(num_kv_heads)]
    for j, h in enumerate(owner):
        ax.plot([j, kv_x[h]], [1, 0], color=colour[h], lw=1, alpha=0.8)
    ax.scatter(range(num_heads), [1] * num_heads, c=[colour[h] for h in owner], s=60, marker="s", zorder=3)
    ax.scatter(kv_x, [0] * num_kv_heads, c=colour, s=120, marker="o", zorder=3, edgecolors="black")
    ax.set_yticks([0, 1], [f"{num_kv_heads} KV head{'s' if num_kv_heads > 1 else ''}", f"{num_heads} query heads"])
    ax.set_xticks([])
    ax.set_ylim(-0.4, 1.4)
    name = "MHA" if num_kv_heads == num_heads else "MQA" if num_kv_heads == 1 else "GQA"
    G = num_heads // num_kv_heads
    ax.set_title(f"{name}: {num_heads} query heads, {num_kv_heads} KV head{'s' if num_kv_heads > 1 else ''} (groups of {G})")
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    return ax


# ---------------------------------------------------------------------------------------------------------------
# Notebook 11: Gemma 4's layer stack (windows, KV sharing, keys reused as values).
# ---------------------------------------------------------------------------------------------------------------

__all__ += ["kv_sharing_figure"]

#: One colour per design in notebook 11's figures (kv_table's bars too): window layers green, global GQA orange.
_WINDOW, _GLOBAL = PALETTE[2], PALETTE[1]


def kv_sharing_figure(layer_types=("sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
                                   "full_attention"), num_kv_shared_layers: int = 2, *, k_eq_v: bool = True):
    """Gemma 4's (and Gemma 3n's) layer stack: one box per layer, bottom to top, green for a window layer, orange for
    a global one; each of the last ``num_kv_shared_layers`` layers is drawn dashed, with no K/V of its own, and an
    arrow from the last earlier layer of its kind whose K and V it reuses. With ``k_eq_v``, the global layers that
    own projections are labelled "V = K's projection" (Gemma 4's ``attention_k_eq_v``).

    Args:
        layer_types: a sequence of "sliding_attention" / "full_attention" (transformers' ``layer_types``).
        num_kv_shared_layers: int in [0, len(layer_types) - 1]; every kind among the sharing layers must appear
            among the earlier ones. k_eq_v: bool.

    Returns:
        the matplotlib Figure. No tensors: strs, ints and a bool in.

    Raises:
        TypeError: num_kv_shared_layers not an int; k_eq_v not a bool. ValueError: an unknown layer type; no
            layer; num_kv_shared_layers out of range; a sharing layer with no earlier layer of its kind.

    Source: transformers' ``Gemma4TextConfig.kv_sharing_modes`` (the same rule as Gemma 3n's).
    """
    from attn_lib._checks import check_bool

    types = list(layer_types)
    if not types or any(t not in ("sliding_attention", "full_attention") for t in types):
        raise ValueError(f"layer_types must be a non-empty sequence of 'sliding_attention' / 'full_attention', "
                         f"got {types}")
    n = len(types)
    shared = check_int("num_kv_shared_layers", num_kv_shared_layers, minimum=0)
    if shared > n - 1:
        raise ValueError(f"num_kv_shared_layers must be in [0, {n - 1}] (one layer at least computes K/V), got {shared}")
    check_bool("k_eq_v", k_eq_v)
    first = n - shared
    source = {}
    for i in range(first, n):
        earlier = [j for j in range(first) if types[j] == types[i]]
        if not earlier:
            raise ValueError(f"layer {i} ({types[i]}) shares K/V but no earlier layer is of its kind")
        source[i] = earlier[-1]
    fig, ax = _inch_canvas(6.4, 0.62 * n + 0.5)
    for i, kind in enumerate(types):
        y = 0.45 + 0.62 * i
        colour = _WINDOW if kind == "sliding_attention" else _GLOBAL
        what = "window" if kind == "sliding_attention" else "global"
        if i in source:
            label = f"layer {i} · {what} · own queries, K and V of layer {source[i]}"
        elif kind == "full_attention" and k_eq_v:
            label = f"layer {i} · {what} · V from K's projection (k_eq_v)"
        else:
            label = f"layer {i} · {what} · own K, V"
        _box(ax, 2.7, y, 4.6, 0.42, label, colour)
        if i in source:
            ax.patches[-1].set_linestyle("--")
            ys = 0.45 + 0.62 * source[i]
            x = 5.0 if kind == "sliding_attention" else 5.25
            _arrow(ax, (x, ys), (x, y), colour=colour, connection="arc3,rad=-0.4")
    if source:
        ax.text(5.75, 0.45 + 0.62 * (n - 1), "K, V\nreused", fontsize=_FONT, ha="left", va="center",
                color=PALETTE[7])
    return fig


# ---------------------------------------------------------------------------------------------------------------
# Notebooks 11 and 12: MLA's two decodes, DeepSeek's sparse-attention pipeline, the delta rule, the chunked form,
# the 3:1 hybrid stack. One colour per design, as in kv_table's bars: MLA blue, windows green, the linear-attention
# family (Gated DeltaNet, KDA) reddish purple; DSA's indexer vermillion; gated softmax attention sky blue.
# ---------------------------------------------------------------------------------------------------------------

__all__ += ["mla_decode_figure", "dsa_pipeline_figure", "delta_rule_figure", "chunked_form_figure",
            "hybrid_stack_figure"]

_MLA, _INDEXER, _LINEAR, _GATED_ATTN, _NEUTRAL = PALETTE[0], PALETTE[5], PALETTE[3], PALETTE[4], PALETTE[7]


def _row(ax, y, items, *, w=1.55, h=0.62, gap=0.42, x0=0.15, fontsize=_FONT):
    """Boxes (text, colour) left to right at height y, joined by arrows; returns their centres' x."""
    xs = []
    for j, (text, colour) in enumerate(items):
        cx = x0 + w / 2 + j * (w + gap)
        _box(ax, cx, y, w, h, text, colour, fontsize=fontsize)
        if j:
            _arrow(ax, (xs[-1] + w / 2, y), (cx - w / 2, y))
        xs.append(cx)
    return xs


def mla_decode_figure():
    """MLA's plain decode (top) against its absorbed decode (bottom), for one new token over S cached latents.

    Top: the cache c_KV (S × r) is expanded by W_UK and W_UV into H keys and values per token at every step, then
    ordinary attention. Bottom: W_UK moves into the query (q_C W_UKᵀ, r features per head), the latents are the
    keys and values of one shared head (MQA), and W_UV is applied after the softmax. Every box in MLA's blue.

    Returns:
        the matplotlib Figure. Takes no arguments (no tensors).

    Raises:
        nothing of its own (matplotlib's errors propagate).

    Source: DeepSeek-V2 (2024), §2.1 and its appendix on absorbing W_UK and W_UV.
    """
    fig, ax = _inch_canvas(10.3, 3.3)
    ax.text(0.15, 3.05, "plain: expand the cache at every step", fontsize=_TITLE, ha="left", va="center")
    _row(ax, 2.35, [("cache c_KV\nS × r", _MLA), ("× W_UK, × W_UV\nS × H × (dn + dv)", _MLA),
                    ("H keys, H values\nper cached token", _MLA), ("softmax(q kᵀ) v\nper head", _MLA),
                    ("o_proj", _MLA)], w=1.62)
    ax.text(0.15, 1.35, "absorbed: W_UK into the query, W_UV after the softmax", fontsize=_TITLE, ha="left",
            va="center")
    _row(ax, 0.6, [("query q_C\nH × dn", _MLA), ("× W_UKᵀ\nH × r", _MLA),
                   ("attend to c_KV itself\none shared head (MQA)", _MLA), ("× W_UV\nH × dv", _MLA),
                   ("o_proj", _MLA)], w=1.62)
    return fig


def dsa_pipeline_figure(topk: int = 2048):
    """DeepSeek sparse attention for one query token: the indexer scores every earlier token (vermillion), the top-k
    positions are kept, and MLA (blue) attends, absorbed, to the k gathered latents of the cache.

    Args:
        topk: k, the keys each query keeps (int >= 1; DeepSeek-V3.2: 2048).

    Returns:
        the matplotlib Figure. No tensors: an int in.

    Raises:
        TypeError: topk not an int. ValueError: topk < 1.

    Source: DeepSeek-V3.2-Exp report, eq. 1 and its figure of the attention architecture.
    """
    k = check_int("topk", topk, minimum=1)
    fig, ax = _inch_canvas(10.3, 2.5)
    xs = _row(ax, 1.75, [("x_t", _NEUTRAL), ("lightning indexer\nI[t, s] for every s < t", _INDEXER),
                         (f"top-k of I[t, :]\nk = {k} positions", _INDEXER), ("gather k latents", _MLA),
                         ("MLA, absorbed\n→ output", _MLA)], w=1.62)
    _box(ax, xs[3], 0.55, 1.62, 0.62, "cache: (c_KV, k_R)\nand k_I per token", _MLA)
    _arrow(ax, (xs[3], 0.86), (xs[3], 1.44))
    ax.text(xs[1], 0.55, "cheap: few heads, FP8,\nno softmax", fontsize=_FONT, ha="center", va="center",
            color=_NEUTRAL)
    return fig


def delta_rule_figure():
    """One token of the gated delta rule as an error-correcting write: decay the state, predict the value of the
    key, compare with the true value, write β times the error, read with the query. Reddish purple (the
    linear-attention family); the error is the box that makes it a correction, not a plain addition.

    Returns:
        the matplotlib Figure. Takes no arguments (no tensors).

    Raises:
        nothing of its own (matplotlib's errors propagate).

    Source: Schlag, Irie & Schmidhuber 2021 (the delta rule for fast weights, after Widrow & Hoff 1960);
    Yang et al. 2024 (parallel DeltaNet), 2025 (Gated DeltaNet).
    """
    fig, ax = _inch_canvas(10.4, 2.3)
    xs = _row(ax, 1.45, [("state S\n(before token t)", _LINEAR), ("decay\nS ← exp(g_t) S", _LINEAR), ("predict\nv̂ = Sᵀ k_t", _LINEAR),
                         ("error\nv_t − v̂", _LINEAR), ("write\nS + β_t k_t (v_t − v̂)ᵀ", _LINEAR),
                         ("read\no_t = S_tᵀ q_t", _LINEAR)], w=1.45, gap=0.3)
    ax.text(xs[3], 0.45, "a key already stored with the right value\nwrites nothing: the state corrects, "
            "not only adds", fontsize=_FONT, ha="center", va="center", color=_NEUTRAL)
    return fig


def chunked_form_figure(seq_len: int = 12, chunk: int = 4):
    """The chunked form of linear attention: inside each chunk a small causal (C × C) product, in parallel; between
    chunks, the state S carried from one chunk to the next, read by every query of the next chunk.

    Args:
        seq_len: tokens drawn (int >= 1). chunk: C, tokens per chunk (int >= 1, <= seq_len).

    Returns:
        the matplotlib Figure. No tensors: two ints in.

    Raises:
        TypeError: a size not an int. ValueError: a size < 1, or chunk > seq_len.

    Source: Yang et al. 2024 (Gated Linear Attention / DeltaNet's chunkwise form); Dao & Gu 2024 (Mamba-2's SSD).
    """
    L = check_int("seq_len", seq_len, minimum=1)
    C = check_int("chunk", chunk, minimum=1)
    if C > L:
        raise ValueError(f"chunk must be <= seq_len={L}, got {C}")
    n = -(-L // C)
    cell = 0.26
    fig, ax = _inch_canvas(1.0 + n * (C * cell + 1.0), C * cell + 1.9)
    from matplotlib.patches import Rectangle

    for c in range(n):
        x0 = 0.5 + c * (C * cell + 1.0)
        size = min(C, L - c * C)
        for i in range(size):
            for j in range(size):
                colour = _LINEAR if j <= i else _BLOCKED
                ax.add_patch(Rectangle((x0 + j * cell, 0.55 + (C - 1 - i) * cell), cell, cell, facecolor=colour,
                                       alpha=0.75 if j <= i else 1.0, edgecolor="white"))
        ax.text(x0 + size * cell / 2, 0.35, f"chunk {c}: tokens {c * C}–{c * C + size - 1}", fontsize=_FONT,
                ha="center", va="center")
        top = 0.55 + C * cell + 0.55
        _box(ax, x0 + size * cell / 2, top, 0.75, 0.4, f"S after {c}", _LINEAR)
        _arrow(ax, (x0 + size * cell / 2, 0.55 + C * cell), (x0 + size * cell / 2, top - 0.2))
        if c + 1 < n:
            nx = 0.5 + (c + 1) * (C * cell + 1.0)
            _arrow(ax, (x0 + size * cell / 2 + 0.38, top), (nx - 0.05, 0.55 + C * cell), colour=_LINEAR)
    ax.text(0.5, C * cell + 1.75, "inside a chunk: causal products in parallel;  between chunks: the state",
            fontsize=_FONT, ha="left", va="center")
    return fig


def hybrid_stack_figure(groups: int = 12, linear_per_group: int = 3):
    """A 3:1 hybrid stack (Qwen3-Next, Qwen3.5, Kimi Linear): ``linear_per_group`` linear-attention layers (reddish
    purple, a fixed-size state each) then one gated softmax-attention layer (sky blue, a KV cache that grows), the
    group repeated ``groups`` times.

    Args:
        groups: int >= 1. linear_per_group: int >= 1.

    Returns:
        the matplotlib Figure. No tensors: two ints in.

    Raises:
        TypeError: not ints. ValueError: < 1.

    Source: Qwen3-Next's config (``layer_types``: 3 ``linear_attention`` then 1 ``full_attention``, 48 layers);
    Kimi Linear (3 KDA : 1 MLA).
    """
    g = check_int("groups", groups, minimum=1)
    r = check_int("linear_per_group", linear_per_group, minimum=1)
    items = [("linear attention\n(Gated DeltaNet)\nstate: fixed", _LINEAR)] * r
    items = items + [("gated softmax\nattention\nKV cache: grows", _GATED_ATTN)]
    fig, ax = _inch_canvas(0.6 + (r + 1) * 1.95 + 1.4, 2.0)
    xs = _row(ax, 1.0, items, w=1.6, h=0.95, gap=0.35, x0=0.3)
    ax.text(xs[-1] + 1.0, 1.0, f"× {g}\n= {g * (r + 1)} layers", fontsize=_TITLE, ha="left", va="center")
    ax.text(0.3, 1.75, f"one group of {r + 1} layers ({r}:1)", fontsize=_FONT, ha="left", va="center")
    return fig


__all__ += ["gated_attention_figure"]


def gated_attention_figure():
    """Qwen3-Next's gated attention: q_proj gives each head a query and as many gate logits; the query goes through
    q_norm, partial RoPE and attention; the gate logits through a sigmoid, which multiplies the head's output
    channel by channel before o_proj. All in gated attention's sky blue (not plain GQA's orange).

    Returns:
        the matplotlib Figure. Takes no arguments (no tensors).

    Raises:
        nothing of its own (matplotlib's errors propagate).

    Source: Qiu et al. 2025, "Gated Attention for Large Language Models" (position G1); transformers'
    ``Qwen3NextAttention``.
    """
    fig, ax = _inch_canvas(10.55, 2.6)
    xs = _row(ax, 1.85, [("x", _NEUTRAL), ("q_proj: per head\nquery | gate logits", _GATED_ATTN),
                         ("query: q_norm,\nRoPE on first E/4", _GATED_ATTN), ("attention\nwith K, V", _GATED_ATTN),
                         ("× σ(gate)\nper channel", _GATED_ATTN), ("o_proj", _GATED_ATTN)], w=1.45, gap=0.3)
    _box(ax, xs[3], 0.55, 1.45, 0.55, "σ(gate logits)", _GATED_ATTN)
    _arrow(ax, (xs[1], 1.54), (xs[3] - 0.73, 0.55), connection="arc3,rad=0.2")
    _arrow(ax, (xs[3] + 0.73, 0.55), (xs[4], 1.54), connection="arc3,rad=0.2")
    return fig


# ---------------------------------------------------------------------------------------------------------------
# Notebook 13: which keys each query reads, one grid per design.
# ---------------------------------------------------------------------------------------------------------------

__all__ += ["key_reads_figure"]


def key_reads_figure(panels, *, labels, columns: int = 3, cell: float = 0.13):
    """One grid per design: row t = query t, column s = key s, coloured by what reads it.

    Args:
        panels: a list of ``(title, codes)``: codes a (L, S) integer tensor, 0 where the query does not read the
            key (light grey), c >= 1 where branch c reads it (``PALETTE[c - 1]``).
        labels: the legend, one str per branch code 1, 2, ...
        columns: panels per row. cell: inches per grid cell.

    Returns:
        a matplotlib Figure.

    Raises:
        ValueError: no panel; a code outside [0, len(labels)]; columns or cell < 1 / <= 0.

    Source: the course's own (notebook 13); colours Okabe & Ito (2008).
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    check_int("columns", columns, minimum=1)
    if not panels:
        raise ValueError("panels must hold at least one (title, codes) pair, got none")
    if not cell > 0:
        raise ValueError(f"cell must be > 0 inches, got {cell}")
    for title, codes in panels:
        if int(codes.min()) < 0 or int(codes.max()) > len(labels):
            raise ValueError(f"the codes of panel {title!r} must lie in [0, {len(labels)}] (0 = not read, then one "
                             f"per label), got [{int(codes.min())}, {int(codes.max())}]")
    L, S = panels[0][1].shape
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(columns * (S * cell + 0.5), rows * (L * cell + 0.7) + 0.4),
                             squeeze=False)
    cmap = ListedColormap([MASK_COLORS[0]] + PALETTE[: len(labels)])
    for ax in axes.flat:
        ax.set_axis_off()
    for ax, (title, codes) in zip(axes.flat, panels):
        ax.set_axis_on()
        ax.imshow(codes.numpy(), cmap=cmap, vmin=0, vmax=len(labels), aspect="equal", interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(title, fontsize=_FONT, pad=3)
        ax.set_xlabel("key s →", fontsize=MIN_FONT_SIZE, labelpad=2)
        ax.set_ylabel("query t →", fontsize=MIN_FONT_SIZE, labelpad=2)
    handles = [Patch(facecolor=PALETTE[i], label=text) for i, text in enumerate(labels)]
    handles.append(Patch(facecolor=MASK_COLORS[0], label="not read"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=MIN_FONT_SIZE, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig
