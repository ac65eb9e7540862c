"""Grouped-query attention and KV-cache quantization inside a HuggingFace BERT (notebook 08).

The bundled all-MiniLM-L6-v2 (:func:`attn_lib.load_pretrained`) is a 6-layer BERT with 12 heads. This
module converts its self-attention layers to GQA the way :func:`attn_lib.gqa.to_gqa` converts
attn_lib's own layer (mean-pooling the key/value heads of each group: Ainslie et al. 2023, "GQA",
section 2.1), lets a transform such as :func:`attn_lib.quantization.fake_quantize_kv` act on its keys
and values, reads its queries, keys and values, and computes the sentence embeddings the model was
trained for (sentence-transformers' mean pooling + normalisation). It matches HuggingFace
``transformers.models.bert.modeling_bert.BertSelfAttention`` (eager); tests/course/test_hf.py checks it.
Shapes use the legend of :mod:`attn_lib.attention` (B, H, Hkv, L, S, E = head_dim).
"""

from __future__ import annotations

import copy
import math
from contextlib import contextmanager
from typing import Iterable

import torch
import torch.nn as nn

from attn_lib._checks import check_callable, check_head_dim, check_heads as _check_heads
from attn_lib.attention import _sdpa
from attn_lib.gqa import mean_pool_kv_heads

__all__ = ["GQABertSelfAttention", "bert_to_gqa", "bert_kv_transform", "bert_qkv", "mean_pooled_embeddings"]


class GQABertSelfAttention(nn.Module):
    """A drop-in replacement of HuggingFace's ``BertSelfAttention`` with fewer key/value heads.

    Made by :meth:`from_hf`: the query projection is copied, the key and value projections are
    mean-pooled per group (:func:`mean_pool_kv_heads`), so its ``key``/``value`` layers really output
    num_kv_heads·head_dim features (the KV cache a decoder would keep). Attention is BERT's eager
    attention with each key/value head repeated for its group (:func:`repeat_kv`).

    forward(hidden_states (B, L, d_model), attention_mask=None (additive float (B, 1, L, S), or bool True = attend),
    **kwargs) -> (attn_output (B, L, d_model), attn_weights (B, H, L, S)), like BertSelfAttention's; float32 (or
    the dtype of the converted module's weights).

    Raises:
        TypeError: :meth:`from_hf` given a module that is not a BertSelfAttention; a count not an int.
        ValueError: num_kv_heads not dividing num_heads, or num_heads not dividing d_model.

    Source: Ainslie et al. 2023 (GQA), §2.1 (mean-pooled key/value heads), inside transformers' BertSelfAttention.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int):
        super().__init__()
        self.group = _check_heads(num_heads, num_kv_heads)
        self.num_attention_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.attention_head_size = check_head_dim(d_model, num_heads)
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, num_kv_heads * self.attention_head_size)
        self.value = nn.Linear(d_model, num_kv_heads * self.attention_head_size)
        self.kv_transform = None  # optional function applied to keys and values (B, Hkv, S, D), e.g. quantization

    @classmethod
    def from_hf(cls, module: nn.Module, num_kv_heads: int) -> "GQABertSelfAttention":
        """Convert a ``transformers`` BertSelfAttention (12 heads in MiniLM) by mean-pooling its key/value heads."""
        for attr in ("query", "key", "value", "num_attention_heads", "attention_head_size"):
            if not hasattr(module, attr):
                raise TypeError(f"module must be a HuggingFace BertSelfAttention (missing .{attr}), got {type(module).__name__}")
        H = module.num_attention_heads
        new = cls(module.query.in_features, H, num_kv_heads).to(module.query.weight.dtype)
        with torch.no_grad():
            new.query.load_state_dict(module.query.state_dict())
            for name in ("key", "value"):
                old = getattr(module, name)
                getattr(new, name).weight.copy_(mean_pool_kv_heads(old.weight, H, num_kv_heads))
                getattr(new, name).bias.copy_(mean_pool_kv_heads(old.bias, H, num_kv_heads))
        new.train(module.training)
        return new

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        B, L, _ = hidden_states.shape
        D = self.attention_head_size
        # (B, L, H·D) -> (B, H, L, D); keys and values with Hkv heads
        q = self.query(hidden_states).view(B, L, -1, D).transpose(1, 2)
        k = self.key(hidden_states).view(B, L, -1, D).transpose(1, 2)
        v = self.value(hidden_states).view(B, L, -1, D).transpose(1, 2)
        if self.kv_transform is not None:
            k, v = self.kv_transform(k), self.kv_transform(v)
        # softmax(q kᵀ / sqrt(D) + mask) v with the Hkv key/value heads shared by groups: the course's one SDPA core
        heads, weights = _sdpa(q, k, v, attention_mask, scale=1.0 / math.sqrt(D), enable_gqa=self.group > 1)
        out = heads.transpose(1, 2).reshape(B, L, -1)  # (B, H, L, D) -> (B, L, H·D)
        return out, weights


def bert_to_gqa(model: nn.Module, num_kv_heads: int) -> nn.Module:
    """A copy of a HuggingFace BERT (e.g. MiniLM from :func:`attn_lib.load_pretrained`) whose every
    self-attention layer is a :class:`GQABertSelfAttention` with ``num_kv_heads`` mean-pooled key/value heads.

    The original model is left unchanged. ``num_kv_heads`` must divide the model's num_attention_heads
    (MiniLM: 12 -> 12, 6, 4, 3, 2, 1). Each layer's keys and values become (B, Hkv, S, E) instead of (B, H, S, E),
    in the model's dtype (float32 for MiniLM).

    Raises:
        TypeError: not a BERT-like model (no ``encoder.layer[i].attention.self``). ValueError: bad num_kv_heads.

    Source: Ainslie et al. 2023 (GQA), §2.1: converting a multi-head checkpoint by mean-pooling its heads.
    """
    layers = getattr(getattr(model, "encoder", None), "layer", None)
    if layers is None:
        raise TypeError(f"model must be a HuggingFace BertModel (with .encoder.layer), got {type(model).__name__}")
    new = copy.deepcopy(model)
    for layer in new.encoder.layer:
        layer.attention.self = GQABertSelfAttention.from_hf(layer.attention.self, num_kv_heads)
    return new


@contextmanager
def bert_kv_transform(model: nn.Module, transform):
    """Within the ``with`` block, every self-attention layer of a HuggingFace BERT applies
    ``transform`` to its keys and values (B, Hkv, S, D) before attending, e.g.
    ``lambda x: fake_quantize_kv(x, 4)`` to see what a 4-bit KV cache does to the model.

    Works on the original ``BertSelfAttention`` (through forward hooks on its ``key``/``value``
    linears) and on :class:`GQABertSelfAttention`. Hooks are removed on exit.

    Args:
        model: a HuggingFace BertModel. transform: a function (B, Hkv, S, E) -> same shape and dtype.

    Raises:
        TypeError: transform not callable; model without ``.encoder.layer``.

    Source: forward hooks (torch's ``nn.Module.register_forward_hook``) on transformers' BertSelfAttention.
    """
    check_callable("transform", transform)
    if getattr(getattr(model, "encoder", None), "layer", None) is None:
        raise TypeError(f"model must be a HuggingFace BertModel (with .encoder.layer), got {type(model).__name__}")
    handles = []
    touched = []
    try:
        for layer in model.encoder.layer:
            sa = layer.attention.self
            if isinstance(sa, GQABertSelfAttention):
                touched.append((sa, sa.kv_transform))
                sa.kv_transform = transform
                continue
            D = sa.attention_head_size

            def hook(mod, args, out, D=D):
                B, L, F = out.shape
                heads = out.view(B, L, F // D, D).transpose(1, 2)  # (B, L, H·D) -> (B, H, L, D)
                return transform(heads).transpose(1, 2).reshape(B, L, F)

            handles += [sa.key.register_forward_hook(hook), sa.value.register_forward_hook(hook)]
        yield model
    finally:
        for h in handles:
            h.remove()
        for sa, old in touched:
            sa.kv_transform = old


@torch.no_grad()
def bert_qkv(tokenizer, model: nn.Module, text: str) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The queries, keys and values every self-attention layer of a HuggingFace BERT computes for ``text``.

    Read with forward hooks on each layer's ``query``/``key``/``value`` linears (the keys and values
    are what a KV cache would store). ``softmax(q kᵀ / sqrt(head_dim))`` of layer i equals the model's
    ``outputs.attentions[i]`` (tests/test_gqa.py).

    Returns:
        one (q, k, v) per layer, each (1, H, L, E) float32, L = the number of tokens incl. [CLS]/[SEP].

    Raises:
        TypeError: text is not a str.

    Source: transformers' BertSelfAttention (its ``query``/``key``/``value`` linears, read with torch's forward hooks).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    captured: dict[tuple[int, str], torch.Tensor] = {}
    handles = []
    for i, layer in enumerate(model.encoder.layer):
        sa = layer.attention.self
        D = sa.attention_head_size
        for name in ("query", "key", "value"):
            def hook(mod, args, out, i=i, name=name, D=D):
                B, L, F = out.shape
                captured[(i, name)] = out.view(B, L, F // D, D).transpose(1, 2).clone()  # (B, H, L, D)
            handles.append(getattr(sa, name).register_forward_hook(hook))
    try:
        model(**tokenizer(text, return_tensors="pt"))
    finally:
        for h in handles:
            h.remove()
    return [tuple(captured[(i, n)] for n in ("query", "key", "value")) for i in range(len(model.encoder.layer))]


@torch.no_grad()
def mean_pooled_embeddings(tokenizer, model: nn.Module, sentences: Iterable[str], *, one_by_one: bool = False) -> torch.Tensor:
    """Sentence embeddings as all-MiniLM-L6-v2 defines them: the mean of the last hidden states over
    the real tokens (attention_mask), L2-normalised (sentence-transformers' Pooling + Normalize).

    Args:
        tokenizer, model: e.g. from :func:`attn_lib.load_pretrained`.
        sentences: the texts.
        one_by_one: run each sentence alone (no padding), so that a transform whose scales span
            the tokens (per-channel quantization) never sees padding tokens.

    Returns:
        (N, d_model) float32, rows of norm 1.

    Raises:
        ValueError: sentences empty or not all str.
    """
    sentences = list(sentences)
    if not sentences or not all(isinstance(s, str) for s in sentences):
        raise ValueError("sentences must be a non-empty list of str")
    batches = [[s] for s in sentences] if one_by_one else [sentences]
    out = []
    for batch in batches:
        enc = tokenizer(batch, return_tensors="pt", padding=True)
        hidden = model(**enc).last_hidden_state  # (B, L, d_model)
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, L, 1)
        emb = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
        out.append(torch.nn.functional.normalize(emb, dim=-1))
    return torch.cat(out)
