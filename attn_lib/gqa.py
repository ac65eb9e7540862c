"""Multi-query and grouped-query attention: which query head reads which key/value head (notebook 08).

- **Fewer key/value heads.** Multi-query attention (MQA; Shazeer 2019, "Fast Transformer Decoding:
  One Write-Head is All You Need") keeps one key/value head for all query heads. Grouped-query
  attention (GQA; Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models
  from Multi-Head Checkpoints") splits the ``num_heads`` query heads into ``num_kv_heads`` groups of
  consecutive heads; query head j reads key/value head ``j // (num_heads // num_kv_heads)``.
  ``num_kv_heads == num_heads`` is ordinary multi-head attention (MHA), ``num_kv_heads == 1`` is MQA.
  This is the convention of ``torch.nn.functional.scaled_dot_product_attention(enable_gqa=True)``
  and of HuggingFace's ``repeat_kv`` (``transformers.models.llama.modeling_llama``).
- **Converting a trained model** instead of training a new one: :func:`to_gqa` mean-pools the key
  and value projection heads of each group (GQA paper, section 2.1), and :func:`model_to_gqa` does it
  for every attention layer of a model. The paper then "uptrains" for about 5% of the pre-training
  steps (section 3.1): notebook 08 measures the drop on MiniLM, and the drop and the recovery on the
  course's own date model (``attn_lib.course.train.GQA_UPTRAIN_CONFIG``).

What the cache costs and how to shrink it further live beside this module: :mod:`attn_lib.kv_cache`
(the caches and their size) and :mod:`attn_lib.quantization` (8- and 4-bit keys and values);
the same conversion for a HuggingFace BERT is in :mod:`attn_lib.course.hf`. Shapes use the legend of
:mod:`attn_lib.attention` (B, H, Hkv, L, S, E, Ev). tests/test_gqa.py checks every function against
torch's or HuggingFace's own code.
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from attn_lib._checks import (check_attn_mask, check_bool, check_heads as _check_heads, check_int as _check_int,
                              check_qkv, check_same_device, check_scale, check_tensor, shape_of as _shape)
from attn_lib.masks import causal_mask

__all__ = [
    "kv_head_for_query_head",
    "query_groups",
    "describe_grouping",
    "repeat_kv",
    "grouped_query_attention",
    "mean_pool_kv_heads",
    "to_gqa",
    "model_to_gqa",
]


def kv_head_for_query_head(num_heads: int, num_kv_heads: int) -> list[int]:
    """The key/value head each query head reads: ``[j // (num_heads // num_kv_heads) for j in range(num_heads)]``.

    Consecutive query heads share a key/value head ("repeat in place", not "tile the set"):
    num_heads 8, num_kv_heads 2 -> ``[0, 0, 0, 0, 1, 1, 1, 1]``, not ``[0, 1, 0, 1, ...]``.
    Same as ``torch.repeat_interleave`` (torch's ``enable_gqa=True``) and HuggingFace's ``repeat_kv``.

    Raises:
        TypeError: a count is not an int. ValueError: a count < 1, or num_kv_heads does not divide num_heads.

    No tensors: two ints in, a list of H ints out.
    """
    group = _check_heads(num_heads, num_kv_heads)
    return [j // group for j in range(num_heads)]


def query_groups(num_heads: int, num_kv_heads: int) -> list[list[int]]:
    """The query heads of each group: entry h lists the query heads that share key/value head h.

    Example: ``query_groups(32, 8)`` -> ``[[0, 1, 2, 3], [4, 5, 6, 7], ..., [28, 29, 30, 31]]``
    (32 query heads in 8 groups of 4).

    Raises:
        TypeError / ValueError: as :func:`kv_head_for_query_head`.

    No tensors: two ints in, Hkv lists of ints out.

    Source: Ainslie et al. 2023 (GQA), section 2.2: groups of consecutive query heads.
    """
    owner = kv_head_for_query_head(num_heads, num_kv_heads)
    groups: list[list[int]] = [[] for _ in range(num_kv_heads)]
    for j, h in enumerate(owner):
        groups[h].append(j)
    return groups


def describe_grouping(num_heads: int, num_kv_heads: int) -> str:
    """One line naming the variant, its groups and its KV-cache size relative to MHA.

    Example: ``describe_grouping(32, 8)`` -> "GQA: 32 query heads in 8 groups of 4; the KV cache is 8/32 = 25% of MHA's".

    Raises:
        TypeError / ValueError: as :func:`kv_head_for_query_head`.

    No tensors: two ints in, a str out.

    Source: Ainslie et al. 2023 (GQA), section 2.2; the cache share is Hkv / H.
    """
    G = _check_heads(num_heads, num_kv_heads)
    name = "MHA" if num_kv_heads == num_heads else "MQA" if num_kv_heads == 1 else "GQA"
    share = f"{num_kv_heads}/{num_heads} = {100 * num_kv_heads / num_heads:.4g}%"
    groups = f"{num_kv_heads} group{'s' if num_kv_heads > 1 else ''} of {G}"
    return f"{name}: {num_heads} query heads in {groups}; the KV cache is {share} of MHA's"


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Repeat each key/value head ``n_rep`` times in place: (..., Hkv, S, D) -> (..., Hkv·n_rep, S, D).

    Head h of the input becomes heads h·n_rep .. h·n_rep + n_rep - 1 of the output, so query head j
    meets key/value head j // n_rep. Equal to ``x.repeat_interleave(n_rep, dim=-3)`` and to HuggingFace's
    ``transformers.models.llama.modeling_llama.repeat_kv`` (which it is written like: an ``expand``,
    then one copy by ``reshape``).

    Args:
        x: (..., Hkv, S, D) tensor with at least 3 dims, e.g. keys (B, Hkv, S, head_dim).
        n_rep: int >= 1, the group size num_heads // num_kv_heads.

    Raises:
        TypeError: x is not a tensor, n_rep not an int. ValueError: x has < 3 dims, n_rep < 1.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor of shape (..., Hkv, S, D), got {type(x).__name__}")
    if x.dim() < 3:
        raise ValueError(f"x must have shape (..., Hkv, S, D) with at least 3 dims, got shape {tuple(x.shape)}")
    _check_int("n_rep", n_rep, minimum=1)
    if n_rep == 1:
        return x
    *lead, hkv, s, d = x.shape
    # (..., Hkv, S, D) -> (..., Hkv, n_rep, S, D) (a view) -> (..., Hkv·n_rep, S, D) (a copy)
    return x.unsqueeze(-3).expand(*lead, hkv, n_rep, s, d).reshape(*lead, hkv * n_rep, s, d)


# Same keyword signature as attn_lib.attention.scaled_dot_product_attention (duplicates lists the pair):
# both follow torch.nn.functional.scaled_dot_product_attention's signature, which is the point.
def grouped_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped-query attention without copying the keys and values.

    Instead of repeating each key/value head (what :func:`repeat_kv` and ``enable_gqa`` do, which
    writes num_heads copies), the G = Hq / Hkv query heads of a group are stacked as extra query
    rows of their one key/value head: (B, Hkv·G, L, E) -> (B, Hkv, G·L, E). Each key/value head is
    then read once per step, which is where MQA/GQA's decoding speed-up comes from: one decoding
    step is limited by how many bytes of cache it reads, not by arithmetic.

    Same semantics as ``torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)``
    (is_causal is aligned top-left like torch's; for a KV cache pass
    ``attn_mask=attn_lib.masks.causal_mask(L, S, align="bottom_right")``).

    Args:
        query: (B, Hq, L, E) float tensor (any leading dims before Hq).
        key: (B, Hkv, S, E), same dtype; Hkv divides Hq.
        value: (B, Hkv, S, Ev).
        attn_mask: bool (True = may attend) or float (added), broadcastable to (B, Hq, L, S).
        is_causal: top-left causal mask (query i sees keys 0..i).
        scale: score multiplier, default 1/sqrt(E).

    Returns:
        (output (B, Hq, L, Ev), attn_weights (B, Hq, L, S)).

    Raises:
        TypeError: not floating tensors, dtypes differ, is_causal not a bool, attn_mask neither bool nor float.
        ValueError: fewer than 3 dims; NaN or inf in query/key/value (or NaN/+inf in a float mask);
            Hkv not dividing Hq; batch dims that differ; a mask that does not broadcast; tensors on
            different devices; scores that overflow -- each message names the shapes as passed.
    """
    from attn_lib.attention import _sdpa

    # every check on the shapes the caller passed, before any regrouping (messages name those shapes)
    check_qkv(query, key, value, enable_gqa=True, min_ndim=3)
    check_bool("is_causal", is_causal)
    check_scale(scale, query.shape[-1])
    hq, L = query.shape[-3], query.shape[-2]
    hkv, S = key.shape[-3], key.shape[-2]
    try:
        torch.broadcast_shapes(query.shape[:-3], key.shape[:-3])
    except RuntimeError:
        raise ValueError(f"query and key/value must have broadcastable batch dims before the heads: query shape "
                         f"{_shape(query)} (batch {tuple(query.shape[:-3])}), key shape {_shape(key)} "
                         f"(batch {tuple(key.shape[:-3])})") from None
    if attn_mask is not None and is_causal:
        raise ValueError("pass either attn_mask or is_causal=True, not both")
    G = hq // hkv
    lead = query.shape[:-3]
    if is_causal:
        attn_mask = causal_mask(L, S, device=query.device)  # top-left, like torch's is_causal
    if attn_mask is not None:
        full = (*lead, hq, L, S)
        check_attn_mask(attn_mask, full)  # bool or float (-inf ok, NaN/+inf refused), broadcastable to (..., H, L, S)
        check_same_device(query=query, attn_mask=attn_mask)
        # (..., Hq, L, S) -> (..., Hkv, G·L, S): the mask rows follow the stacked query rows
        attn_mask = attn_mask.expand(full).reshape(*lead, hkv, G * L, S)
    # (..., Hkv·G, L, E) -> (..., Hkv, G·L, E): a view, no copy
    q = query.reshape(*lead, hkv, G * L, query.shape[-1])
    out, weights = _sdpa(q, key, value, attn_mask, scale=scale)  # checked above; the core only
    # (..., Hkv, G·L, ·) -> (..., Hq, L, ·)
    return out.reshape(*lead, hq, L, value.shape[-1]), weights.reshape(*lead, hq, L, S)


# ---------------------------------------------------------------------------------------------
# Converting a trained multi-head layer to GQA (GQA paper, section 2.1)
# ---------------------------------------------------------------------------------------------


def mean_pool_kv_heads(weight: torch.Tensor, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """Average the projection heads of each group: (num_heads·D, ...) -> (num_kv_heads·D, ...).

    ``weight`` is a key or value projection's ``nn.Linear.weight`` (num_heads·head_dim, d_in) or its
    bias (num_heads·head_dim,), rows ordered head by head (head h = rows h·D .. h·D + D - 1).
    KV head g of the result is the mean of heads g·G .. g·G + G - 1 (G = num_heads // num_kv_heads),
    the consecutive heads whose queries will share it (Ainslie et al. 2023, section 2.1; in their
    ablation, mean-pooling beat keeping the first head of each group or a random initialisation).

    Args:
        weight: (H·E, d_in) or (H·E,) floating tensor. num_heads: H. num_kv_heads: Hkv, dividing H.

    Returns:
        (Hkv·E, d_in) or (Hkv·E,), weight's dtype.

    Raises:
        TypeError: not a tensor, or not floating (an integer weight); counts not ints.
        ValueError: 0-dim; num_kv_heads not dividing num_heads; rows not a multiple of num_heads.

    Source: Ainslie et al. 2023 (GQA), section 2.1 (mean pooling).
    """
    check_tensor("weight", weight, floating=True, min_ndim=1)  # an integer mean would truncate
    G = _check_heads(num_heads, num_kv_heads)
    rows = weight.shape[0] if weight.dim() else 0
    if rows == 0 or rows % num_heads:
        raise ValueError(f"weight's first dim ({rows}, shape {tuple(weight.shape)}) must be num_heads={num_heads} × head_dim")
    D = rows // num_heads
    rest = weight.shape[1:]
    # (Hq·D, ...) -> (Hkv, G, D, ...) -> mean over G -> (Hkv·D, ...)
    return weight.reshape(num_kv_heads, G, D, *rest).mean(dim=1).reshape(num_kv_heads * D, *rest)


def _mha_heads(mha) -> tuple[int, int, int]:
    num_heads = getattr(mha, "num_heads")
    head_dim = getattr(mha, "head_dim", None) or mha.q_proj.out_features // num_heads
    num_kv_heads = getattr(mha, "num_kv_heads", None) or mha.k_proj.out_features // head_dim
    return num_heads, num_kv_heads, head_dim


def to_gqa(mha, num_kv_heads: int):
    """A new :class:`attn_lib.mha.MultiHeadAttention` with ``num_kv_heads`` key/value heads, made from
    a trained one by mean-pooling its key and value projection heads within each group.

    The query and output projections are copied unchanged; key head g (and value head g) of the new
    layer is the mean of the old heads g·G .. g·G + G - 1 (weights and biases), G = num_heads //
    num_kv_heads (Ainslie et al. 2023, "GQA", section 2.1). No retraining: the paper uptrains
    afterwards; this function gives the starting point, and notebook 08 measures how far it is.
    ``num_kv_heads`` equal to the layer's gives an identical copy; from an already grouped layer,
    its current num_kv_heads must be a multiple of the new one.

    Args:
        mha: a MultiHeadAttention (attributes num_heads, num_kv_heads, head_dim; q/k/v/out_proj).
        num_kv_heads: int dividing the layer's num_kv_heads.

    Raises:
        TypeError: mha is not a MultiHeadAttention; num_kv_heads not an int.
        ValueError: num_kv_heads < 1, or it does not divide the layer's num_kv_heads.

    The new layer's parameters keep mha's dtype and device: k_proj/v_proj (Hkv * E, kdim) and (Hkv * E, vdim).
    """
    from attn_lib.mha import MultiHeadAttention

    if not isinstance(mha, MultiHeadAttention):
        raise TypeError(f"mha must be an attn_lib.mha.MultiHeadAttention, got {type(mha).__name__}")
    num_heads, old_kv, head_dim = _mha_heads(mha)
    _check_int("num_kv_heads", num_kv_heads, minimum=1)
    if old_kv % num_kv_heads:
        raise ValueError(
            f"num_kv_heads={num_kv_heads} must divide the layer's current num_kv_heads={old_kv} "
            f"(num_heads={num_heads})"
        )
    new = copy.deepcopy(mha)
    if num_kv_heads == old_kv:
        return new
    # rebuild k_proj / v_proj with fewer output rows, holding the group means
    for name in ("k_proj", "v_proj"):
        old: nn.Linear = getattr(mha, name)
        lin = nn.Linear(old.in_features, num_kv_heads * head_dim, bias=old.bias is not None,
                        device=old.weight.device, dtype=old.weight.dtype)
        with torch.no_grad():
            lin.weight.copy_(mean_pool_kv_heads(old.weight, old_kv, num_kv_heads))
            if old.bias is not None:
                lin.bias.copy_(mean_pool_kv_heads(old.bias, old_kv, num_kv_heads))
        setattr(new, name, lin)
    new.num_kv_heads = num_kv_heads
    return new


def model_to_gqa(model: nn.Module, num_kv_heads: int) -> nn.Module:
    """A copy of ``model`` in which every :class:`attn_lib.mha.MultiHeadAttention` layer is converted by
    :func:`to_gqa` (mean-pooled key/value heads; everything else copied unchanged).

    For :class:`attn_lib.models.Seq2SeqTransformer` that is the encoder's self-attention and the
    decoder's self- and cross-attention. The copy is the starting point of the GQA paper's uptraining
    (Ainslie et al. 2023, §3.1): train it for a small fraction of the original steps (notebook 08).

    Args:
        model: an nn.Module holding at least one MultiHeadAttention. num_kv_heads: int dividing the
            num_kv_heads of every such layer.

    Returns:
        a new module (``model`` is not changed), in ``model``'s train/eval mode.

    Raises:
        TypeError: model is not an nn.Module, or num_kv_heads not an int.
        ValueError: no MultiHeadAttention inside, or num_kv_heads does not divide a layer's (names the layer).

    The new model's parameters keep their dtype and device; each converted k_proj/v_proj weight becomes
    (Hkv * E, d_in).
    """
    from attn_lib.mha import MultiHeadAttention

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    _check_int("num_kv_heads", num_kv_heads, minimum=1)
    new = copy.deepcopy(model)
    layers = [(name, m) for name, m in new.named_modules() if isinstance(m, MultiHeadAttention)]
    if not layers:
        raise ValueError(f"model ({type(model).__name__}) has no attn_lib MultiHeadAttention layer to convert")
    if layers[0][0] == "":  # the model is itself one attention layer
        return to_gqa(new, num_kv_heads)
    for name, layer in layers:
        parent_name, _, child = name.rpartition(".")
        try:
            setattr(new.get_submodule(parent_name), child, to_gqa(layer, num_kv_heads))
        except ValueError as e:
            raise ValueError(f"layer {name!r}: {e}") from None
    return new
