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

__all__ += []
