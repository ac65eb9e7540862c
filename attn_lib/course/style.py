"""The course's colours: one colour-blind-safe palette and two colour maps for every figure.

A module of its own so that plotting (``viz``) and set-up (``_setup``) both read it without importing each
other. Source: Okabe & Ito (2008), "Color Universal Design"; matplotlib's perceptually uniform ``viridis``
and the diverging ``PuOr``, both readable with the common colour-vision deficiencies.
"""

from __future__ import annotations

__all__ = ["PALETTE", "SEQUENTIAL_CMAP", "DIVERGING_CMAP", "MASK_COLORS"]

#: Colour maps: attention weights (0..1) in viridis, signed differences in PuOr.
SEQUENTIAL_CMAP = "viridis"
DIVERGING_CMAP = "PuOr"
#: Okabe & Ito (2008): blue, orange, bluish green, reddish purple, sky blue, vermillion, yellow, black.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
#: Bool masks, one convention in every figure: index 0 (False, blocked) light grey, index 1 (True, may attend) blue.
#: ``matplotlib.colors.ListedColormap(MASK_COLORS)`` with vmin=0, vmax=1 draws a mask in it.
MASK_COLORS = ["#E8E8E8", PALETTE[0]]
