"""Your multi-head plumbing (mirrors attn_lib.mha; notebook 05). B batch, L length, H heads, d_model = H · head_dim."""

from __future__ import annotations

import torch

import attn_lib.mha as _lib_mha
from my_attn._todo import todo


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, d_model) -> (B, H, L, head_dim): head h gets columns h·head_dim ... (h+1)·head_dim - 1.

    Returns:
        a tensor of shape (B, num_heads, L, d_model // num_heads).
    """
    todo("split_heads", "05", "2 · The mechanics, shape by shape")


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, head_dim) -> (B, L, H · head_dim), the inverse of split_heads."""
    todo("merge_heads", "05", "2 · The mechanics, shape by shape")


class MultiHeadAttention(_lib_mha.MultiHeadAttention):
    """Your multi-head attention (notebook 05, section "2 · The mechanics, shape by shape"), on YOUR pieces:
    my_attn.attention.scaled_dot_product_attention, my_attn.masks.causal_mask, and split_heads / merge_heads above.

    Given (inherited from attn_lib.mha.MultiHeadAttention, so ``from_torch``, ``from_hf`` and the notebooks' code work
    on your class): ``__init__`` with the same arguments, which creates the four ``nn.Linear`` ``q_proj``
    (d_model -> H·E), ``k_proj`` (kdim -> Hkv·E), ``v_proj`` (vdim -> Hkv·E), ``out_proj`` (H·E -> d_model) and
    stores ``d_model, num_heads, num_kv_heads, head_dim, dropout, rope_base``; and the input checks
    (``self._validate``). Yours: ``forward`` without a KV cache and with backend="naive" (the KV cache is notebook
    08's, the tiled backend notebook 09's: those calls still go to attn_lib's forward).

    ``forward(query (B, L, d_model), key (B, S, kdim) = query, value (B, S, vdim) = key, *, attn_mask, padding_mask,
    is_causal, need_weights, average_attn_weights, ...)`` returns ``(output (B, L, d_model), weights)``:

    1. q, k, v = the projections, split into heads: (B, H, L, E), (B, Hkv, S, E), (B, Hkv, S, E);
    2. with ``rope_base``: apply_rope(q and k, positions 0.., base=rope_base) (half-split): import yours,
       ``from my_attn.positional import apply_rope``, once it passes its check (notebook 04), and attn_lib's,
       ``from attn_lib.positional import apply_rope``, until then (a stub raises NotImplementedError);
    3. one mask, True = may attend: ``is_causal`` -> causal_mask(L, S) (top-left); ``padding_mask`` (B, S), True =
       real token (bool or 0/1 integers) -> (B, 1, 1, S); ``attn_mask`` (L, S), (B, L, S) -> (B, 1, L, S), or
       (B, H, L, S), bool or float (added to the scores); combine with ``&`` (a float mask gets -inf where blocked);
    4. heads, weights = YOUR scaled_dot_product_attention(q, k, v, mask, dropout_p=dropout in training mode else 0,
       enable_gqa=num_kv_heads != num_heads): (B, H, L, E), (B, H, L, S);
    5. output = out_proj(merge_heads(heads)); weights: None unless ``need_weights``, then (B, H, L, S), or their mean
       over the heads (B, L, S) with ``average_attn_weights``.

    Dtypes: the module's (float32 by default, ``.double()`` for float64); the output has the input's.
    """

    def forward(self, query, key=None, value=None, *, attn_mask=None, padding_mask=None, is_causal=False,
                need_weights=False, average_attn_weights=False, kv_cache=None, backend="naive", tile_size=8):
        if kv_cache is not None or backend != "naive":  # notebooks 08 and 09 extend this; attn_lib's for now
            return super().forward(query, key, value, attn_mask=attn_mask, padding_mask=padding_mask,
                                   is_causal=is_causal, need_weights=need_weights,
                                   average_attn_weights=average_attn_weights, kv_cache=kv_cache, backend=backend,
                                   tile_size=tile_size)
        key, value = self._validate(query, key, value, attn_mask, padding_mask, is_causal, need_weights,
                                    average_attn_weights, kv_cache)  # given: clear errors for bad inputs
        todo("MultiHeadAttention", "05", "2 · The mechanics, shape by shape")
