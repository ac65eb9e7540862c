"""Drawn schematics of the machinery (matplotlib): no data, only boxes, arrows and labelled shapes.

Each function returns a :class:`matplotlib.figure.Figure` drawn in :data:`attn_lib.style.PALETTE` (Okabe & Ito,
colour-blind safe), readable at 110 dpi. A notebook shows the figure and, beside it, a sentence that says in
words what the figure draws. The shapes use attn_lib's letters (the legend of :mod:`attn_lib.attention`: B, H,
Hkv, L, S, E, Ev; d_model, num_heads, head_dim).

Sections: the diagrams of notebooks 03-05 (data flow, masks, heads, blocks) and those of notebooks 08-09 (the KV
cache, the tiling loop).
"""

from __future__ import annotations

from attn_lib._checks import check_int
from attn_lib.style import PALETTE  # noqa: F401  used by the drawing functions

__all__: list[str] = []


# ---------------------------------------------------------------------------------------------------------------
# Notebooks 03-05: the Q/K/V data flow, the mask shapes, the head split, pre-LN against post-LN.
# ---------------------------------------------------------------------------------------------------------------

__all__ += ["MIN_FONT_SIZE", "qkv_flow_figure", "mask_shapes_figure", "head_split_figure", "transformer_block_figure"]

#: The smallest font size (points) any text of these diagrams uses: readable at 110 dpi, the notebooks' size.
MIN_FONT_SIZE = 8.0

_FONT = 9.0  # box labels
_TITLE = 10.0  # titles
_BLOCKED = "#E8E8E8"  # a blocked mask cell: light grey (True cells are PALETTE[0], blue)


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
        a matplotlib Figure, 8 x 3.6 inches, colours from :data:`attn_lib.style.PALETTE`.

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
    ax.imshow(m.numpy(), cmap=ListedColormap([_BLOCKED, PALETTE[0]]), vmin=0, vmax=1, aspect="equal")
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
        a matplotlib Figure, 8 inches wide, colours from :data:`attn_lib.style.PALETTE`.

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

    Left: x (B, L, d_model), one row per token, one numbered cell per feature, coloured by the head it goes
    to. Middle: ``view(B, L, H, E)`` cuts each row into H blocks of E = d_model / H features (no data moves).
    Right: ``transpose(1, 2)`` gives (B, H, L, E): head h owns an (L, E) matrix of features h·E .. (h+1)·E - 1.
    The arrow back is the merge, ``transpose(1, 2)`` then ``reshape(B, L, H·E)``, with H·E = d_model. The same
    steps as :func:`attn_lib.mha.split_heads` and :func:`attn_lib.mha.merge_heads` (no tensors are computed).

    Args:
        d_model: an int in [1, 12]. num_heads: H, an int in [1, 6] that divides d_model.
        tokens: the L row labels, a list or tuple of 1 to 4 str.

    Returns:
        a matplotlib Figure, at most 8.6 inches wide, colours from :data:`attn_lib.style.PALETTE`.

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

    def cell(x, y, feature):
        head = feature // E
        colour = PALETTE[head % 6]
        ax.add_patch(Rectangle((x, y), 1, 1, facecolor=colour, alpha=0.35, edgecolor=colour, linewidth=1.0))
        ax.text(x + 0.5, y + 0.5, str(feature), ha="center", va="center", fontsize=MIN_FONT_SIZE, color=PALETTE[7])

    row_y = [block_h - (i + 1) for i in range(L)]  # token i's row (bottom edge), top to bottom
    for i, tok in enumerate(tokens):
        ax.text(x1 - 0.2, row_y[i] + 0.5, tok, ha="right", va="center", fontsize=MIN_FONT_SIZE + 1)
        for f in range(D):
            cell(x1 + f, row_y[i], f)
            cell(x2 + f + (f // E) * gap, row_y[i], f)
    for h in range(H):
        base = block_h - h * (L + 1.0)
        for i in range(L):
            for e in range(E):
                cell(x3 + e, base - (i + 1), h * E + e)
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
        a matplotlib Figure, 8 x 5.4 inches, colours from :data:`attn_lib.style.PALETTE`.

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

__all__ += []
