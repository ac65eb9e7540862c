"""Your Transformer blocks (mirrors attn_lib.models.blocks; notebook 07). B batch, S source length, L target length,
D = d_model, H heads.

Given (inherited from attn_lib's classes, so checkpoints and attn_lib's models that build these blocks work on yours):
``__init__`` with the same arguments, which creates ``self_attn`` (a MultiHeadAttention: yours once it passes its
check), ``cross_attn`` (DecoderBlock; None with cross_attention=False), ``ff`` (the position-wise feed-forward),
``norm1``, ``norm2`` (, ``norm3``) (LayerNorm), ``dropout1`` ... (nn.Dropout) and ``norm_first``. Yours: ``forward``.
"""

from __future__ import annotations

import attn_lib.models.blocks as _lib_blocks
from my_attn._todo import todo


class EncoderBlock(_lib_blocks.EncoderBlock):
    """Your encoder block (notebook 07, section "3 · One model, three kinds of attention"; Vaswani et al. 2017, §3.1).

    ``forward(x (B, S, D), padding_mask (B, S) bool or None, *, need_weights=False)`` returns
    ``(x (B, S, D), self-attention weights (B, H, S, S) or None)``. The self-attention: queries, keys and values all
    from its input, no causal mask, ``padding_mask`` passed on. Each sub-layer (self-attention, then ``ff``) is wrapped
    in a residual connection and a LayerNorm, with ``dropout1`` / ``dropout2`` on the sub-layer's output:

    - ``norm_first=False`` (the paper, post-norm): x = norm1(x + dropout1(SA(x))); x = norm2(x + dropout2(ff(x)));
    - ``norm_first=True`` (pre-norm): x = x + dropout1(SA(norm1(x))); x = x + dropout2(ff(norm2(x))).
    """

    def forward(self, x, padding_mask=None, *, need_weights=False):
        todo("EncoderBlock", "07", "3 · One model, three kinds of attention")


class DecoderBlock(_lib_blocks.DecoderBlock):
    """Your decoder block (notebook 07, section "3 · One model, three kinds of attention"; Vaswani et al. 2017, §3.1,
    §3.2.3).

    ``forward(x (B, L, D), memory (B, S, D) or None, *, padding_mask (B, L), memory_padding_mask (B, S),
    need_weights=False)`` returns ``(x (B, L, D), self weights (B, H, L, L) or None, cross weights (B, H, L, S) or
    None)``. Three sub-layers, each with a residual connection, a LayerNorm (norm1, norm2, norm3) and a dropout
    (dropout1, dropout2, dropout3), post-norm or pre-norm as in EncoderBlock:

    1. masked self-attention: ``self_attn`` on x with ``is_causal=True`` and ``padding_mask``;
    2. cross-attention (skipped when ``cross_attn`` is None): ``cross_attn`` with queries from x, keys and values from
       ``memory``, ``padding_mask=memory_padding_mask``, not causal;
    3. ``ff``.

    The checks of ``memory`` (required iff the block has cross-attention) are given below.
    """

    def forward(self, x, memory=None, *, padding_mask=None, memory_padding_mask=None, need_weights=False):
        if (self.cross_attn is None) != (memory is None):
            raise ValueError("memory (the encoder output, (B, S, D)) is required iff the block has cross-attention; "
                             f"cross_attention={self.cross_attn is not None}, memory "
                             f"{'None' if memory is None else tuple(memory.shape)}")
        todo("DecoderBlock", "07", "3 · One model, three kinds of attention")
