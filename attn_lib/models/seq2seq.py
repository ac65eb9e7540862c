"""Two of the three Transformer families of notebook 07, built from the 2017 blocks.

- :class:`Seq2SeqTransformer` -- encoder-decoder (Vaswani et al. 2017; also T5, Raffel et al. 2020):
  the encoder reads the whole source with bidirectional self-attention, the decoder writes the
  target one token at a time with masked self-attention and reads the source through cross-attention.
- :class:`EncoderOnly` -- BERT-like (Devlin et al. 2019): a stack of :class:`EncoderBlock`; every
  position sees every other one; one prediction per position, all in a single pass.

The third family, decoder-only (GPT-like, Radford et al. 2018), is attn_lib's one decoder-only language model,
:class:`attn_lib.models.lm.DecoderLM` (LLaMA's layout: pre-norm RMSNorm, RoPE, no cross-attention); its date-task
framing is :func:`attn_lib.course.train.decoder_only_inputs`.

Both take token ids (long tensors) and bool padding masks (True = real token), and give
logits. The models know nothing of any task: the date task's text-in, text-out path
(:func:`attn_lib.course.train.translate`) and its attention measure (:func:`attn_lib.course.train.span_hit_rate`)
live in :mod:`attn_lib.course.train`.

The two architectures are built from the same blocks and compared in one table of notebook 07; they are read
together.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from attn_lib._checks import check_choice, check_int, check_padding_mask, check_token_ids
from attn_lib.models.blocks import DecoderBlock, EncoderBlock
from attn_lib.models.decoding import _evaluating, check_max_new_tokens, greedy_loop
from attn_lib.positional import LearnedPositionalEmbedding, sinusoidal_positional_encoding

__all__ = [
    "Seq2SeqTransformer", "Seq2SeqOutput", "EncoderOnly", "ModelOutput",
]


# --------------------------------------------------------------------------- input checks
def _check_mask(name: str, mask, ids: torch.Tensor) -> torch.Tensor | None:
    return None if mask is None else check_padding_mask(name, mask, ids.shape)  # the one rule, in _checks


class _Embedding(nn.Module):
    """Token embedding * sqrt(d_model) + position encoding (Vaswani et al. 2017, §3.4 and §3.5).

    The token table is initialised from N(0, 1/d_model), so that after the sqrt(d_model) scale the
    token vectors have unit-size entries, like the sinusoidal encodings they are added to.
    """

    def __init__(self, vocab_size: int, d_model: int, max_len: int, positional: str, pad_id: int):
        super().__init__()
        check_choice("positional", positional, ("sinusoidal", "learned"))
        if isinstance(pad_id, bool) or not isinstance(pad_id, int):
            raise TypeError(f"pad_id must be an int in 0..{vocab_size - 1}, got {type(pad_id).__name__} {pad_id!r}")
        if not 0 <= pad_id < vocab_size:
            raise ValueError(f"pad_id must be an int in 0..{vocab_size - 1} (the vocabulary size is {vocab_size}), got {pad_id!r}")
        self.d_model, self.max_len, self.positional = d_model, max_len, positional
        self.token = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.token.weight, std=d_model ** -0.5)
        with torch.no_grad():
            self.token.weight[pad_id].zero_()
        if positional == "sinusoidal":
            self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False)
        else:
            self.pos = LearnedPositionalEmbedding(max_len, d_model)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        L = ids.shape[1]
        pos = self.pe[:L] if self.positional == "sinusoidal" else self.pos(L)  # (L, D)
        return self.token(ids) * math.sqrt(self.d_model) + pos  # (B, L, D)


def _check_config(**kw):
    for name, v in kw.items():
        check_int(name, v, minimum=1)  # TypeError for 16.0, ValueError for 0


# --------------------------------------------------------------------------- encoder-decoder
class Seq2SeqOutput(NamedTuple):
    """What :meth:`Seq2SeqTransformer.forward` returns.

    Attributes:
        logits: (B, L, tgt_vocab_size) scores of the next target token at each target position.
        encoder_attentions: per encoder layer, (B, H, S, S) self-attention weights (or None).
        decoder_self_attentions: per decoder layer, (B, H, L, L) masked self-attention weights (or None).
        cross_attentions: per decoder layer, (B, H, L, S) cross-attention weights (or None):
            row t = how target position t (predicting target token t) spreads its attention over the source.

    Dtypes: every tensor floating, the model's dtype (float32 by default); the weights tuples are None unless
    ``need_weights=True``.

    Raises:
        nothing of its own: a NamedTuple of what ``forward`` computed, with no checks.

    Source: the course's own; close to HuggingFace's Seq2SeqLMOutput (whose fields are encoder_attentions,
    decoder_attentions, cross_attentions).
    """

    logits: torch.Tensor
    encoder_attentions: tuple | None = None
    decoder_self_attentions: tuple | None = None
    cross_attentions: tuple | None = None


class Seq2SeqTransformer(nn.Module):
    """A compact encoder-decoder Transformer (Vaswani et al. 2017, Figure 1) with greedy decoding.

    Embeddings scaled by sqrt(d_model) plus sinusoidal positions (§3.4-3.5), ``num_encoder_layers``
    :class:`EncoderBlock` s, ``num_decoder_layers`` :class:`DecoderBlock` s, then a linear layer to the
    target vocabulary. With ``norm_first=True`` a final LayerNorm follows each stack (pre-norm needs it).

    Where the three kinds of attention are: ``self.encoder[i].self_attn`` (encoder self-attention),
    ``self.decoder[i].self_attn`` (masked self-attention), ``self.decoder[i].cross_attn`` (cross-attention).

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes (ids 0 .. size-1).
        d_model: width D. num_heads: H (must divide D). d_ff: feed-forward width (default 4 D).
        num_encoder_layers, num_decoder_layers: stack depths.
        dropout: dropout inside the blocks. max_len: longest source or target sequence.
        norm_first: pre-norm blocks instead of the paper's post-norm. pad_id: id of ``<pad>`` in both vocabularies.

    Shapes: ``forward(src (B, S), tgt_in (B, L))`` -> logits (B, L, tgt_vocab_size). Dtypes: int64 (or any
    integer) ids, bool or 0/1 padding masks; float32 logits (the parameters' dtype).

    Raises:
        TypeError: a size (vocabularies, d_model, num_heads, layers, max_len, d_ff) or pad_id not an int, dropout
            not a number.
        ValueError: a size < 1, H does not divide D, dropout outside [0, 1), pad_id outside the vocabulary.
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, *, d_model: int = 64, num_heads: int = 4,
                 num_encoder_layers: int = 2, num_decoder_layers: int = 2, d_ff: int | None = None,
                 dropout: float = 0.0, max_len: int = 64, norm_first: bool = False, pad_id: int = 0):
        super().__init__()
        _check_config(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, d_model=d_model,
                      num_heads=num_heads, num_encoder_layers=num_encoder_layers,
                      num_decoder_layers=num_decoder_layers, max_len=max_len)
        self.config = dict(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, d_model=d_model,
                           num_heads=num_heads, num_encoder_layers=num_encoder_layers,
                           num_decoder_layers=num_decoder_layers, d_ff=d_ff, dropout=dropout,
                           max_len=max_len, norm_first=norm_first, pad_id=pad_id)
        self.src_vocab_size, self.tgt_vocab_size, self.max_len, self.pad_id = src_vocab_size, tgt_vocab_size, max_len, pad_id
        self.num_heads = num_heads
        self.src_embed = _Embedding(src_vocab_size, d_model, max_len, "sinusoidal", pad_id)
        self.tgt_embed = _Embedding(tgt_vocab_size, d_model, max_len, "sinusoidal", pad_id)
        self.encoder = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff, dropout, norm_first=norm_first) for _ in range(num_encoder_layers)
        )
        self.decoder = nn.ModuleList(
            DecoderBlock(d_model, num_heads, d_ff, dropout, norm_first=norm_first) for _ in range(num_decoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.output = nn.Linear(d_model, tgt_vocab_size)  # decoder state -> logits over the target vocabulary

    def encode(self, src: torch.Tensor, src_padding_mask: torch.Tensor | None = None, *,
               need_weights: bool = False) -> tuple[torch.Tensor, tuple | None]:
        """Run the encoder.

        Args:
            src: long (B, S) source ids. src_padding_mask: bool (B, S), True = real token.

        Returns:
            (memory (B, S, D), per-layer self-attention weights (B, H, S, S) or None).

        Raises:
            TypeError/ValueError: ids not an integer (B, S) tensor, ids outside the vocabulary,
            longer than max_len, or a mask of the wrong dtype/shape.
        """
        src = check_token_ids("src", src, vocab_size=self.src_vocab_size, max_len=self.max_len)
        src_padding_mask = _check_mask("src_padding_mask", src_padding_mask, src)
        x = self.src_embed(src)  # (B, S, D)
        weights = []
        for block in self.encoder:
            x, w = block(x, src_padding_mask, need_weights=need_weights)  # encoder SELF-attention inside
            weights.append(w)
        return self.encoder_norm(x), (tuple(weights) if need_weights else None)

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_padding_mask: torch.Tensor | None = None,
               tgt_padding_mask: torch.Tensor | None = None, *, need_weights: bool = False):
        """Run the decoder on the (shifted) target given the encoder output.

        Args:
            tgt_in: long (B, L): ``<s>`` then the target tokens so far. memory: (B, S, D) from :meth:`encode`.
            src_padding_mask: bool (B, S). tgt_padding_mask: bool (B, L).

        Returns:
            (logits (B, L, tgt_vocab_size), self-attention weights per layer, cross-attention weights per layer);
            the weight tuples are None unless ``need_weights``.

        Raises:
            TypeError/ValueError: tgt_in or tgt_padding_mask as in :meth:`encode`; memory not (B, S, D) like
            the decoder's (:class:`DecoderBlock`); src_padding_mask not (B, S) (the attention's check).
        """
        tgt_in = check_token_ids("tgt_in", tgt_in, vocab_size=self.tgt_vocab_size, max_len=self.max_len)
        tgt_padding_mask = _check_mask("tgt_padding_mask", tgt_padding_mask, tgt_in)
        y = self.tgt_embed(tgt_in)  # (B, L, D)
        self_w, cross_w = [], []
        for block in self.decoder:
            # masked self-attention, then CROSS-attention over `memory`, then feed-forward
            y, sw, cw = block(y, memory, padding_mask=tgt_padding_mask,
                              memory_padding_mask=src_padding_mask, need_weights=need_weights)
            self_w.append(sw)
            cross_w.append(cw)
        logits = self.output(self.decoder_norm(y))  # (B, L, V_tgt)
        if not need_weights:
            return logits, None, None
        return logits, tuple(self_w), tuple(cross_w)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, src_padding_mask: torch.Tensor | None = None,
                tgt_padding_mask: torch.Tensor | None = None, *, need_weights: bool = False) -> Seq2SeqOutput:
        """Teacher-forced pass: logits for every target position at once (training and analysis).

        Args:
            src: long (B, S). tgt_in: long (B, L) (``<s>`` + target). Masks: bool, True = real token.
            need_weights: also return every attention weight.

        Returns:
            :class:`Seq2SeqOutput`: logits (B, L, tgt_vocab_size), float.

        Raises:
            TypeError/ValueError: as :meth:`encode` and :meth:`decode`.
        """
        memory, enc_w = self.encode(src, src_padding_mask, need_weights=need_weights)
        logits, self_w, cross_w = self.decode(tgt_in, memory, src_padding_mask, tgt_padding_mask,
                                              need_weights=need_weights)
        return Seq2SeqOutput(logits, enc_w, self_w, cross_w)

    @torch.no_grad()
    def generate(self, src: torch.Tensor, src_padding_mask: torch.Tensor | None = None, *,
                 max_new_tokens: int = 16, bos_id: int = 1, eos_id: int = 2) -> torch.Tensor:
        """Generate targets one token at a time, always taking the most likely next token.

        The source is encoded once; at step t the decoder reads ``<s>`` + the t tokens chosen so far
        and its last position's logits pick token t. Stops when every sequence has produced ``</s>``
        or after ``max_new_tokens``.

        Args:
            src: long (B, S) source ids. src_padding_mask: bool (B, S), True = real token.
            max_new_tokens: int >= 0 with 1 + max_new_tokens <= max_len (``<s>`` plus the new tokens).
            bos_id, eos_id: ids of ``<s>`` and ``</s>`` in the target vocabulary.

        Returns:
            long (B, T_out) generated ids, T_out <= max_new_tokens, without ``<s>``; a sequence's ``</s>``
            is kept, and positions after it hold ``pad_id``.

        Raises:
            TypeError: max_new_tokens, bos_id or eos_id not an int; bad src (see :meth:`encode`).
            ValueError: max_new_tokens < 0 or > max_len - 1; bos_id or eos_id outside the target vocabulary.
        """
        # one rule for every decoder (attn_lib.models.decoding): <s> + the new tokens fit in max_len
        check_max_new_tokens(max_new_tokens, prompt_len=1, max_len=self.max_len)
        for name, i in (("bos_id", bos_id), ("eos_id", eos_id)):
            check_int(name, i, minimum=0, maximum=self.tgt_vocab_size - 1)
        with _evaluating(self):  # dropout off while decoding, the mode restored after
            memory, _ = self.encode(src, src_padding_mask)
            B = memory.shape[0]
            bos = torch.full((B, 1), bos_id, dtype=torch.long, device=memory.device)  # (B, 1) = <s>

            def next_logits(new: torch.Tensor) -> torch.Tensor:
                logits, _, _ = self.decode(torch.cat([bos, new], dim=1), memory, src_padding_mask)  # (B, t+1, V)
                return logits[:, -1]

            return greedy_loop(next_logits, B, max_new_tokens, eos_id=eos_id, pad_id=self.pad_id,
                               device=memory.device)


# --------------------------------------------------------------------------- encoder-only
class ModelOutput(NamedTuple):
    """What :class:`EncoderOnly` returns.

    Attributes:
        logits: (B, L, num_outputs) one score vector per position.
        attentions: per layer, (B, H, L, L) self-attention weights, or None.

    Dtypes: floating, the model's dtype (float32 by default).

    Raises:
        nothing of its own: a NamedTuple of what ``forward`` computed, with no checks.

    Source: the course's own (HuggingFace's model outputs name the fields logits and attentions too).
    """

    logits: torch.Tensor
    attentions: tuple | None = None


class _Stack(nn.Module):
    """Embedding -> blocks -> (final norm) -> linear head: EncoderOnly's stack (``_block`` runs one block)."""

    def __init__(self, block_cls, vocab_size, num_outputs, d_model, num_heads, num_layers, d_ff, dropout,
                 max_len, positional, norm_first, pad_id, block_kw):
        super().__init__()
        _check_config(vocab_size=vocab_size, num_outputs=num_outputs, d_model=d_model, num_heads=num_heads,
                      num_layers=num_layers, max_len=max_len)
        self.vocab_size, self.num_outputs, self.max_len, self.pad_id = vocab_size, num_outputs, max_len, pad_id
        self.num_heads = num_heads
        self.embed = _Embedding(vocab_size, d_model, max_len, positional, pad_id)
        self.blocks = nn.ModuleList(
            block_cls(d_model, num_heads, d_ff, dropout, norm_first=norm_first, **block_kw) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.output = nn.Linear(d_model, num_outputs)

    def forward(self, ids: torch.Tensor, padding_mask: torch.Tensor | None = None, *,
                need_weights: bool = False) -> ModelOutput:
        """Args:
            ids: long (B, L) token ids. padding_mask: bool (B, L), True = real token.
            need_weights: also return the self-attention weights of every layer.

        Returns:
            :class:`ModelOutput` with logits (B, L, num_outputs).

        Raises:
            TypeError/ValueError: ids or mask of the wrong type, shape or range (the message names them).
        """
        ids = check_token_ids("ids", ids, vocab_size=self.vocab_size, max_len=self.max_len)
        padding_mask = _check_mask("padding_mask", padding_mask, ids)
        x = self.embed(ids)  # (B, L, D)
        weights = []
        for block in self.blocks:
            x, w = self._block(block, x, padding_mask, need_weights)
            weights.append(w)
        return ModelOutput(self.output(self.norm(x)), tuple(weights) if need_weights else None)


class EncoderOnly(_Stack):
    """A BERT-like encoder-only Transformer: bidirectional self-attention, one output per position.

    BERT (Devlin et al. 2019) is this stack with learned positions and GELU, pre-trained by hiding
    tokens behind ``[MASK]`` and predicting them from both sides. Every position sees the whole
    input, so all outputs come in one pass -- but the number of outputs is fixed by the input.

    Args:
        vocab_size: input ids 0 .. vocab_size-1. num_outputs: size of each position's logit vector.
        d_model, num_heads, num_layers, d_ff, dropout, max_len, norm_first, pad_id: as in
            :class:`Seq2SeqTransformer`. positional: "learned" (BERT) or "sinusoidal".

    Shapes: ``forward(ids (B, L), padding_mask (B, L))`` -> :class:`ModelOutput` with logits (B, L, num_outputs)
    and, with ``need_weights``, per layer (B, H, L, L) weights. Dtypes: int64 (or any integer) ids, bool or 0/1
    masks; float32 logits (the parameters' dtype).

    Raises:
        TypeError: a size not an int, dropout not a number. ValueError: a size < 1, H not dividing d_model,
            dropout outside [0, 1), pad_id outside the vocabulary, positional neither "learned" nor "sinusoidal".
        ``forward``: TypeError / ValueError for ids or a mask of the wrong type, shape or range.

    Source: Devlin et al. 2019 (BERT), the encoder of Vaswani et al. 2017, §3.1.
    """

    def __init__(self, vocab_size: int, num_outputs: int, *, d_model: int = 64, num_heads: int = 4,
                 num_layers: int = 2, d_ff: int | None = None, dropout: float = 0.0, max_len: int = 64,
                 positional: str = "learned", norm_first: bool = False, pad_id: int = 0):
        super().__init__(EncoderBlock, vocab_size, num_outputs, d_model, num_heads, num_layers, d_ff, dropout,
                         max_len, positional, norm_first, pad_id, {})

    @staticmethod
    def _block(block, x, padding_mask, need_weights):
        return block(x, padding_mask, need_weights=need_weights)  # bidirectional self-attention
