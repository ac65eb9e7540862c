"""Multi-head plumbing, solved (notebook 05)."""

from __future__ import annotations

import torch

import attn_lib.mha as _lib_mha
from my_attn.attention import scaled_dot_product_attention
from my_attn.masks import causal_mask
from my_attn.positional import apply_rope


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, L, d_model = x.shape
    return x.view(B, L, num_heads, d_model // num_heads).transpose(1, 2)               # (B, H, L, head_dim)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    B, H, L, hd = x.shape
    return x.transpose(1, 2).reshape(B, L, H * hd)                                     # (B, L, H·head_dim)


class MultiHeadAttention(_lib_mha.MultiHeadAttention):
    """Multi-head attention on my own pieces; __init__, from_torch, from_hf and the input checks are attn_lib's."""

    def forward(self, query, key=None, value=None, *, attn_mask=None, padding_mask=None, is_causal=False,
                need_weights=False, average_attn_weights=False, kv_cache=None, backend="naive", tile_size=8):
        if kv_cache is not None or backend != "naive":  # notebooks 08 and 09 extend this; attn_lib's for now
            return super().forward(query, key, value, attn_mask=attn_mask, padding_mask=padding_mask,
                                   is_causal=is_causal, need_weights=need_weights,
                                   average_attn_weights=average_attn_weights, kv_cache=kv_cache, backend=backend,
                                   tile_size=tile_size)
        key, value = self._validate(query, key, value, attn_mask, padding_mask, is_causal, need_weights,
                                    average_attn_weights, kv_cache)
        L, S = query.shape[1], key.shape[1]
        q = split_heads(self.q_proj(query), self.num_heads)                            # (B, H, L, E)
        k = split_heads(self.k_proj(key), self.num_kv_heads)                           # (B, Hkv, S, E)
        v = split_heads(self.v_proj(value), self.num_kv_heads)                         # (B, Hkv, S, E)
        if self.rope_base is not None:
            q = apply_rope(q, torch.arange(L, device=q.device), base=self.rope_base)
            k = apply_rope(k, torch.arange(S, device=k.device), base=self.rope_base)

        keep = causal_mask(L, S, device=q.device) if is_causal else None               # (L, S), True = may attend
        if padding_mask is not None:
            pad = padding_mask.to(device=q.device, dtype=torch.bool)[:, None, None, :]  # (B, 1, 1, S)
            keep = pad if keep is None else keep & pad
        mask = attn_mask
        if mask is not None and mask.dim() == 3:
            mask = mask[:, None]                                                       # (B, L, S) -> (B, 1, L, S)
        if keep is not None:
            if mask is None:
                mask = keep
            elif mask.dtype == torch.bool:
                mask = mask & keep
            else:
                mask = mask.masked_fill(~keep, float("-inf"))

        heads, weights = scaled_dot_product_attention(
            q, k, v, mask, dropout_p=self.dropout if self.training else 0.0,
            enable_gqa=self.num_kv_heads != self.num_heads)                             # (B, H, L, E), (B, H, L, S)
        output = self.out_proj(merge_heads(heads))                                     # (B, L, d_model)
        if not need_weights:
            return output, None
        return output, weights.mean(dim=1) if average_attn_weights else weights
