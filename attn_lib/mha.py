"""Multi-head attention (MHA), grouped-query attention (GQA/MQA) and the KV cache (notebooks 05, 07).

Multi-head attention (Vaswani et al. 2017, "Attention Is All You Need", section 3.2.2)::

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O,   head_j = Attention(Q W_Q^j, K W_K^j, V W_V^j)

The h projections W_Q^j (d_model x head_dim) are stored side by side as one ``nn.Linear``
(d_model -> h * head_dim); "splitting into heads" is then just a reshape of its output.

Grouped-query attention (Ainslie et al. 2023, "GQA", section 2.2) keeps all h query heads but only
``num_kv_heads`` key/value heads: query head j uses key/value head ``j // (num_heads // num_kv_heads)``
(each key/value head repeated in place, ``repeat_interleave``: HuggingFace's ``repeat_kv`` and
``torch.nn.functional.scaled_dot_product_attention(enable_gqa=True)``). ``num_kv_heads=1`` is
multi-query attention (Shazeer 2019, "Fast Transformer Decoding: One Write-Head is All You Need").

:class:`KVCache` keeps the keys and values of tokens already processed, so that autoregressive
decoding computes the projections of each new token only once.

tests/test_mha.py checks :class:`MultiHeadAttention` against ``torch.nn.MultiheadAttention``,
against torch's ``scaled_dot_product_attention(enable_gqa=True)`` and against every attention layer of
the bundled all-MiniLM-L6-v2 (HuggingFace ``BertSelfAttention``, eager).

Why one module of over 400 lines: it holds one class, :class:`MultiHeadAttention`, whose ``from_hf``
converters (BERT, GPT-2, Llama) are part of its API and are proven equal to those libraries next to it.
"""

from __future__ import annotations

import torch
from torch import nn

from attn_lib._checks import (
    check_bool, check_choice, check_device, check_dtype, check_finite, check_fits_dtype, check_head_dim, check_heads,
    check_int, check_number, check_on_device, check_padding_mask, check_rope_base, check_tensor, claim_cache, shape_of,
)
from attn_lib.attention import _sdpa
from attn_lib.kv_cache import KVCache, KVCacheProtocol
from attn_lib.masks import causal_mask
from attn_lib.positional import apply_rope

__all__ = ["MultiHeadAttention", "split_heads", "merge_heads"]


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, num_heads * head_dim) -> (B, num_heads, L, head_dim).

    Head j gets the features ``j*head_dim : (j+1)*head_dim`` of each token (the layout of
    ``torch.nn.MultiheadAttention`` and HuggingFace BERT).

    Args:
        x: (B, L, H * E) tensor of any dtype (a view is returned: same dtype and storage).
        num_heads: H, an int >= 1.

    Raises:
        TypeError: x is not a tensor, or num_heads not an int.
        ValueError: x is not 3-D, num_heads < 1, or x's last dim is not a multiple of ``num_heads``.

    Source: HuggingFace's ``BertSelfAttention.transpose_for_scores`` (the same view and transpose).
    """
    check_tensor("x", x)
    if x.dim() != 3:
        raise ValueError(f"x must be (B, L, num_heads * head_dim), got shape {shape_of(x)}")
    B, L, D = x.shape
    E = check_head_dim(D, num_heads, name="the last dim of x", hint=f"; x shape {shape_of(x)}")
    return x.view(B, L, num_heads, E).transpose(1, 2)  # (B, L, H·E) -> (B, L, H, E) -> (B, H, L, E)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, num_heads, L, head_dim) -> (B, L, num_heads * head_dim): the inverse of :func:`split_heads`.

    x: (B, H, L, E) tensor of any dtype; the result (B, L, H * E) keeps it (a copy when x is not contiguous).

    Raises:
        TypeError: x is not a tensor. ValueError: x is not 4-D.

    Source: the concatenation of Vaswani et al. 2017, section 3.2.2 (HuggingFace BERT's context-layer reshape).
    """
    check_tensor("x", x)
    if x.dim() != 4:
        raise ValueError(f"x must be (B, num_heads, L, head_dim), got shape {shape_of(x)}")
    B, H, L, E = x.shape
    return x.transpose(1, 2).reshape(B, L, H * E)  # (B, H, L, E) -> (B, L, H, E) -> (B, L, H*E)


def _check_positive_int(name: str, value) -> int:
    return check_int(name, value, minimum=1)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with optional grouped-query heads, RoPE and a KV cache (batch first).

    Vaswani et al. 2017, section 3.2.2; GQA: Ainslie et al. 2023; RoPE: Su et al. 2021. The order of
    operations (the course outline's pseudocode)::

        q, k, v = q_proj(query), k_proj(key), v_proj(value)          # (B, L, H*E), (B, S, Hkv*E)
        split into heads                                             # (B, H, L, E), (B, Hkv, S, E)
        [RoPE on q and k]  [append k, v to the KV cache]
        weights = softmax(q kᵀ / sqrt(E) + mask)  -> dropout        # (B, H, L, S)
        heads = weights v ; concatenate heads                        # (B, L, H*E)
        output = out_proj(concatenation)                             # (B, L, d_model)

    The dropout after ``out_proj`` in the pseudocode belongs to the residual wrapper around this
    module (BERT's ``BertSelfOutput.dropout``); like ``torch.nn.MultiheadAttention``, this module
    applies dropout only to the attention weights.

    Args:
        d_model: model width (= embed_dim of torch). Queries have this many features.
        num_heads: number of query heads H.
        num_kv_heads: number of key/value heads Hkv (default num_heads: ordinary MHA); must divide
            num_heads. 1 is multi-query attention. Query head j uses key/value head j // (H // Hkv).
        head_dim: features per head (default d_model // num_heads, and then num_heads must divide
            d_model). Given explicitly, H * head_dim may differ from d_model, as in Gemma and Qwen3
            (HF configs' ``head_dim``): q_proj maps d_model -> H * head_dim and out_proj back.
        dropout: probability of dropping an attention weight, in training mode only; in [0, 1).
        bias: whether the four projections have a bias (a bool).
        kdim, vdim: feature sizes of key and value inputs (default d_model), for cross-attention.
        rope_base: if not None, rotary position embedding (half-split, ``attn_lib.positional.apply_rope``
            with this base, e.g. 10000.0; HF Llama's ``rope_theta``) is applied to the queries and keys
            at their true positions (offset by the tokens already in the KV cache). head_dim must then be even.
        device, dtype: where and in which floating dtype the parameters are created (as in torch's layers).

    Submodules ``q_proj`` (d_model -> H*E), ``k_proj`` (kdim -> Hkv*E), ``v_proj`` (vdim -> Hkv*E),
    ``out_proj`` (H*E -> d_model), all ``nn.Linear``.

    Raises:
        TypeError: a size is not an int; bias not a bool; rope_base or dropout not a number; a bad
            device or dtype type.
        ValueError: d_model not divisible by num_heads (without head_dim), or num_heads not divisible
            by num_kv_heads (the message names both numbers); dropout outside [0, 1); rope_base not a
            finite number > 1; odd head_dim with rope_base; a device that does not exist here.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        rope_base: float | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | str | None = None,
    ) -> None:
        super().__init__()
        d_model = _check_positive_int("d_model", d_model)
        num_heads = _check_positive_int("num_heads", num_heads)
        if head_dim is None:
            head_dim = check_head_dim(d_model, num_heads, hint=" (or pass head_dim= explicitly)")
        else:
            head_dim = _check_positive_int("head_dim", head_dim)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_heads(num_heads, num_kv_heads)  # num_kv_heads >= 1 divides num_heads: equal groups share a K/V head
        kdim = d_model if kdim is None else _check_positive_int("kdim", kdim)
        vdim = d_model if vdim is None else _check_positive_int("vdim", vdim)
        dropout = check_number("dropout", dropout, minimum=0.0)
        if not dropout < 1.0:
            raise ValueError(f"dropout must be a number in [0, 1), got {dropout}")
        bias = check_bool("bias", bias)
        if rope_base is not None:
            rope_base = check_rope_base(rope_base)
            if head_dim % 2:
                raise ValueError(
                    f"RoPE rotates pairs of features, so head_dim must be even, got head_dim {head_dim} "
                    f"(d_model {d_model}, num_heads {num_heads})"
                )
        device = check_device("device", device)
        dtype = check_dtype("dtype", dtype, allow_none=True)

        self.d_model, self.num_heads, self.num_kv_heads, self.head_dim = d_model, num_heads, num_kv_heads, head_dim
        self.kdim, self.vdim = kdim, vdim
        self.dropout = float(dropout)
        self.rope_base = None if rope_base is None else float(rope_base)

        f = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(d_model, num_heads * head_dim, bias=bias, **f)  # W_Q of all heads, side by side
        self.k_proj = nn.Linear(kdim, num_kv_heads * head_dim, bias=bias, **f)  # W_K of the Hkv key/value heads
        self.v_proj = nn.Linear(vdim, num_kv_heads * head_dim, bias=bias, **f)  # W_V
        self.out_proj = nn.Linear(num_heads * head_dim, d_model, bias=bias, **f)  # W_O

    def extra_repr(self) -> str:
        extra = f"d_model={self.d_model}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}"
        if self.dropout:
            extra += f", dropout={self.dropout}"
        if self.rope_base is not None:
            extra += f", rope_base={self.rope_base}"
        return extra

    # ------------------------------------------------------------------ input checks
    def _validate(self, query, key, value, attn_mask, padding_mask, is_causal, need_weights, average_attn_weights,
                  kv_cache):
        """Every check of :meth:`forward`, on the shapes the caller passed; returns (key, value) defaulted."""
        check_bool("is_causal", is_causal)
        check_bool("need_weights", need_weights)
        check_bool("average_attn_weights", average_attn_weights)
        if key is None and value is not None:
            raise ValueError("value was given without key; pass key too (or neither, for self-attention)")
        key = query if key is None else key
        value = key if value is None else value
        if not isinstance(query, torch.Tensor) or query.dim() != 3 or query.shape[-1] != self.d_model:
            got = shape_of(query) if isinstance(query, torch.Tensor) else type(query).__name__
            raise ValueError(f"query must be (B, L, d_model={self.d_model}) (batch first), got shape {got}")
        for name, t, dim in (("key", key, self.kdim), ("value", value, self.vdim)):
            if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[-1] != dim:
                got = shape_of(t) if isinstance(t, torch.Tensor) else type(t).__name__
                what = "kdim" if name == "key" else "vdim"
                raise ValueError(f"{name} must be (B, S, {what}={dim}) (batch first), got shape {got}")
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(f"key {shape_of(key)} and value {shape_of(value)} must have the same (B, S)")
        if key.shape[0] != query.shape[0]:
            raise ValueError(f"query {shape_of(query)} and key {shape_of(key)} must have the same batch size B")
        if padding_mask is not None:
            check_padding_mask("padding_mask", padding_mask)
        if attn_mask is not None and not isinstance(attn_mask, torch.Tensor):
            raise TypeError(f"attn_mask must be a torch.Tensor or None, got {type(attn_mask).__name__}")
        if attn_mask is not None and attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            # an integer mask would be added to the scores (1 = a bonus, not "may attend"): torch's SDPA refuses it
            raise TypeError(f"attn_mask must be bool (True = may attend) or floating (added to the scores), got dtype "
                            f"{attn_mask.dtype}; for 0/1 integers pass attn_mask.bool()")
        for name, t in (("attn_mask", attn_mask), ("padding_mask", padding_mask)):
            if isinstance(t, torch.Tensor) and isinstance(query, torch.Tensor):
                check_on_device(name, t, query.device)
        if attn_mask is not None and attn_mask.is_floating_point():
            check_finite("attn_mask", attn_mask, allow_neg_inf=True)
            check_fits_dtype("attn_mask", attn_mask, self.q_proj.weight.dtype if self.q_proj.weight.dtype
                             not in (torch.float16, torch.bfloat16) else torch.float32, allow_negative=True)
        weight_dtype = self.q_proj.weight.dtype
        for name, t in (("query", query), ("key", key), ("value", value)):
            check_tensor(name, t, floating=True)
            check_finite(name, t)
            if t.dtype != weight_dtype:
                raise TypeError(
                    f"{name} has dtype {t.dtype} but the module's weights are {weight_dtype}; "
                    f"convert one of them (e.g. {name}.to({weight_dtype}) or module.to({t.dtype}))"
                )
        if kv_cache is not None and not isinstance(kv_cache, KVCacheProtocol):
            raise TypeError(f"kv_cache must be a KVCache (or follow attn_lib.kv_cache.KVCacheProtocol), "
                            f"got {type(kv_cache).__name__}")
        return key, value

    @staticmethod
    def _check_projections(**projections) -> None:
        """NaN or inf after a projection means the module's weights hold them; named in the user's shapes."""
        for name, t in projections.items():
            check_finite(f"{name} (the module's weights hold NaN or inf?)", t)

    def _build_mask(self, B, L, S, attn_mask, padding_mask, is_causal, bottom_right, device, query_shape, key_shape):
        """One mask for attn_lib's scaled_dot_product_attention, broadcastable to (B, H, L, S)."""
        keep = None  # bool, True = may attend
        if is_causal:  # key j visible to query i iff j <= i (+ S - L when the L queries are the last of S)
            keep = causal_mask(L, S, align="bottom_right" if bottom_right else "top_left", device=device)
        if padding_mask is not None:
            if padding_mask.dim() != 2 or padding_mask.shape != (B, S):
                raise ValueError(
                    f"padding_mask must be (B, S) = ({B}, {S}) (True = real token; S counts cached tokens too), "
                    f"got shape {shape_of(padding_mask)} for query {query_shape} and key {key_shape}"
                )
            pad = padding_mask.to(device=device, dtype=torch.bool)[:, None, None, :]  # (B, 1, 1, S)
            keep = pad if keep is None else keep & pad
        mask = None
        if attn_mask is not None:
            m = attn_mask.to(device)
            if m.dim() == 3:  # (B, L, S) -> (B, 1, L, S)
                m = m[:, None]
            ok = m.dim() in (2, 4) and m.shape[-2:] == (L, S)
            if ok and m.dim() == 4:
                ok = m.shape[0] in (1, B) and m.shape[1] in (1, self.num_heads)
            if not ok:
                raise ValueError(
                    f"attn_mask must be (L, S), (B, L, S) or (B, num_heads, L, S) with L={L}, S={S}, B={B}, "
                    f"num_heads={self.num_heads}; got shape {shape_of(attn_mask)}"
                )
            mask = m
        if keep is None:
            return mask
        if mask is None:
            return keep
        if mask.dtype == torch.bool:
            return mask & keep
        return mask.masked_fill(~keep, float("-inf"))  # float mask: blocked positions become -inf

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        attn_mask: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        average_attn_weights: bool = False,
        kv_cache: KVCache | None = None,
        backend: str = "naive",
        tile_size: int = 8,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value`` with all heads.

        Args:
            query: (B, L, d_model).
            key: (B, S, kdim); default ``query`` (self-attention). Given, this is cross-attention,
                which is not causal unless ``is_causal=True`` is passed.
            value: (B, S, vdim); default ``key``.
            attn_mask: (L, S_total), (B, L, S_total) or (B, H, L, S_total); bool (True = may attend)
                or float (added to the scores), as in :func:`attn_lib.attention.scaled_dot_product_attention`.
            padding_mask: (B, S_total), True = real token (bool, or 0/1 integers like HuggingFace's
                ``attention_mask``); keys at False positions get no attention.
            is_causal: query i sees keys 0..i. Without a cache the triangle is aligned top-left (torch's
                convention); with ``kv_cache`` bottom-right: the L new queries are the last L of S_total
                positions, so feeding tokens one at a time or in chunks equals the full causal forward.
            need_weights: also return the attention weights (a bool).
            average_attn_weights: with ``need_weights``, return the weights averaged over the heads,
                (B, L, S_total), in the sense of ``torch.nn.MultiheadAttention`` (whose default is
                True; here False, the per-head weights (B, H, L, S_total), as the course shows them).
            kv_cache: a :class:`KVCache` (or any object with its ``seq_len`` and ``update``, and
                optionally ``check``, e.g. ``attn_lib.kv_cache.QuantizedKVCache``); the new keys/values (after
                RoPE) are appended to it and the queries attend over everything cached.
                S_total = tokens cached before + S.
            backend: ``"naive"`` (default: the (L, S_total) weights are built, attn_lib's SDPA) or ``"tiled"``:
                :func:`attn_lib.tiled.tiled_attention` (notebook 09), called with ``is_causal`` and
                ``causal_align="bottom_right"`` (with a cache, or L = S_total where both alignments agree;
                top-left otherwise, as above) and ``enable_gqa`` -- K and V are never repeated and the key
                tiles past the diagonal are skipped (:func:`attn_lib.tiled.skipped_tiles` counts them); only
                ``attn_mask``/``padding_mask`` travel as a dense mask. No weights (``need_weights=False``),
                no dropout.
            tile_size: queries and keys per tile of ``backend="tiled"`` (an int >= 1).

        Returns:
            (output, weights): output (B, L, d_model) in the input dtype; weights (B, H, L, S_total)
            (after dropout in training mode; (B, L, S_total) with ``average_attn_weights``) when
            ``need_weights`` else None.

        Raises:
            ValueError: wrong shapes of query/key/value/masks, a cache that does not match
                (the message names the shapes), NaN or infinity in query/key/value (or in their
                projections: NaN weights), integer padding_mask values other than 0/1.
            TypeError: a mask of the wrong type; is_causal, need_weights or average_attn_weights not a
                bool (``is_causal="yes"`` and ``1`` are refused, as torch's SDPA refuses them).
            ValueError: an unknown ``backend``; ``backend="tiled"`` with ``need_weights`` or dropout in
                training mode; no key at all (S_total = 0) for L >= 1 queries; attn_mask or padding_mask on
                another device than query; a float attn_mask with values the computation's dtype cannot hold;
                a kv_cache that already holds another layer's tokens (one cache per layer).
            TypeError: an integer attn_mask (torch's SDPA refuses it too: pass a bool mask).
            L = 0 or B = 0 gives an empty output (the cache untouched).
        """
        key, value = self._validate(query, key, value, attn_mask, padding_mask, is_causal, need_weights,
                                    average_attn_weights, kv_cache)
        check_choice("backend", backend, ("naive", "tiled"))
        if backend == "tiled":
            check_int("tile_size", tile_size, minimum=1)
            if need_weights:
                raise ValueError("backend='tiled' never builds the attention weights; use backend='naive' "
                                 "with need_weights=True")
            if self.training and self.dropout:
                raise ValueError(f"backend='tiled' has no attention dropout; got dropout={self.dropout} in "
                                 f"training mode (call .eval() or use backend='naive')")
        B, L, _ = query.shape
        S_new = key.shape[1]
        past = 0 if kv_cache is None else kv_cache.seq_len
        if L == 0 or B == 0:  # nothing to attend from: an empty output (and empty weights), the cache untouched
            out = self.out_proj(query.new_zeros(B, L, self.num_heads * self.head_dim))
            if not need_weights:
                return out, None
            w = query.new_zeros(B, self.num_heads, L, past + S_new)
            return out, (w.mean(dim=1) if average_attn_weights else w)
        if past + S_new == 0:
            raise ValueError(f"key and value need at least one position (S >= 1) for the softmax over keys, got key "
                             f"shape {shape_of(key)} and no cached token (query shape {shape_of(query)})")
        if kv_cache is not None:
            claim_cache(kv_cache, self, name="kv_cache")

        # projections, then split into heads:  (B, L, H·E) -> (B, H, L, E)
        qp, kp, vp = self.q_proj(query), self.k_proj(key), self.v_proj(value)  # (B, L, H·E), (B, S_new, Hkv·E)
        self._check_projections(**{"q_proj(query)": qp, "k_proj(key)": kp, "v_proj(value)": vp})
        q = split_heads(qp, self.num_heads)  # (B, H, L, E)
        k = split_heads(kp, self.num_kv_heads)  # (B, Hkv, S_new, E)
        v = split_heads(vp, self.num_kv_heads)  # (B, Hkv, S_new, E)

        if self.rope_base is not None:  # rotate at the true positions: the new tokens follow the `past` cached ones
            q = apply_rope(q, torch.arange(past, past + L, device=q.device), base=self.rope_base)
            k = apply_rope(k, torch.arange(past, past + S_new, device=k.device), base=self.rope_base)

        if kv_cache is not None:
            kv_cache.check(k, v)  # reject a mismatching cache before it is changed
        S = past + S_new
        bottom_right = kv_cache is not None
        if backend == "tiled":  # the causal part goes to the tiles as is_causal, so whole tiles can be skipped
            mask = self._build_mask(B, L, S, attn_mask, padding_mask, False, bottom_right,
                                    q.device, shape_of(query), shape_of(key))
        else:
            mask = self._build_mask(B, L, S, attn_mask, padding_mask, is_causal, bottom_right,
                                    q.device, shape_of(query), shape_of(key))
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, Hkv, S, E): everything cached so far

        if backend == "tiled":
            from attn_lib.tiled import tiled_attention  # notebook 09's loop (imported here: tiled is heavier)

            if mask is not None and mask.dtype != torch.bool:
                raise ValueError("backend='tiled' takes bool masks only (True = may attend), got a float attn_mask")
            align = "bottom_right" if (bottom_right or L == S) else "top_left"  # the same triangle as above
            heads = tiled_attention(q, k, v, attn_mask=mask, is_causal=is_causal, causal_align=align,
                                    enable_gqa=self.num_kv_heads != self.num_heads,
                                    block_q=tile_size, block_k=tile_size)  # (B, H, L, E); K, V not repeated
            return self.out_proj(merge_heads(heads)), None

        # per head: softmax(q kᵀ / sqrt(E) + mask) -> dropout -> · v; key/value head j // (H/Hkv) serves query head j
        heads, weights = _sdpa(q, k, v, mask, dropout_p=self.dropout if self.training else 0.0,
                               enable_gqa=self.num_kv_heads != self.num_heads)  # (B, H, L, E), (B, H, L, S)
        output = self.out_proj(merge_heads(heads))  # concat (B, L, H·E) -> W_O -> (B, L, d_model)
        if not need_weights:
            return output, None
        return output, (weights.mean(dim=1) if average_attn_weights else weights)  # (B, L, S) or (B, H, L, S)

    # ------------------------------------------------------------------ conversions
    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> "MultiHeadAttention":
        """A copy of a ``torch.nn.MultiheadAttention`` with its weights (any ``batch_first``).

        Its packed ``in_proj_weight`` (3·E, E) -- or separate ``q/k/v_proj_weight`` when kdim/vdim
        differ from E -- is split into ``q_proj``, ``k_proj``, ``v_proj``; ``out_proj`` is copied.
        The result is batch first whatever ``m.batch_first`` is: transpose (L, B, E) inputs yourself.
        torch's ``key_padding_mask`` uses True = ignore; pass ``padding_mask=~key_padding_mask``.

        Raises:
            TypeError: m is not a torch.nn.MultiheadAttention.
            ValueError: m uses ``add_bias_kv`` or ``add_zero_attn`` (not supported here).
        """
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"from_torch expects a torch.nn.MultiheadAttention, got {type(m).__name__}")
        if m.bias_k is not None or m.add_zero_attn:
            raise ValueError("from_torch: add_bias_kv=True and add_zero_attn=True are not supported")
        E = m.embed_dim
        bias = m.in_proj_bias is not None
        new = cls(E, m.num_heads, dropout=m.dropout, bias=bias, kdim=m.kdim, vdim=m.vdim)
        new = new.to(device=m.out_proj.weight.device, dtype=m.out_proj.weight.dtype)
        with torch.no_grad():
            if m._qkv_same_embed_dim:
                wq, wk, wv = m.in_proj_weight.chunk(3, dim=0)  # (3E, E) -> 3 x (E, E)
            else:
                wq, wk, wv = m.q_proj_weight, m.k_proj_weight, m.v_proj_weight
            for proj, w in ((new.q_proj, wq), (new.k_proj, wk), (new.v_proj, wv)):
                proj.weight.copy_(w)
            if bias:
                for proj, b in zip((new.q_proj, new.k_proj, new.v_proj), m.in_proj_bias.chunk(3)):
                    proj.bias.copy_(b)
            new.out_proj.weight.copy_(m.out_proj.weight)
            if bias:
                new.out_proj.bias.copy_(m.out_proj.bias)
        new.train(m.training)
        return new

    @classmethod
    def from_hf(cls, module: nn.Module, out_proj: nn.Linear | None = None) -> "MultiHeadAttention":
        """A copy of a HuggingFace attention block: BERT, GPT-2 or Llama-family.

        **GPT-2** (``GPT2Attention``, ``model.transformer.h[i].attn``): its ``c_attn`` and ``c_proj`` are
        ``Conv1D`` layers whose weights are stored transposed (in x out), so ``c_attn.weight`` (E, 3E)
        is split into W_Q, W_K, W_V and each transposed; ``out_proj`` = ``c_proj``. With
        ``is_causal=True`` the output equals the module's at positions 0..L-1 (before
        ``resid_dropout``, an identity in eval mode).

        **Llama** (``LlamaAttention`` and its copies: Mistral, Qwen2, ...; ``model.model.layers[i].self_attn``):
        ``q/k/v/o_proj`` copied (with their bias, if the config has ``attention_bias``), grouped-query
        heads (``num_key_value_heads``), the config's ``head_dim`` (which may differ from
        hidden_size / num_heads) and RoPE with the config's ``rope_theta`` (half-split, HF's
        ``rotate_half``). With ``is_causal=True`` the output equals the module's at positions 0..L-1;
        with a :class:`KVCache` decoding continues at the right positions. Only the default RoPE is
        supported (no ``rope_scaling`` such as Llama 3's).

        **BERT** (e.g. of ``attn_lib.load_pretrained()``'s model):

        HuggingFace splits BERT's attention in two: ``layer.attention.self`` (``BertSelfAttention``:
        the W_Q, W_K, W_V projections, the per-head attention and the concatenation) and
        ``layer.attention.output`` (``BertSelfOutput``: ``dense`` = W_O, then dropout, the residual
        and LayerNorm). So:

        - ``from_hf(layer.attention.self)``: q/k/v projections copied; ``out_proj`` is the identity
          (weight I, bias 0), so the output equals ``BertSelfAttention``'s output (the concatenated heads).
        - ``from_hf(layer.attention.self, layer.attention.output.dense)`` or
          ``from_hf(layer.attention)``: ``out_proj`` = W_O, so the output equals
          ``attention.output.dense(...)``, i.e. BERT's attention sublayer before its dropout,
          residual and LayerNorm.

        The per-head weights equal the model's ``outputs.attentions[i]`` (eager attention).
        Pass HuggingFace's ``attention_mask`` (1 = real token) as ``padding_mask``.

        tests/test_mha.py proves the BERT case on the bundled MiniLM; tests/test_mha_from_hf.py each case on
        tiny random GPT-2, Llama and BERT models built from transformers configs, in float64.

        Raises:
            TypeError: module is none of these attention blocks; out_proj is not nn.Linear.
            ValueError: out_proj's shape does not fit; a GPT-2 block that is cross-attention or scales
                by the inverse layer index or not at all; a Llama RoPE scaling other than the default.
        """
        gpt2 = hasattr(module, "c_attn") and hasattr(module, "c_proj")
        llama = all(hasattr(module, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "config"))
        if (gpt2 or llama) and out_proj is not None:
            raise ValueError(f"out_proj is only for BERT blocks; {type(module).__name__} brings its own output "
                             f"projection ({'c_proj' if gpt2 else 'o_proj'}), got out_proj={type(out_proj).__name__}")
        if gpt2:
            return cls._from_gpt2(module)
        if llama:
            return cls._from_llama(module)
        if out_proj is None and hasattr(module, "self") and hasattr(getattr(module, "output", None), "dense"):
            module, out_proj = module.self, module.output.dense
        needed = ("query", "key", "value", "num_attention_heads", "attention_head_size")
        if not all(hasattr(module, n) for n in needed):
            raise TypeError(
                f"from_hf expects a HuggingFace attention block: BERT (model.encoder.layer[i].attention.self "
                f"or .attention), GPT-2 (model.transformer.h[i].attn) or Llama-family "
                f"(model.model.layers[i].self_attn), got {type(module).__name__}"
            )
        if out_proj is not None and not isinstance(out_proj, nn.Linear):
            raise TypeError(f"out_proj must be an nn.Linear (e.g. attention.output.dense), got {type(out_proj).__name__}")
        wq = module.query.weight
        d_model = wq.shape[1]
        H, E = module.num_attention_heads, module.attention_head_size
        if H * E != d_model or module.key.weight.shape != wq.shape or module.value.weight.shape != wq.shape:
            raise ValueError(
                f"from_hf supports d_model = num_heads * head_dim with square projections; got query weight "
                f"{shape_of(wq)}, num_heads {H}, head_dim {E}"
            )
        if out_proj is not None and out_proj.weight.shape != (d_model, d_model):
            raise ValueError(f"out_proj weight must be ({d_model}, {d_model}), got {shape_of(out_proj.weight)}")
        dropout = module.dropout.p if isinstance(getattr(module, "dropout", None), nn.Dropout) else 0.0
        new = cls(d_model, H, dropout=dropout, bias=True).to(device=wq.device, dtype=wq.dtype)
        with torch.no_grad():
            for ours, theirs in ((new.q_proj, module.query), (new.k_proj, module.key), (new.v_proj, module.value)):
                ours.weight.copy_(theirs.weight)
                ours.bias.copy_(theirs.bias) if theirs.bias is not None else ours.bias.zero_()
            if out_proj is None:
                new.out_proj.weight.copy_(torch.eye(d_model, dtype=wq.dtype, device=wq.device))
                new.out_proj.bias.zero_()
            else:
                new.out_proj.weight.copy_(out_proj.weight)
                new.out_proj.bias.copy_(out_proj.bias) if out_proj.bias is not None else new.out_proj.bias.zero_()
        new.train(module.training)
        return new

    @classmethod
    def _from_gpt2(cls, module: nn.Module) -> "MultiHeadAttention":
        """``from_hf`` for GPT2Attention: Conv1D weights are (in, out), the transpose of nn.Linear's."""
        if getattr(module, "is_cross_attention", False):
            raise ValueError("from_hf: GPT-2 cross-attention blocks (q_attn) are not supported; pass a self-attention block")
        if getattr(module, "scale_attn_by_inverse_layer_idx", False) or not getattr(module, "scale_attn_weights", True):
            raise ValueError("from_hf: this GPT-2 block does not scale scores by 1/sqrt(head_dim) (scale_attn_weights=False "
                             "or scale_attn_by_inverse_layer_idx=True); only the standard scaling is supported")
        w, b = module.c_attn.weight, module.c_attn.bias  # (E, 3E) in x out, (3E,)
        E, H = module.embed_dim, module.num_heads
        dropout = module.attn_dropout.p if isinstance(getattr(module, "attn_dropout", None), nn.Dropout) else 0.0
        new = cls(E, H, dropout=dropout, bias=True, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            for proj, wi, bi in zip((new.q_proj, new.k_proj, new.v_proj), w.split(E, dim=1), b.split(E)):
                proj.weight.copy_(wi.T)  # (E_in, E_out) -> nn.Linear's (E_out, E_in)
                proj.bias.copy_(bi)
            new.out_proj.weight.copy_(module.c_proj.weight.T)
            new.out_proj.bias.copy_(module.c_proj.bias)
        new.train(module.training)
        return new

    @classmethod
    def _from_llama(cls, module: nn.Module) -> "MultiHeadAttention":
        """``from_hf`` for LlamaAttention-style blocks: separate projections, GQA, RoPE."""
        config = module.config
        rope = dict(getattr(config, "rope_parameters", None) or {})
        theta = rope.get("rope_theta", getattr(config, "rope_theta", None))
        rope_type = rope.get("rope_type", "default")
        if theta is None or rope_type != "default":
            raise ValueError(f"from_hf supports Llama-style blocks with the default RoPE (rope_theta, no scaling); "
                             f"got rope_type {rope_type!r}, rope_theta {theta!r}")
        H, Hkv = config.num_attention_heads, config.num_key_value_heads
        E = module.head_dim
        d_model = module.q_proj.weight.shape[1]
        bias = module.q_proj.bias is not None
        w = module.q_proj.weight
        new = cls(d_model, H, num_kv_heads=Hkv, head_dim=E, bias=bias, rope_base=float(theta),
                  dropout=float(getattr(config, "attention_dropout", 0.0) or 0.0), device=w.device, dtype=w.dtype)
        with torch.no_grad():
            for ours, theirs in ((new.q_proj, module.q_proj), (new.k_proj, module.k_proj),
                                 (new.v_proj, module.v_proj), (new.out_proj, module.o_proj)):
                ours.weight.copy_(theirs.weight)
                if bias:
                    ours.bias.copy_(theirs.bias) if theirs.bias is not None else ours.bias.zero_()
        new.train(module.training)
        return new
