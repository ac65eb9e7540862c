"""The building blocks of a Transformer: position-wise feed-forward, encoder block, decoder block.

Vaswani et al. (2017), "Attention Is All You Need", §3.1-3.3. Each sub-layer is wrapped in a
residual connection followed by layer normalisation ("Add & Norm")::

    x = LayerNorm(x + Dropout(Sublayer(x)))          # norm_first=False: the paper ("post-norm")
    x = x + Dropout(Sublayer(LayerNorm(x)))          # norm_first=True: GPT-2, T5, most LLMs ("pre-norm")

The blocks compute exactly what ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer``
compute (``batch_first=True``, same ``norm_first``); ``tests/models/test_seq2seq.py`` copies weights
between them and compares. The attention inside is attn_lib's own
:class:`attn_lib.mha.MultiHeadAttention` (True = may attend / real token, attn_lib's one mask convention).

The three kinds of attention of a Transformer live here:

1. encoder self-attention, :class:`EncoderBlock` (``self.self_attn``, no mask except padding: every
   source token sees every other one, left and right);
2. masked decoder self-attention, :class:`DecoderBlock` (``self.self_attn`` with ``is_causal=True``:
   target position t sees positions 0..t only);
3. encoder-decoder (cross-) attention, :class:`DecoderBlock` (``self.cross_attn``: queries from the
   decoder, keys and values from the encoder output ``memory``; masked only where the source is padding).
"""

from __future__ import annotations

import torch
from torch import nn

from attn_lib._checks import check_head_dim, check_int, check_number
from attn_lib.mha import MultiHeadAttention

__all__ = ["FeedForward", "SwiGLU", "EncoderBlock", "DecoderBlock"]

_ACTIVATIONS = {"relu": nn.functional.relu, "gelu": nn.functional.gelu}


def _check_dims(d_model, num_heads, d_ff, dropout):
    """The blocks' one size rule, through attn_lib._checks: TypeError for a wrong type, ValueError for a bad value."""
    check_head_dim(d_model, num_heads)  # d_model and num_heads ints >= 1, num_heads divides d_model
    check_int("d_ff", d_ff, minimum=1)
    dropout = check_number("dropout", dropout, minimum=0.0)
    if not dropout < 1.0:
        raise ValueError(f"dropout must be a number in [0, 1), got {dropout}")


class FeedForward(nn.Module):
    """Position-wise feed-forward network, applied to each position separately and identically.

    ``FFN(x) = activation(x W1 + b1) W2 + b2`` (Vaswani et al. 2017, §3.3, eq. 2; ReLU there,
    GELU in BERT and GPT-2). Submodules ``linear1`` (d_model -> d_ff), ``linear2`` (d_ff -> d_model),
    named as in ``torch.nn.TransformerEncoderLayer``.

    Args:
        d_model: model width D. d_ff: hidden width (the paper: 4 * d_model).
        dropout: dropout after the activation. activation: "relu" or "gelu".

    Shapes: x (..., D) -> (..., D), e.g. (B, L, D) -> (B, L, D); D = d_model (attn_lib's legend adds D, the
    model width, to B and L).

    Dtypes: x floating, of the module's dtype (float32 by default; ``.double()`` for float64); the output has it.

    Raises:
        TypeError: d_model or d_ff not an int (``16.0``, ``True``), dropout not a number.
        ValueError: d_model or d_ff < 1, dropout outside [0, 1), activation not "relu" or "gelu".
        ``forward`` raises nothing of its own (torch's ``nn.Linear`` refuses a last dim other than D).

    Source: Vaswani et al. 2017, §3.3, Eq. 2; equal to the feed-forward part of torch.nn.TransformerEncoderLayer.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        _check_dims(d_model, 1, d_ff, dropout)
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.activation = activation
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, L, D) -> (B, L, d_ff) -> (B, L, D)
        return self.linear2(self.dropout(_ACTIVATIONS[self.activation](self.linear1(x))))


class SwiGLU(nn.Module):
    """The gated feed-forward network of LLaMA: ``down(silu(gate(x)) * up(x))``, applied to each position alone.

    Three bias-free linear maps: ``gate_proj`` and ``up_proj`` (d_model -> d_ff) and ``down_proj`` (d_ff -> d_model),
    named as in HuggingFace's ``LlamaMLP``. The gate's SiLU (``x * sigmoid(x)``, also called swish) decides, per hidden
    unit, how much of the ``up_proj`` value passes. It has three weight matrices where :class:`FeedForward` has two,
    so LLaMA shrinks d_ff to about 8/3 d_model to keep the parameter count.

    Args:
        d_model: model width D (an int >= 1). d_ff: hidden width (an int >= 1).

    Shapes: x (..., D) -> (..., D), e.g. (B, L, D) -> (B, L, D).

    Dtypes: x floating, of the module's dtype (float32 by default; ``.double()`` for float64); the output has it.

    Raises:
        TypeError: d_model or d_ff not an int (``16.0``, ``True``).
        ValueError: d_model or d_ff < 1.
        ``forward`` raises nothing of its own (torch's ``nn.Linear`` refuses a last dim other than D).

    Source: Shazeer 2020, "GLU Variants Improve Transformer", eq. 6 (FFN_SwiGLU, bias-free); Touvron et al. 2023
    (LLaMA), section 2.2. Equal to transformers' ``LlamaMLP`` with ``hidden_act="silu"``, ``mlp_bias=False``
    (tests/models/test_lm_from_hf.py copies the weights and compares in float64).
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        _check_dims(d_model, 1, d_ff, 0.0)
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, L, D) -> two (B, L, d_ff): the gate, through SiLU, scales the value unit by unit -> (B, L, D)
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class EncoderBlock(nn.Module):
    """One encoder layer: bidirectional multi-head self-attention, then the feed-forward network.

    Each sub-layer has a residual connection and a LayerNorm (Vaswani et al. 2017, §3.1). Equal to
    ``torch.nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout, activation, batch_first=True,
    norm_first=norm_first)``. Used by the encoder of :class:`attn_lib.models.Seq2SeqTransformer` and
    by :class:`attn_lib.models.EncoderOnly` (BERT-like).

    Args:
        d_model: model width D. num_heads: H, must divide D. d_ff: feed-forward width (default 4 D).
        dropout: dropout on each sub-layer's output (and inside the feed-forward network).
        norm_first: False = post-norm (the paper), True = pre-norm.
        activation: "relu" (the paper) or "gelu" (BERT).
        layer_norm_eps: the LayerNorms' epsilon (default 1e-5, torch's).

    Shapes: x (B, S, D) -> (B, S, D); weights (B, H, S, S). Dtypes: x floating (float32 by default, float64 after
    ``.double()``), of the module's dtype; padding_mask bool or 0/1 integers.

    Raises:
        TypeError: d_model, num_heads or d_ff not an int (``16.0``), dropout not a number.
        ValueError: a width < 1, H does not divide D, dropout outside [0, 1), an unknown activation.
        ``forward``: as :class:`attn_lib.mha.MultiHeadAttention` (x not (B, S, D) floating of the module's dtype,
        a bad padding_mask).

    Source: Vaswani et al. 2017, §3.1; matches torch.nn.TransformerEncoderLayer (batch_first=True).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int | None = None, dropout: float = 0.0, *,
                 norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5):
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        _check_dims(d_model, num_heads, d_ff, dropout)
        self.norm_first = bool(norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _sa(self, x, padding_mask, need_weights):
        # ENCODER SELF-ATTENTION: queries, keys and values all come from x; no causal mask, so each
        # token sees the whole source, left and right; only padding keys are hidden.
        out, w = self.self_attn(x, x, x, padding_mask=padding_mask, need_weights=need_weights)
        return self.dropout1(out), w

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None, *,
                need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Args:
            x: (B, S, D) source representations.
            padding_mask: bool (B, S), True = real token; None = no padding.
            need_weights: also return the self-attention weights.

        Returns:
            (x (B, S, D), weights (B, H, S, S) or None).
        """
        if self.norm_first:
            a, w = self._sa(self.norm1(x), padding_mask, need_weights)
            x = x + a
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            a, w = self._sa(x, padding_mask, need_weights)
            x = self.norm1(x + a)  # Add & Norm
            x = self.norm2(x + self.dropout2(self.ff(x)))  # Add & Norm
        return x, w


class DecoderBlock(nn.Module):
    """One decoder layer: masked self-attention, cross-attention over the encoder output, feed-forward.

    Vaswani et al. (2017), §3.1 and §3.2.3. Equal to ``torch.nn.TransformerDecoderLayer(d_model,
    num_heads, d_ff, dropout, activation, batch_first=True, norm_first=norm_first)`` called with a
    causal ``tgt_mask``. With ``cross_attention=False`` the middle sub-layer is absent: that is the
    block of a GPT-style decoder-only model.

    Args:
        d_model, num_heads, d_ff, dropout, norm_first, activation: as in :class:`EncoderBlock`.
        cross_attention: include the encoder-decoder attention sub-layer.

    Shapes: x (B, L, D), memory (B, S, D) -> (B, L, D). Dtypes: floating, the module's dtype (float32 by default);
    padding masks bool or 0/1 integers.

    Raises:
        TypeError / ValueError: as :class:`EncoderBlock`.

    Source: Vaswani et al. 2017, §3.1 and §3.2.3; matches torch.nn.TransformerDecoderLayer (batch_first=True).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int | None = None, dropout: float = 0.0, *,
                 norm_first: bool = False, activation: str = "relu", layer_norm_eps: float = 1e-5,
                 cross_attention: bool = True):
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        _check_dims(d_model, num_heads, d_ff, dropout)
        self.norm_first = bool(norm_first)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout) if cross_attention else None
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps) if cross_attention else None
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def _sa(self, x, padding_mask, need_weights):
        # MASKED DECODER SELF-ATTENTION: is_causal=True, so target position t attends to positions
        # 0..t only and cannot peek at the tokens it will be trained to predict.
        out, w = self.self_attn(x, x, x, padding_mask=padding_mask, is_causal=True, need_weights=need_weights)
        return self.dropout1(out), w

    def _ca(self, x, memory, memory_padding_mask, need_weights):
        # CROSS-ATTENTION: queries from the decoder (x, the output of the masked self-attention
        # after Add & Norm), keys and values from the encoder output `memory`. No causal mask:
        # every target position may read every source position; only source padding is hidden.
        out, w = self.cross_attn(x, memory, memory, padding_mask=memory_padding_mask, need_weights=need_weights)
        return self.dropout2(out), w

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, *,
                padding_mask: torch.Tensor | None = None, memory_padding_mask: torch.Tensor | None = None,
                need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Args:
            x: (B, L, D) target representations (teacher forcing: the shifted target).
            memory: (B, S, D) the encoder output; required iff the block has cross-attention.
            padding_mask: bool (B, L), True = real target token; None = no padding.
            memory_padding_mask: bool (B, S), True = real source token; None = no padding.
            need_weights: also return the attention weights.

        Returns:
            (x (B, L, D), self-attention weights (B, H, L, L) or None,
            cross-attention weights (B, H, L, S) or None).

        Raises:
            ValueError: ``memory`` missing for a block with cross-attention, or given to one without,
            or its batch size / width differ from ``x``'s; the rest as :class:`attn_lib.mha.MultiHeadAttention`.
        """
        if self.cross_attn is None:
            if memory is not None:
                raise ValueError("this DecoderBlock has no cross-attention (cross_attention=False); memory must be None")
        else:
            if memory is None:
                raise ValueError("memory (the encoder output, (B, S, D)) is required for cross-attention")
            if memory.dim() != 3 or memory.shape[0] != x.shape[0] or memory.shape[-1] != x.shape[-1]:
                raise ValueError(
                    f"memory must be (B, S, D) with B={x.shape[0]} and D={x.shape[-1]} like x; "
                    f"got shape {tuple(memory.shape)}"
                )
        cw = None
        if self.norm_first:
            a, sw = self._sa(self.norm1(x), padding_mask, need_weights)
            x = x + a
            if self.cross_attn is not None:
                a, cw = self._ca(self.norm2(x), memory, memory_padding_mask, need_weights)
                x = x + a
            x = x + self.dropout3(self.ff(self.norm3(x)))
        else:
            a, sw = self._sa(x, padding_mask, need_weights)
            x = self.norm1(x + a)  # Add & Norm
            if self.cross_attn is not None:
                a, cw = self._ca(x, memory, memory_padding_mask, need_weights)
                x = self.norm2(x + a)  # Add & Norm
            x = self.norm3(x + self.dropout3(self.ff(x)))  # Add & Norm
        return x, sw, cw
