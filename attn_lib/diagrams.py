"""Drawn schematics of the machinery (matplotlib): no data, only boxes, arrows and labelled shapes.

Each function returns a :class:`matplotlib.figure.Figure` drawn in :data:`attn_lib.style.PALETTE` (Okabe & Ito,
colour-blind safe), readable at 110 dpi. A notebook shows the figure and, beside it, a sentence that says in
words what the figure draws. The shapes use attn_lib's letters (the legend of :mod:`attn_lib.attention`: B, H,
Hkv, L, S, E, Ev; d_model, num_heads, head_dim).

Sections: the diagrams of notebooks 03-05 (data flow, masks, heads, blocks) and those of notebooks 08-09 (the KV
cache, the tiling loop).
"""

from __future__ import annotations

from attn_lib.style import PALETTE  # noqa: F401  used by the drawing functions

__all__: list[str] = []


# ---------------------------------------------------------------------------------------------------------------
# Notebooks 03-05: the Q/K/V data flow, the mask shapes, the head split, pre-LN against post-LN.
# ---------------------------------------------------------------------------------------------------------------

__all__ += []









# ---------------------------------------------------------------------------------------------------------------
# Notebooks 08-09: the KV cache as it grows, the tiling loop.
# ---------------------------------------------------------------------------------------------------------------

__all__ += ["kv_cache_diagram", "tiling_diagram"]

# The two figures of this section draw in inches: one Axes fills the figure, its data units are inches, so a
# cell, a gap and an 8-pt line of text keep their size whatever the arguments (8 pt is 0.11 inch; no text is smaller).
_LINE = 0.2  # inches per line of 8-pt text


def _canvas(width: float, height: float):
    """A figure of ``width`` x ``height`` inches whose one Axes maps data units to inches (no axis drawn)."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    return fig, ax


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
        a matplotlib Figure (about 8.6 inches wide), colours from :data:`attn_lib.style.PALETTE`.

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
    fig, ax = _canvas(width, height)

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
        a matplotlib Figure (9 inches wide), colours from :data:`attn_lib.style.PALETTE`.

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

    fig, ax = _canvas(9.0, 4.9)
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
