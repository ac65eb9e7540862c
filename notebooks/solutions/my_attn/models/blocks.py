"""The Transformer blocks, solved (notebook 07): the residual wiring around attn_lib's (or my) submodules."""

from __future__ import annotations

import attn_lib.models.blocks as _lib_blocks


class EncoderBlock(_lib_blocks.EncoderBlock):
    """Self-attention, then feed-forward; each in a residual connection and a LayerNorm (post- or pre-norm)."""

    def forward(self, x, padding_mask=None, *, need_weights=False):
        def attend(h):                                                                 # (B, S, D) -> (B, S, D)
            out, w = self.self_attn(h, h, h, padding_mask=padding_mask, need_weights=need_weights)
            return self.dropout1(out), w

        if self.norm_first:
            a, w = attend(self.norm1(x))
            x = x + a
            return x + self.dropout2(self.ff(self.norm2(x))), w
        a, w = attend(x)
        x = self.norm1(x + a)
        return self.norm2(x + self.dropout2(self.ff(x))), w


class DecoderBlock(_lib_blocks.DecoderBlock):
    """Causal self-attention, cross-attention to memory, feed-forward; each with a residual and a LayerNorm."""

    def forward(self, x, memory=None, *, padding_mask=None, memory_padding_mask=None, need_weights=False):
        if (self.cross_attn is None) != (memory is None):
            raise ValueError("memory (the encoder output, (B, S, D)) is required iff the block has cross-attention; "
                             f"cross_attention={self.cross_attn is not None}, memory "
                             f"{'None' if memory is None else tuple(memory.shape)}")

        def self_attend(h):                                                            # (B, L, D): causal
            out, w = self.self_attn(h, h, h, padding_mask=padding_mask, is_causal=True, need_weights=need_weights)
            return self.dropout1(out), w

        def cross_attend(h):                                                           # queries h, keys memory
            out, w = self.cross_attn(h, memory, memory, padding_mask=memory_padding_mask, need_weights=need_weights)
            return self.dropout2(out), w

        cw = None
        if self.norm_first:
            a, sw = self_attend(self.norm1(x))
            x = x + a
            if self.cross_attn is not None:
                a, cw = cross_attend(self.norm2(x))
                x = x + a
            return x + self.dropout3(self.ff(self.norm3(x))), sw, cw
        a, sw = self_attend(x)
        x = self.norm1(x + a)
        if self.cross_attn is not None:
            a, cw = cross_attend(x)
            x = self.norm2(x + a)
        return self.norm3(x + self.dropout3(self.ff(x))), sw, cw
