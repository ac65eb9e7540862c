"""Measuring what the heads of a real model do (notebook 06).

Shape legend: N sentences, NL layers, H heads per layer, L (padded) tokens per sentence. The
attention weights of a HuggingFace encoder, ``torch.stack(outputs.attentions, dim=1)``, are
``A`` of shape (N, NL, H, L, L): ``A[n, l, h, i, j]`` is the weight query token i of sentence n
puts on key token j in head h of layer l.

- :func:`head_average`: a per-query measure (N, NL, H, L) -> one number per head (NL, H).
- :func:`offset_weight`: the weight each query i puts on the key i + d (previous token: d = -1).
- :func:`shuffle_within_groups`: a random permutation that only moves items within their group
  (a null model: "rarity shuffled among the words of each sentence").
- :func:`pearson_rows`: the correlation of every row of a matrix with one vector.
- :class:`HeadGates`: switch heads of a BERT-style model off (their output times 0 before W_O),
  for several gate settings run side by side in one batch.

Sources: Clark et al. (2019), "What Does BERT Look At?" (positional and [CLS]/[SEP] heads, section 3);
Voita et al. (2019), "Analyzing Multi-Head Self-Attention" (head roles, pruning); Michel et al.
(2019), "Are Sixteen Heads Really Better than One?" (masking heads at test time, section 3).
"""

from __future__ import annotations

import torch
from torch import nn

from attn_lib._checks import check_int, check_tensor

__all__ = ["head_average", "offset_weight", "shuffle_within_groups", "pearson_rows", "HeadGates"]


def _check_weights(attentions) -> torch.Tensor:
    return check_tensor("attentions", attentions, floating=True, ndim=5)


def _check_queries(name: str, queries, attentions: torch.Tensor) -> torch.Tensor:
    check_tensor(name, queries, ndim=2)
    if queries.dtype != torch.bool:
        raise TypeError(f"{name} must be a bool tensor (True = use this token), got dtype {queries.dtype}")
    N, L = attentions.shape[0], attentions.shape[-1]
    if tuple(queries.shape) != (N, L):
        raise ValueError(f"{name} must have shape (N, L) = {(N, L)}, got {tuple(queries.shape)}")
    return queries


def head_average(per_query: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Average a per-query measure over the selected query tokens of all sentences, per head.

    ``result[l, h] = sum_{n,i} queries[n, i] * per_query[n, l, h, i] / sum_{n,i} queries[n, i]``.

    Args:
        per_query: (N, NL, H, L) float tensor, one number per head and query token.
        queries: (N, L) bool tensor, True = include this query token (e.g. real, non-special tokens).

    Returns:
        (NL, H) tensor; NaN for a head if no query is selected at all.

    Raises:
        TypeError / ValueError: wrong types, dims or shapes (the message names the argument).

    Source: the per-head averages of Clark et al. (2019), "What Does BERT Look At?", section 3.
    """
    check_tensor("per_query", per_query, floating=True, ndim=4)
    if queries.dtype != torch.bool:
        raise TypeError(f"queries must be a bool tensor (True = use this token), got dtype {queries.dtype}")
    N, L = per_query.shape[0], per_query.shape[-1]
    if tuple(queries.shape) != (N, L):
        raise ValueError(f"queries must have shape (N, L) = {(N, L)}, got {tuple(queries.shape)}")
    w = queries[:, None, None, :].to(per_query.dtype)  # (N, 1, 1, L)
    return (per_query * w).sum(dim=(0, 3)) / w.sum(dim=(0, 3))


def offset_weight(attentions: torch.Tensor, valid: torch.Tensor, offset: int) -> torch.Tensor:
    """Mean weight each query i puts on the key i + ``offset``, per head.

    Only pairs where both token i and token i + offset are valid count (so a query at the end of a
    sentence, whose i + 1 is padding or ``[SEP]``, is left out of the "next token" average).
    ``offset=-1`` measures a previous-token head, ``+1`` a next-token head, ``0`` attention to itself.

    Args:
        attentions: (N, NL, H, L, L) attention weights.
        valid: (N, L) bool, True = a token that may be a query or a key here (e.g. real, non-special).
        offset: an int d with |d| < L.

    Returns:
        (NL, H): ``mean over valid (n, i) with valid (n, i + d) of attentions[n, :, :, i, i + d]``.

    Raises:
        TypeError / ValueError: wrong types or shapes; |offset| >= L.

    Source: the positional (previous/next-token) heads of Clark et al. (2019), "What Does BERT Look At?", section 3.1.
    """
    attentions = _check_weights(attentions)
    valid = _check_queries("valid", valid, attentions)
    N, NL, H, L, _ = attentions.shape
    d = check_int("offset", offset, minimum=-(L - 1), maximum=L - 1)
    lo, hi = max(0, -d), min(L, L - d)  # the queries i whose key i + d exists
    i = torch.arange(lo, hi)
    per_query = torch.zeros(N, NL, H, L, dtype=attentions.dtype)
    per_query[..., lo:hi] = attentions[..., i, i + d]  # (N, NL, H, hi - lo): the d-th diagonal
    pair_ok = torch.zeros(N, L, dtype=torch.bool)
    pair_ok[:, lo:hi] = valid[:, lo:hi] & valid[:, lo + d:hi + d]  # both ends valid
    return head_average(per_query, pair_ok)


def shuffle_within_groups(groups: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """A random permutation of 0..K-1 that only exchanges items of the same group.

    ``x[shuffle_within_groups(groups)]`` shuffles the values of ``x`` among the items of each group
    and keeps every group's set of values. Method: sort by ``group + u`` with u ~ U[0, 1) per item;
    integer groups keep their order (group g sorts before g + 1) and the random u orders the items
    inside a group uniformly at random.

    Args:
        groups: (K,) integer tensor, the group of each item (e.g. the sentence of each word), sorted
            ascending (items of one group contiguous), as ``torch.arange(N)[:, None].expand(N, L)[mask]``.
        generator: a torch.Generator for reproducible shuffles.

    Returns:
        (K,) long tensor, a permutation.

    Raises:
        TypeError: ``groups`` is not an integer tensor. ValueError: not 1-D or not sorted.

    Source: the course's own (a stratified permutation test: the null keeps each sentence's set of values).
    """
    check_tensor("groups", groups, ndim=1)
    if groups.dtype.is_floating_point or groups.dtype == torch.bool:
        raise TypeError(f"groups must be an integer tensor, got dtype {groups.dtype}")
    if len(groups) > 1 and (groups[1:] < groups[:-1]).any():
        raise ValueError("groups must be sorted ascending (the items of one group next to each other)")
    u = torch.rand(len(groups), generator=generator, dtype=torch.float64)
    return torch.argsort(groups.to(torch.float64) + u)


def pearson_rows(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Pearson correlation of each row of ``x`` (M, K) with ``r`` (K,): a (M,) tensor in [-1, 1].

    Both floating (float32 or float64); the result has their (promoted) dtype. Same value as
    ``numpy.corrcoef(x[m], r)[0, 1]`` for every row m.

    Raises:
        TypeError: x or r is not a floating tensor.
        ValueError: x not 2-D or r not 1-D; their K differ; r or a row of x is constant (the correlation is
            0/0, undefined: numpy returns NaN with a warning, this raises instead).

    Source: Pearson's r, as ``numpy.corrcoef`` computes it.
    """
    check_tensor("x", x, floating=True, ndim=2)
    check_tensor("r", r, floating=True, ndim=1)
    if x.shape[-1] != r.shape[0]:
        raise ValueError(f"x (M, K) and r (K,) must agree in K, got x {tuple(x.shape)} and r {tuple(r.shape)}")
    x, r = x - x.mean(-1, keepdim=True), r - r.mean()
    if not bool(r.abs().amax() > 0):
        raise ValueError("r is constant: its correlation with anything is 0/0 (undefined)")
    flat = (x.abs().amax(-1) == 0).nonzero().flatten()
    if flat.numel():
        raise ValueError(f"rows {flat[:5].tolist()} of x are constant: their correlation with r is 0/0 (undefined)")
    return (x * r).sum(-1) / (x.norm(dim=-1) * r.norm())


class HeadGates:
    """Switch attention heads of a BERT-style encoder on and off, V settings side by side in one batch.

    Each head's output (its ``head_dim`` features of the concatenation, before W_O) is multiplied by a
    gate: 1 = on, 0 = off. This is what BERT's former ``head_mask`` argument did (Michel et al. 2019,
    section 3); transformers 5 removed it, so a forward hook on every ``layer.attention.self`` does it.

    To compare V gate settings in one forward pass, repeat the batch V times: rows
    ``v * batch_size .. (v + 1) * batch_size - 1`` of the input get the gates ``gates[v]``.

    Usage::

        with HeadGates(model, batch_size=8) as hg:
            hg.gates = torch.ones(V, 6, 12); hg.gates[1, 5, 3] = 0  # variant 1: head 5.3 off
            out = model(input_ids.repeat(V, 1), attention_mask=mask.repeat(V, 1))

    Args:
        model: a HuggingFace BERT-style model with ``model.encoder.layer[l].attention.self`` whose
            output ``[0]`` is (B, L, H * head_dim).
        batch_size: the number of rows per variant.

    Attributes:
        gates: (V, NL, H) float tensor, default all ones (V = 1). Set it before each forward pass.

    Raises:
        TypeError: ``model`` has no ``encoder.layer`` (not BERT-style); ``batch_size`` or ``gates`` of the wrong
            type.
        ValueError: ``batch_size`` < 1; ``gates`` not (V, NL, H); in the forward pass, a batch that is not
            V * batch_size rows.
    """

    def __init__(self, model: nn.Module, batch_size: int):
        if not hasattr(getattr(model, "encoder", None), "layer"):
            raise TypeError(f"model must be a BERT-style encoder with .encoder.layer, got {type(model).__name__}")
        self.layers = list(model.encoder.layer)
        self.num_heads = model.config.num_attention_heads
        self.head_dim = model.config.hidden_size // self.num_heads
        self.batch_size = check_int("batch_size", batch_size, minimum=1)
        self.gates = torch.ones(1, len(self.layers), self.num_heads)
        self._hooks: list = []

    def _hook(self, layer_index: int):
        def hook(module, args, output):
            context = output[0]  # (V * batch_size, L, H * head_dim): the heads side by side
            V = self.gates.shape[0]
            if context.shape[0] != V * self.batch_size:
                raise ValueError(
                    f"HeadGates: the batch has {context.shape[0]} rows, expected V * batch_size = "
                    f"{V} * {self.batch_size} for gates of shape {tuple(self.gates.shape)}"
                )
            g = self.gates[:, layer_index].to(context.dtype)  # (V, H)
            g = g.repeat_interleave(self.head_dim, dim=-1)  # (V, H * head_dim): each gate over its head's features
            g = g.repeat_interleave(self.batch_size, dim=0)  # (V * batch_size, H * head_dim)
            return (context * g[:, None, :], *output[1:])
        return hook

    def __enter__(self) -> "HeadGates":
        self._hooks = [layer.attention.self.register_forward_hook(self._hook(i)) for i, layer in enumerate(self.layers)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def __setattr__(self, name, value):
        if name == "gates":
            value = check_tensor("gates", value, ndim=3)
            expected = (len(self.layers), self.num_heads)
            if tuple(value.shape[1:]) != expected:
                raise ValueError(f"gates must have shape (V, NL, H) = (V, {expected[0]}, {expected[1]}), "
                                 f"got {tuple(value.shape)}")
        super().__setattr__(name, value)
